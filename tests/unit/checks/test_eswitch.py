"""EswitchModeUnexpected and EswMultiportUnexpected: expectations judge rail NICs only."""

from __future__ import annotations

from dataclasses import replace

import nodes
from test_rails import found

from agent.config import Expectations

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
