"""``railscope_rail_gids``: a rail's GID table by RoCE version and address family, a rail without one
read has no series (unknown is not 0)."""

from __future__ import annotations

import dataclasses

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.metrics.exposition import render
from agent.metrics.state import MetricsState
from agent.model import RdmaGid
from tests.support import nodes
from tests.support.metrics_expo import series


def _text(gids: tuple[RdmaGid, ...]) -> list[tuple[str, dict[str, str], float]]:
    snap = dataclasses.replace(nodes.node(), gids=gids)
    topo = build_topology(snap, Expectations())
    return [s for s in series(render(MetricsState(snapshot=snap, topology=topo)))
            if s[0] == "railscope_rail_gids"]


def test_a_rail_with_only_link_local_gids_reads_0_for_roce_v2_ipv4() -> None:
    rail0 = "net_rail0"  # the first rail netdev of the example node
    got = _text((RdmaGid(rail0, "rdma_rail0", 1, 0, "fe80:0000:0000:0000:a4ed:ccff:fe8b:1994", "IB/RoCE v1"),
                 RdmaGid(rail0, "rdma_rail0", 1, 1, "fe80:0000:0000:0000:a4ed:ccff:fe8b:1994", "RoCE v2")))
    by = {(lab["device"], lab["type"], lab["family"]): v for _n, lab, v in got}
    assert by[(rail0, "RoCE v2", "ipv4")] == 0 and by[(rail0, "RoCE v2", "ipv6")] == 1
    assert len(got) == 4  # four series for the one rail read, none for the rails not read


def test_an_ipv4_mapped_roce_v2_gid_counts_as_ipv4() -> None:
    rail0 = "net_rail0"
    got = _text((RdmaGid(rail0, "rdma_rail0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a98:000c", "RoCE v2"),))
    by = {(lab["type"], lab["family"]): v for _n, lab, v in got}
    assert by[("RoCE v2", "ipv4")] == 1


def test_no_gids_read_no_series() -> None:
    assert _text(()) == []
