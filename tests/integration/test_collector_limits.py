"""The collector under hostile input and load, as a process of its own over SeaweedFS: what one
small bundle can make a page cost, and what half-sent requests can hold."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from .collector_env import BUCKET, Collector, Weed, running_weed
from .hostile import hostile_bundle

from collector_helpers import AGENT_TOKEN, AGENT_TOKEN_18, HELLO, OPERATOR_TOKEN, body, post, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def _get(url: str, token: str = OPERATOR_TOKEN, timeout: float = 300) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_hostile_bundles_keep_pages_and_collector_small(tmp_path: Path, weed: Weed) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, f"s3://{BUCKET}/railscope", endpoint=weed.endpoint, tokens=tokens).start()
    try:
        keys = {}
        # 70,000 events of 300 characters (a 31 MB events.json in a bundle of a few hundred KiB),
        # and a recorder naming 50,000 netdevs.
        for name, node, token, data in (
                ("events", HELLO.node, AGENT_TOKEN, hostile_bundle(events=70_000, message=300)),
                ("netdevs", "gpu-node-018", AGENT_TOKEN_18, hostile_bundle(events=0, netdevs=50_000))):
            hello = replace(HELLO, node=node, bundle=f"b-{name}", incident="inc-hostile")
            status, doc, _ = asyncio.run(post(col.url, body(hello, data), token=token))
            assert status == 200, doc
            keys[name] = doc["key"]
        base_rss = col.rss_peak_kib()
        sizes = {}
        for name, key in keys.items():
            status, page = _get(f"{col.url}/ui/bundles/{key}")
            assert status == 200, page[:300]
            sizes[name] = len(page)
        date = keys["events"].split("/")[1]
        status, inc = _get(f"{col.url}/ui/incidents/{HELLO.cluster}/{date}/inc-hostile")
        assert status == 200 and b"gpu-node-018" in inc
        peak = col.rss_peak_kib()
        print(f"collector peak RSS {peak / 1024:.0f} MiB (before the pages {base_rss / 1024:.0f} MiB); "
              f"report pages {sizes['events'] / MiB:.2f} MiB (events), {sizes['netdevs'] / MiB:.2f} MiB (netdevs); "
              f"incident page {len(inc) / 1024:.0f} KiB")
        assert sizes["events"] < 2 * MiB and sizes["netdevs"] < 2 * MiB and len(inc) < 256 * 1024
        assert peak < 256 * 1024, f"collector peak RSS {peak / 1024:.0f} MiB"
        # The first events and series are shown, the rest counted.
        assert "69,800 more events" in _get(f"{col.url}/ui/bundles/{keys['events']}")[1].decode()
        assert "49,968 more netdevs" in _get(f"{col.url}/ui/bundles/{keys['netdevs']}")[1].decode()
        # /healthz was never starved meanwhile, and the analysis cache is two objects per bundle.
        assert _get(f"{col.url}/healthz")[0] == 200
    finally:
        col.stop()
