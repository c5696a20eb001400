"""RepresentorStale: one finding per PF, names in the evidence; OVS orphans."""

from __future__ import annotations

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.model import OvsInterface
from tests.support import nodes
from tests.support.nodes import found

PF0, PF1 = (f"pci/{b}" for b in nodes.PCIS[:2])


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


def test_stale_finding_names_the_pf_its_netdev_the_representors_and_the_ovs_ports():
    snap = nodes.set_numvfs(nodes.node(numvfs=3), nodes.PCIS[0], 1)
    snap = nodes.with_ovs(snap, OvsInterface("net_rail0_3", "", 0, -1, "down"), OvsInterface("stray", "", 0, 5, None))
    node_f, pf_f = diagnose(snap, Expectations(), kernel_table=()).findings
    assert pf_f.message == (f"{PF0} (net_rail0): 2 representor(s) of VFs that do not exist (sriov_numvfs 1): "
                            "net_rail0_1, net_rail0_2; 1 OVS port(s) whose netdev is gone: net_rail0_3")
    assert pf_f.evidence == {"numvfs": 1, "stale_representors": ["net_rail0_1", "net_rail0_2"],
                             "ovs_orphans": ["net_rail0_3"], "ovs_reasons": {"net_rail0_3": "ofport -1"}}
    assert (node_f.subject, node_f.message) == ("node", "1 OVS port(s) whose netdev is gone: stray")
    assert node_f.evidence == {"ovs_orphans": ["stray"], "ovs_reasons": {"stray": "ifindex 0"}}


def test_ovs_orphans_alone_make_the_pf_finding():
    snap = nodes.with_ovs(nodes.node(), OvsInterface("net_rail1_4", "", 0, -1, "down"))
    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert (f.subject, f.message) == (PF1, f"{PF1} (net_rail1): 1 OVS port(s) whose netdev is gone: net_rail1_4")
    assert f.evidence == {"numvfs": 1, "ovs_orphans": ["net_rail1_4"], "ovs_reasons": {"net_rail1_4": "ofport -1"}}


def test_a_clean_pf_does_not_stop_the_next_being_judged():
    snap = nodes.set_numvfs(nodes.node(numvfs=2), nodes.PCIS[1], 1)
    assert found(snap) == [("RepresentorStale", "warning", PF1)]


def test_orphans_of_several_owners_are_one_finding_each():
    snap = nodes.with_ovs(nodes.node(), OvsInterface("stray", "", 0, 5, None), OvsInterface("net_rail1_4", "", 0, -1, None),
                          OvsInterface("net_rail0_7", "", 0, -1, None))
    assert found(snap) == [("RepresentorStale", "warning", "node"), ("RepresentorStale", "warning", PF0),
                           ("RepresentorStale", "warning", PF1)]


def test_a_pf_whose_netdev_is_gone_says_so():
    snap = nodes.set_numvfs(nodes.drop_link(nodes.node(), "net_rail1"), nodes.PCIS[1], 0)
    (f,) = [f for f in diagnose(snap, Expectations(), kernel_table=()).findings if f.code == "RepresentorStale"]
    assert f.message == f"{PF1} (no netdev): 1 representor(s) of VFs that do not exist (sriov_numvfs 0): net_rail1_0"
