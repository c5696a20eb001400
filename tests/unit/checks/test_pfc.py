"""PfcDisabled, GlobalPauseEnabled, and the cumulative (info) PfcStorm / LosslessDrops."""

from __future__ import annotations

from dataclasses import replace

import nodes
from test_rails import found

from agent.config import Expectations


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
