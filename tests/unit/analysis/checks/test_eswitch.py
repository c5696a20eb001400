"""EswitchModeUnexpected and EswMultiportUnexpected: expectations judge rail NICs only."""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from tests.support import nodes
from tests.support.nodes import found

PF0, PF1 = (f"pci/{b}" for b in nodes.PCIS[:2])


def one_nic(snap):
    return replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[0]) if ln.phys_switch_id else ln
                                     for ln in snap.links))


def test_no_expectation_judges_nothing():
    assert found(nodes.node(mode="legacy")) == []


def test_mode_expected_switchdev_on_legacy_pf():
    snap = nodes.set_mode(nodes.node(), PF1, "legacy")
    assert found(snap, Expectations(eswitch_mode="switchdev")) == [("EswitchModeUnexpected", "warning", PF1)]


def test_pf_without_vfs_or_unreadable_mode_is_not_judged():
    snap = nodes.set_numvfs(nodes.set_mode(nodes.node(), PF1, "legacy"), nodes.PCIS[1], 0)
    snap = nodes.drop_link(snap, "net_rail1_0")
    snap = nodes.set_mode(snap, PF0, None)
    assert found(snap, Expectations(eswitch_mode="switchdev")) == []


def test_legacy_pf_with_both_expectations_gets_both_codes():
    snap = nodes.set_mode(nodes.node(rails=1), PF0, "legacy")
    got = found(snap, Expectations(eswitch_mode="switchdev", esw_multiport=True))
    assert got == [("EswMultiportUnexpected", "warning", PF0), ("EswitchModeUnexpected", "warning", PF0)]


def test_multiport_expectation_subject_is_the_lowest_pf():
    snap = one_nic(nodes.node())
    assert found(snap, Expectations(esw_multiport=True)) == [("EswMultiportUnexpected", "warning", PF0)]
    assert found(snap, Expectations(esw_multiport=False)) == []


def test_torn_value_is_reported_on_the_pf_that_differs():
    snap = nodes.set_param(one_nic(nodes.node()), PF1, "esw_multiport", True)
    assert found(snap) == [("EswMultiportUnexpected", "warning", PF1)]


def test_unreadable_param_raises_nothing():
    snap = replace(nodes.node(), params=())
    assert found(snap, Expectations(esw_multiport=True)) == []


def test_nics_without_rails_are_not_judged_by_expectations():
    snap = nodes.node(rails=2)
    snap = replace(snap, rules=tuple(r for r in snap.rules if r.pci == nodes.PCIS[0]))
    snap = nodes.set_mode(snap, PF1, "legacy")
    assert found(snap, Expectations(eswitch_mode="switchdev")) == []


def test_multiport_expectation_judges_only_nics_that_carry_rails():
    """A NIC without a rail (storage, management) may run any LAG mode: --expect-esw-multiport is about
    the rails' NICs only, while the same value on a rail's NIC is judged."""
    off_rail = replace(nodes.node(rails=2), rules=tuple(r for r in nodes.node(rails=2).rules if r.pci == nodes.PCIS[0]))
    off_rail = nodes.replace_link(off_rail, "net_rail1", ifname="ens9f0np0")
    off_rail = nodes.set_param(off_rail, PF1, "esw_multiport", True)
    assert found(off_rail, Expectations(esw_multiport=False)) == []
    on_rail = nodes.set_param(nodes.node(), PF1, "esw_multiport", True)
    assert found(on_rail, Expectations(esw_multiport=False)) == [("EswMultiportUnexpected", "warning", PF1)]


def only(snap, exp):
    (f,) = diagnose(snap, exp, kernel_table=()).findings
    return f


def test_mode_finding_names_the_pf_vfs_mode_and_expectation():
    f = only(nodes.set_mode(nodes.node(), PF1, "legacy"), Expectations(eswitch_mode="switchdev"))
    assert f.message == f"{PF1} (net_rail1) has 1 VF(s) and its eswitch is legacy, expected switchdev"
    assert f.evidence == {"mode": "legacy", "expected": "switchdev", "numvfs": 1, "netdev": "net_rail1"}


def test_multiport_finding_says_value_expectation_and_that_it_is_runtime_only():
    f = only(one_nic(nodes.node()), Expectations(esw_multiport=True))
    assert f.message == (f"esw_multiport (multiport eswitch LAG) is false on the NIC of {PF0}, expected true "
                         "(runtime-only: a reboot or driver reload resets it)")
    assert f.evidence == {"value": False, "expected": True, "switch_id": nodes.SWITCH_IDS[0], "pfs": [PF0, PF1]}


def test_multiport_read_on_another_pf_keeps_the_lowest_pf_as_subject_and_says_where_it_was_read():
    snap = one_nic(nodes.node())
    snap = replace(snap, params=tuple(p for p in snap.params if (p.handle, p.name) != (PF0, "esw_multiport")))
    f = only(snap, Expectations(esw_multiport=True))
    assert f.subject == PF0
    assert f"on the NIC of {PF0} (read on {PF1}), expected true" in f.message


def test_torn_finding_names_both_values_and_every_pfs_reading():
    f = only(nodes.set_param(one_nic(nodes.node()), PF1, "esw_multiport", True), Expectations())
    assert f.message == f"torn LAG state: esw_multiport is true on {PF1} but false on {PF0}, PFs of the same NIC"
    assert f.evidence == {"value": True, "nic_value": False, "lowest_pf": PF0, "switch_id": nodes.SWITCH_IDS[0],
                          "by_pf": {PF0: False, PF1: True}}


def test_every_rail_nic_is_judged():
    snap = nodes.set_mode(nodes.set_mode(nodes.node(), PF0, "legacy"), PF1, "legacy")
    assert found(snap, Expectations(eswitch_mode="switchdev")) == [
        ("EswitchModeUnexpected", "warning", PF0), ("EswitchModeUnexpected", "warning", PF1)]
    assert found(nodes.node(), Expectations(esw_multiport=True)) == [
        ("EswMultiportUnexpected", "warning", PF0), ("EswMultiportUnexpected", "warning", PF1)]


def test_a_pf_not_judged_does_not_stop_the_next_pf_of_its_nic():
    snap = nodes.set_mode(nodes.set_numvfs(one_nic(nodes.node()), nodes.PCIS[0], 0), PF1, "legacy")
    snap = nodes.drop_link(snap, "net_rail0_0")
    assert found(snap, Expectations(eswitch_mode="switchdev")) == [("EswitchModeUnexpected", "warning", PF1)]


def test_a_pf_whose_netdev_is_gone_says_so():
    snap = nodes.set_mode(nodes.drop_link(nodes.node(), "net_rail1"), PF1, "legacy")
    (f,) = [f for f in diagnose(snap, Expectations(eswitch_mode="switchdev"), kernel_table=()).findings
            if f.code == "EswitchModeUnexpected"]
    assert f.message == f"{PF1} (no netdev) has 1 VF(s) and its eswitch is legacy, expected switchdev"


def test_a_nic_whose_multiport_is_unreadable_does_not_stop_the_next_nic():
    snap = replace(nodes.node(), params=tuple(p for p in nodes.node().params if (p.handle, p.name) != (PF0, "esw_multiport")))
    assert found(snap, Expectations(esw_multiport=True)) == [("EswMultiportUnexpected", "warning", PF1)]
