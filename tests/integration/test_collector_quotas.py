"""Two collector processes on one SeaweedFS: alerts for nodes without an agent never starve capture
for the nodes that have one (the poll marker written through one replica is seen by the other), an
agent token stores for its cluster only, and one node's uploads per hour are capped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from tests.support.collector_env import BUCKET, Collector, Weed, running_weed

from tests.support.collector_helpers import (  # isort: skip
    AGENT_TOKEN, ALERTING_TOKEN, HELLO, body, post, run, write_tokens)
from tests.support.alerts import alert, payload  # isort: skip

pytestmark = pytest.mark.slow


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


async def _call(method: str, url: str, token: str, data: bytes | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.request(method, url, data=data,
                                                       headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, json.loads(await r.read() or b"{}")


def test_agentless_alerts_cluster_binding_and_upload_rate_on_two_replicas(tmp_path: Path, weed: Weed) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    args = ("--cluster", HELLO.cluster, "--max-uploads-per-node-hour", "2", "--capture-max-in-flight", "3",
            "--capture-no-agent-max-in-flight", "2", "--capture-no-agent-ttl", "2m")
    store = f"s3://{BUCKET}/railscope"
    a = Collector(tmp_path, store, *args, tokens=tokens, endpoint=weed.endpoint).start()
    b = Collector(tmp_path, store, *args, tokens=tokens, endpoint=weed.endpoint).start()
    ghosts = [alert(f"ghost-{i:02d}", incident=f"inc-ghost-{i:02d}") for i in range(10)]

    async def go() -> dict:
        out: dict = {}
        out["ghosts"] = await _call("POST", a.url + "/v1/alerts", ALERTING_TOKEN, payload(ghosts, key="g"))
        # the agent of gpu-node-017 polls replica B; the alert for it arrives at replica A
        out["poll"] = await _call("GET", b.url + f"/v1/requests?node={HELLO.node}&wait=0", AGENT_TOKEN)
        out["live"] = await _call("POST", a.url + "/v1/alerts", ALERTING_TOKEN,
                                  payload([alert(HELLO.node, incident="inc-live")], key="l"))
        out["other_cluster"] = await post(a.url, body(replace(HELLO, cluster="staging", bundle="b1"), b"x"))
        out["uploads"] = [await post((a if i % 2 else b).url, body(replace(HELLO, bundle=f"b{i + 2}"), b"x"))
                          for i in range(3)]
        return out

    try:
        got = run(go())
    finally:
        a.stop()
        b.stop()
    status, ghosts_doc = got["ghosts"]
    assert status == 200 and len(ghosts_doc["no_recent_agent"]) == 2, ghosts_doc
    assert ghosts_doc["skipped"] == {"no_recent_agent_cap": 8}
    assert got["poll"][0] == 200
    assert got["live"][0] == 200 and [q["node"] for q in got["live"][1]["queued"]] == [HELLO.node], got["live"]
    assert got["live"][1]["no_recent_agent"] == []
    assert got["other_cluster"][0] == 403
    # the rate is per replica: two uploads through B and one through A are each within its 2 an hour
    assert [u[0] for u in got["uploads"]] == [200, 200, 200]
    keys = [o["Key"] for o in weed.client().list_objects_v2(Bucket=BUCKET, Prefix="railscope/").get("Contents", [])]
    assert not any("/staging/" in k for k in keys)
    assert any(k == f"railscope/_agents/{HELLO.cluster}/{HELLO.node}.json" for k in keys)  # by (cluster, node)


def test_one_node_past_its_hourly_uploads_is_told_when_to_come_back(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, str(tmp_path / "store"), "--max-uploads-per-node-hour", "2", tokens=tokens).start()

    async def go() -> list[tuple[int, dict, dict]]:
        return [await post(col.url, body(replace(HELLO, bundle=f"b{i}"), b"x")) for i in range(3)]

    try:
        got = run(go())
    finally:
        col.stop()
    assert [g[0] for g in got] == [200, 200, 429]
    assert 3500 <= int(got[2][2]["Retry-After"]) <= 3601
