"""A collector process killed mid-stream: nothing visible, what it left is swept at the next start,
and the agent's spooled bundle lands exactly once when a collector is back (local store and S3)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from agent.capture.upload import drain_spool
from agent.clients.collector import CollectorClient, RetryPolicy
from tests.support.collector_env import BUCKET, Collector, Weed, running_weed

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, body, files, spool_bundle, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20
DATA = os.urandom(14 * MiB)
FAST = RetryPolicy(attempts=3, base_s=0.05, cap_s=0.1)


async def _drain(spool: object, url: str):  # type: ignore[no-untyped-def]
    async with CollectorClient(url, token=AGENT_TOKEN) as client:
        return await drain_spool(spool, client, retry=FAST)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def _spool(spool: Path) -> None:
    spool_bundle(spool, HELLO, DATA, time.time())


async def _send_until_killed(col: Collector, raw: bytes, kill_after: int) -> str:
    async def gen():  # type: ignore[no-untyped-def]
        yield raw[:kill_after]
        await asyncio.sleep(1.0)  # parts reach the store
        col.stop(hard=True)
        yield raw[kill_after:]

    headers = {"Authorization": f"Bearer {AGENT_TOKEN}"}
    try:
        async with aiohttp.ClientSession() as s, s.post(col.url + "/v1/bundles", data=gen(), headers=headers) as r:
            return f"answered {r.status}"
    except (aiohttp.ClientError, ConnectionError) as exc:
        return type(exc).__name__


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_collector_killed_mid_stream(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    if kind == "s3":
        weed = request.getfixturevalue("weed")
        store, extra = f"s3://{BUCKET}/railscope", {"endpoint": weed.endpoint}
    else:
        store, extra = str(tmp_path / "store"), {}
    args = ("--part-size", "5M")
    col = Collector(tmp_path, store, *args, tokens=tokens, **extra).start()
    outcome = asyncio.run(_send_until_killed(col, body(HELLO, DATA, chunk=MiB), 11 * MiB))
    assert outcome != "answered 200"

    if kind == "s3":
        assert weed.objects() == []
        left_behind = weed.uploads()
        assert len(left_behind) == 1  # the killed replica's multipart upload, invisible
    else:
        visible = [f for f in files(tmp_path / "store") if not Path(f).name.startswith(".")]
        assert visible == []
        assert len(files(tmp_path / "store")) == 1  # its hidden temporary file

    # The next replica sweeps what is older than --stale-part-age (0 here: nothing else is running).
    col2 = Collector(tmp_path, store, *args, "--stale-part-age", "0.001s", tokens=tokens,
                     **extra).start()
    try:
        time.sleep(0.2)
        if kind == "s3":
            assert weed.uploads() == []
        else:
            assert files(tmp_path / "store") == []
        spool = tmp_path / "spool"
        _spool(spool)
        first = asyncio.run(_drain(spool, col2.url))
        _spool(tmp_path / "spool2")  # the same capture spooled twice (an agent restart resent it)
        second = asyncio.run(_drain(tmp_path / "spool2", col2.url))
    finally:
        col2.stop()
    assert [r.status for r in first.sent] == ["stored"] and [r.status for r in second.sent] == ["duplicate"]
    assert list(spool.glob("*.tar.gz")) == []
    if kind == "s3":
        names = weed.objects()
        assert len(names) == 2 and names[0].endswith(f"{HELLO.bundle}.tar.gz") and weed.uploads() == []
    else:
        names = files(tmp_path / "store")
        assert len(names) == 2 and names[0].endswith(f"{HELLO.bundle}.tar.gz")
        assert (tmp_path / "store" / names[0]).read_bytes() == DATA


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_running_replica_sweeps_what_a_killed_one_left(tmp_path: Path, kind: str,
                                                         request: pytest.FixtureRequest) -> None:
    """No restart needed: a replica that keeps running removes another's stale parts on its own."""
    tokens = write_tokens(tmp_path / "tokens")
    if kind == "s3":
        weed = request.getfixturevalue("weed")
        store, extra = f"s3://{BUCKET}/railscope", {"endpoint": weed.endpoint}
    else:
        store, extra = str(tmp_path / "store"), {}
    args = ("--part-size", "5M", "--stale-part-age", "3s")
    survivor = Collector(tmp_path, store, *args, tokens=tokens, **extra).start()
    victim = Collector(tmp_path, store, *args, tokens=tokens, **extra).start()
    try:
        outcome = asyncio.run(_send_until_killed(victim, body(HELLO, DATA, chunk=MiB), 11 * MiB))
        assert outcome != "answered 200"

        def left() -> list[str]:
            if kind == "s3":
                return weed.uploads()
            return [f for f in files(tmp_path / "store") if f.endswith(".part")]

        assert len(left()) == 1
        deadline = time.monotonic() + 30
        while left():
            assert time.monotonic() < deadline, f"still there after 30 s: {left()}"
            time.sleep(0.5)
    finally:
        survivor.stop()
        victim.stop()
