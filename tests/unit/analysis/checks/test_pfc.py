"""PfcDisabled, GlobalPauseEnabled, and the cumulative (info) PfcStorm / LosslessDrops."""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from tests.support import nodes
from tests.support.nodes import found


def test_no_prio3_pause_counters_is_pfc_disabled():
    snap = nodes.set_counters(nodes.node(), "net_rail1", rx_prio3_pause=None, tx_prio3_pause=None)
    assert found(snap) == [("PfcDisabled", "warning", "net_rail1")]


def test_lossless_prio_is_configurable():
    assert found(nodes.node(), Expectations(lossless_prio=4)) == [
        ("PfcDisabled", "warning", "net_rail0"), ("PfcDisabled", "warning", "net_rail1")]


def test_global_pause_keys_but_not_pause_ctrl_phy():
    snap = nodes.set_counters(nodes.node(), "net_rail0", rx_global_pause=10, tx_global_pause=3)
    assert found(snap) == [("GlobalPauseEnabled", "warning", "net_rail0")]


def test_cumulative_storm_and_drops_are_info():
    snap = nodes.set_counters(nodes.node(), "net_rail0", tx_pause_storm_error_events=2, rx_prio3_buf_discard=7,
                              rx_discards_phy=100)
    assert found(snap) == [("LosslessDrops", "info", "net_rail0"), ("PfcStorm", "info", "net_rail0")]


def test_rx_discards_phy_alone_is_evidence_only():
    assert found(nodes.set_counters(nodes.node(), "net_rail0", rx_discards_phy=100)) == []


def test_missing_ethtool_stats_judge_nothing():
    assert found(replace(nodes.node(), ethtool=())) == []


def test_pause_counters_in_one_direction_are_pfc_enabled():
    """PfcDisabled needs both directions' counters missing: a NIC that counts only received (or only
    sent) pause on the lossless priority has PFC on."""
    rx_only = nodes.set_counters(nodes.node(), "net_rail1", tx_prio3_pause=None)
    tx_only = nodes.set_counters(nodes.node(), "net_rail1", rx_prio3_pause=None)
    assert found(rx_only) == [] and found(tx_only) == []


def only(snap, exp=None):
    (f,) = diagnose(snap, exp or Expectations(), kernel_table=()).findings
    return f


def test_pfc_disabled_names_the_netdev_and_the_priority():
    f = only(nodes.set_counters(nodes.node(), "net_rail1", rx_prio3_pause=None, tx_prio3_pause=None))
    assert f.message == "net_rail1: no PFC counters for the lossless priority 3 (PFC off or unsupported on prio 3)"
    assert f.evidence == {"netdev": "net_rail1", "prio": 3}


def test_pfc_findings_on_a_renamed_rail_name_the_actual_netdev_under_the_rails_subject():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0")
    snap = replace(snap, ethtool=tuple(replace(st, netdev="enp141s0f0np0") if st.netdev == "net_rail1" else st
                                       for st in snap.ethtool))
    snap = nodes.set_counters(snap, "enp141s0f0np0", rx_prio3_pause=None, tx_prio3_pause=None)
    got = [(f.code, f.subject, f.evidence.get("netdev")) for f in diagnose(snap, Expectations(), kernel_table=()).findings]
    assert ("PfcDisabled", "net_rail1", "enp141s0f0np0") in got


def test_global_pause_evidence_is_every_global_pause_counter():
    f = only(nodes.set_counters(nodes.node(), "net_rail0", rx_global_pause=10, tx_global_pause=3))
    assert f.message == "net_rail0: 802.3x global pause is on (stops all traffic, not only the lossless priority)"
    assert f.evidence == {"netdev": "net_rail0", "counters": {"rx_global_pause": 10, "tx_global_pause": 3}}


def test_cumulative_findings_give_the_counts_since_the_driver_loaded():
    snap = nodes.set_counters(nodes.node(), "net_rail0", tx_pause_storm_error_events=2, tx_pause_storm_warning_events=5,
                              rx_prio3_buf_discard=7, rx_prio3_discards=3, rx_discards_phy=100)
    drops, storm = diagnose(snap, Expectations(), kernel_table=()).findings
    assert drops.message == ("net_rail0: 10 packet(s) of the lossless priority 3 dropped since the driver loaded "
                             "(cumulative; no rate in this snapshot)")
    assert drops.evidence == {"netdev": "net_rail0", "counters": {"rx_prio3_discards": 3, "rx_prio3_buf_discard": 7},
                              "rx_discards_phy": 100}
    assert storm.message == ("net_rail0: the NIC's pause-storm watchdog fired 2 time(s) since the driver loaded "
                             "(cumulative; no rate in this snapshot)")
    assert storm.evidence == {"netdev": "net_rail0", "tx_pause_storm_error_events": 2,
                              "tx_pause_storm_warning_events": 5}


def test_a_rail_without_a_netdev_or_stats_does_not_stop_the_others_being_judged():
    gone = nodes.set_counters(nodes.drop_link(nodes.node(), "net_rail0"), "net_rail1", rx_prio3_pause=None,
                              tx_prio3_pause=None)
    assert ("PfcDisabled", "warning", "net_rail1") in found(gone)
    no_stats = replace(nodes.node(), ethtool=tuple(st for st in nodes.node().ethtool if st.netdev != "net_rail0"))
    no_stats = nodes.set_counters(no_stats, "net_rail1", rx_prio3_pause=None, tx_prio3_pause=None)
    assert found(no_stats) == [("PfcDisabled", "warning", "net_rail1")]
