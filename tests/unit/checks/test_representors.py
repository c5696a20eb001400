"""RepresentorStale: one finding per PF, names in the evidence; OVS orphans."""

from __future__ import annotations

import nodes
from test_rails import found

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.model import OvsInterface

PF0 = f"pci/{nodes.PCIS[0]}"


def test_representors_beyond_numvfs_are_one_finding_per_pf():
    snap = nodes.set_numvfs(nodes.node(numvfs=3), nodes.PCIS[0], 1)
    diag = diagnose(snap, Expectations(), kernel_table=())
    assert [(f.code, f.severity, f.subject) for f in diag.findings] == [("RepresentorStale", "warning", PF0)]
    assert diag.findings[0].evidence["stale_representors"] == ["net_rail0_1", "net_rail0_2"]
    # rails[] counts every representor of the PF, stale ones included
    assert diag.rails[0].representors == 3 and diag.rails[0].numvfs == 1


def test_zero_vfs_makes_every_representor_stale():
    snap = nodes.set_numvfs(nodes.node(), nodes.PCIS[0], 0)
    assert found(snap) == [("RepresentorStale", "warning", PF0)]


def test_ovs_orphans_join_their_pf_finding_or_go_to_node():
    snap = nodes.with_ovs(nodes.node(), OvsInterface("net_rail0_3", "", 0, -1, "down"),
                          OvsInterface("stray", "", 0, 5, None), OvsInterface("net_rail0_0", "", 6, 2, "up"))
    diag = diagnose(snap, Expectations(), kernel_table=())
    assert [(f.code, f.subject) for f in diag.findings] == [("RepresentorStale", "node"), ("RepresentorStale", PF0)]
    assert diag.findings[1].evidence["ovs_orphans"] == ["net_rail0_3"]


def test_representor_link_down_alone_is_normal():
    snap = nodes.replace_link(nodes.node(), "net_rail0_0", operstate="DOWN", carrier=0)
    assert found(snap) == []
