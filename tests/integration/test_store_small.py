"""The stores' small objects (capture requests, cached analyses): one contract, the local directory and
S3 on a real SeaweedFS alike, so nothing above the store needs to know which it talks to."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.config import CollectorSettings, StoreURL
from collector.storage import Store, StoreError, open_store
from tests.support.collector_env import BUCKET, Weed, running_weed

from tests.support.collector_helpers import local_settings, run  # isort: skip


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Weed]:
    with running_weed(tmp_path_factory.mktemp("weed")) as w:
        yield w


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> CollectorSettings:
    if request.param == "local":
        return local_settings(tmp_path)
    w: Weed = request.getfixturevalue("weed")
    w.clear()
    return CollectorSettings(store=StoreURL(kind="s3", bucket=BUCKET, prefix="railscope"),
                             s3_endpoint_url=w.endpoint, insecure_dev=True)


def _with(settings: CollectorSettings, fn) -> object:  # type: ignore[no-untyped-def]
    async def go() -> object:
        store: Store = open_store(settings)
        await store.start()
        try:
            return await fn(store)
        finally:
            await store.close()
    return run(go())


def test_put_get_list_delete(settings: CollectorSettings) -> None:
    async def go(store: Store) -> None:
        rel = "_requests/gpu-node-017/b1.json"
        assert await store.get_small(rel, 100) is None
        assert await store.list_small("_requests") == []
        assert await store.put_small(rel, b'{"a":1}')
        assert await store.put_small("_requests/gpu-node-018/b2.json", b"{}")
        assert await store.get_small(rel, 100) == b'{"a":1}'
        assert await store.get_small(rel, 3) == b'{"a'  # a caller asks one byte past its cap to see more
        listed = await store.list_small("_requests")
        assert [r for r, _tag in listed] == ["_requests/gpu-node-017/b1.json", "_requests/gpu-node-018/b2.json"]
        assert await store.list_small("_requests/gpu-node-018") == [listed[1]]
        await asyncio.sleep(1.1)  # S3's LastModified has one-second resolution
        assert await store.put_small(rel, b'{"a":2}')
        again = dict(await store.list_small("_requests"))
        assert again[rel] != dict(listed)[rel]  # rewritten: a new version tag
        await store.delete_small(rel)
        await store.delete_small(rel)  # absent is no error
        assert await store.get_small(rel, 100) is None
        assert [r for r, _tag in await store.list_small("_requests")] == ["_requests/gpu-node-018/b2.json"]

    _with(settings, go)


def test_listing_with_times_reads_no_object(settings: CollectorSettings) -> None:
    """The agents' poll markers are judged by the listing's last-modified time alone."""
    import time

    async def go(store: Store) -> None:
        assert await store.list_small_times("_agents") == []
        before = time.time()
        await store.put_small("_agents/gpu-node-017.json", b"{}")
        await store.put_small("_agents/gpu-node-018.json", b"{}")
        listed = await store.list_small_times("_agents")
        assert [r for r, _at in listed] == ["_agents/gpu-node-017.json", "_agents/gpu-node-018.json"]
        # S3's LastModified is whole seconds, from the server's clock (here the same host)
        assert all(before - 2 <= at <= time.time() + 2 for _r, at in listed)
    _with(settings, go)


def test_only_new_never_overwrites(settings: CollectorSettings) -> None:
    async def go(store: Store) -> None:
        rel = "_requests/gpu-node-017/b1.json"
        assert await store.put_small(rel, b"first", only_new=True)
        assert not await store.put_small(rel, b"second", only_new=True)
        assert await store.get_small(rel, 100) == b"first"
        assert len(await store.list_small("_requests")) == 1  # nothing half-written left beside it

    _with(settings, go)


@pytest.mark.parametrize("rel", ["", "/etc/passwd", "../x.json", "a/../../x.json", "a//b.json", "a/./b"])
def test_a_key_outside_the_prefix_is_refused(settings: CollectorSettings, rel: str) -> None:
    async def go(store: Store) -> None:
        for call in (store.put_small(rel, b"{}"), store.get_small(rel, 10), store.delete_small(rel)):
            with pytest.raises(ValueError, match="not a relative store key"):
                await call

    _with(settings, go)


def test_a_store_that_fails_says_so(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)
    (tmp_path / "store").write_text("a file where the directory should be")

    async def go(store: Store) -> None:
        with pytest.raises(StoreError):
            await store.put_small("_requests/n/b.json", b"{}")

    async def whole() -> None:
        await go(open_store(settings))

    run(whole())
