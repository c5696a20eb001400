"""The per-node upload budget of a replica: per (cluster, node), in uploads and in bytes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.support.collector_helpers import (
    AGENT_TOKEN,
    AGENT_TOKEN_18,
    HELLO,
    body,
    local_settings,
    post,
    run,
    running,
)


def test_the_per_node_upload_budget_is_per_cluster_and_node(tmp_path: Path) -> None:
    """Node names repeat across clusters: cluster B's n1 does not spend cluster A's n1's budget."""
    tokens = tmp_path / "tokens"
    settings = local_settings(tmp_path, max_uploads_per_node_hour=1)
    agent_a, agent_b = "agent-token-n1-cluster-a-000000", "agent-token-n1-cluster-b-000000"
    (tokens / "agent").write_text(f"n1 {agent_a} cluster-a\nn1 {agent_b} cluster-b\n")

    async def go() -> list[int]:
        async with running(settings) as (url, _col):
            out = []
            for token, cluster, bid in ((agent_a, "cluster-a", "b1"), (agent_b, "cluster-b", "b2"),
                                        (agent_a, "cluster-a", "b3")):
                hello = replace(HELLO, node="n1", cluster=cluster, bundle=bid)
                out.append((await post(url, body(hello, b"x" * 100), token=token))[0])
            return out

    assert run(go()) == [200, 200, 429]



def test_the_per_node_budget_counts_bytes_not_only_uploads(tmp_path: Path) -> None:
    """Two bundles of 600 bytes pass a 1,000-byte budget (the second is admitted under it); the third is
    429 with a Retry-After within the hour; another node's budget is its own."""
    settings = local_settings(tmp_path, max_upload_bytes_per_node_hour=1000)

    async def go() -> list:
        async with running(settings) as (url, _col):
            out = []
            for token, node, bid in ((AGENT_TOKEN, "gpu-node-017", "b1"), (AGENT_TOKEN, "gpu-node-017", "b2"),
                                     (AGENT_TOKEN, "gpu-node-017", "b3"), (AGENT_TOKEN_18, "gpu-node-018", "b4")):
                status, doc, headers = await post(url, body(replace(HELLO, node=node, bundle=bid), b"y" * 600),
                                                  token=token)
                out.append((status, headers.get("Retry-After"), doc.get("message", "")))
            return out

    got = run(go())
    assert [s for s, _r, _m in got] == [200, 200, 429, 200]
    assert 1 <= int(got[2][1]) <= 3601 and "--max-upload-bytes-per-node-hour" in got[2][2]
