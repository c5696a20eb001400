"""PfcDisabled, GlobalPauseEnabled, and the one-snapshot (``info``) PfcStorm / LosslessDrops.

On mlx5 (kernel ``mlx5/counters.rst``) the per-priority pause counters exist only for priorities with
PFC enabled, so a missing key means *off or unsupported*, never 0; ``*_global_pause*`` keys exist only
while 802.3x link pause is on (``*_pause_ctrl_phy`` exist on every port and prove nothing). One
snapshot's counters are cumulative since the driver loaded: they can say a storm or a drop *happened*
(``info``), never that it is happening — that needs rates (``checks/history.py``).
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot


def lossless_discard_keys(prio: int) -> tuple[str, ...]:
    # rx_discards_phy is evidence only: it counts lossy priorities too.
    return (f"rx_prio{prio}_discards", f"rx_prio{prio}_buf_discard", f"rx_prio{prio}_cong_discard")


STORM_ERROR = "tx_pause_storm_error_events"


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    p = exp.lossless_prio
    for rail in topo.rails:
        if rail.netdev is None:
            continue
        stats = snap.ethtool_of(rail.netdev.ifname)
        if stats is None:
            continue
        c = stats.as_dict()
        subject = rail.expected_netdev
        if f"rx_prio{p}_pause" not in c and f"tx_prio{p}_pause" not in c:
            out.append(finding("PfcDisabled", subject,
                               f"{rail.netdev.ifname}: no PFC counters for the lossless priority {p} "
                               f"(PFC off or unsupported on prio {p})", netdev=rail.netdev.ifname, prio=p))
        glob = sorted(k for k in c if "_global_pause" in k)
        if glob:
            out.append(finding("GlobalPauseEnabled", subject,
                               f"{rail.netdev.ifname}: 802.3x global pause is on (stops all traffic, not only "
                               f"the lossless priority)", netdev=rail.netdev.ifname,
                               counters={k: c[k] for k in glob}))
        storms = c.get(STORM_ERROR)
        if storms:
            out.append(finding("PfcStorm", subject,
                               f"{rail.netdev.ifname}: the NIC's pause-storm watchdog fired {storms} time(s) since "
                               f"the driver loaded (cumulative; no rate in this snapshot)", severity="info",
                               netdev=rail.netdev.ifname, **{STORM_ERROR: storms,
                               "tx_pause_storm_warning_events": c.get("tx_pause_storm_warning_events")}))
        drops = {k: c[k] for k in lossless_discard_keys(p) if c.get(k)}
        if drops:
            out.append(finding("LosslessDrops", subject,
                               f"{rail.netdev.ifname}: {sum(drops.values())} packet(s) of the lossless priority "
                               f"{p} dropped since the driver loaded (cumulative; no rate in this snapshot)",
                               severity="info", netdev=rail.netdev.ifname, counters=drops,
                               rx_discards_phy=c.get("rx_discards_phy")))
    return out


CHECKS = (Check(50, ("PfcDisabled", "GlobalPauseEnabled", "PfcStorm", "LosslessDrops"), lambda i: check(i.snap, i.topo, i.exp)),)
