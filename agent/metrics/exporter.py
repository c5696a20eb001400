"""The agent's metrics exporter (a Prometheus custom collector, in client_python's words; "collector" in
railscope is the central service): fresh families from the latest sample at every scrape.

Follows client_python's ``process_collector.py``: ``collect()`` builds new metric families from the
current ``MetricsState`` each time, so a representor (or a rail, or a finding) that is gone from the
sample is gone from ``/metrics`` — no labelled global gauge keeps a stale series alive (maintainers'
answer in https://github.com/prometheus/client_python/issues/532).

Naming and budget follow DESIGN §5: prefix ``railscope_``, base units, ``_total`` on counters,
``_info`` gauges = 1 with facts as labels, and never a ``node`` / ``cluster`` label (Prometheus target
labels carry those). A counter the NIC does not have is left out, never exported as 0: a missing PFC
key means PFC is off or unsupported on that priority.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from agent import __version__
from agent.analysis.checks.health import reporters_of
from agent.analysis.topology import Pf, Rail
from agent.findings import RailRow
from agent.metrics import degradation
from agent.metrics.readiness import readiness
from agent.metrics.state import MetricsState
from agent.model import Link, RdmaDevice, RdmaLink, Snapshot

__all__ = ["RDMA_HW_COUNTERS", "RailscopeExporter"]

RAIL = ("rail", "plane", "device")
PF = ("pci", "device")

#: RoCE congestion and loss counters of ``/sys/class/infiniband/<dev>/ports/<p>/hw_counters`` that
#: the rail's uplink port exports (mlx5 ``counters.c``; meanings in tests/fixtures/public/mlx5/COUNTERS.md).
RDMA_HW_COUNTERS: tuple[tuple[str, str], ...] = (
    ("np_ecn_marked_roce_packets", "RoCE packets received with ECN CE set (this port is the notification point)."),
    ("np_cnp_sent", "CNPs sent back to senders after CE-marked packets (DCQCN notification point)."),
    ("rp_cnp_handled", "CNPs received and acted on by lowering the send rate (DCQCN reaction point)."),
    ("rp_cnp_ignored", "CNPs received but ignored; rising means DCQCN reaction point misconfigured."),
    ("out_of_sequence", "Packets received out of order, usually after a drop on a lossless fabric."),
    ("packet_seq_err", "NAKs for sequence errors received: the remote saw a gap."),
    ("implied_nak_seq_err", "Implied NAK sequence errors (read / atomic responses out of order)."),
    ("local_ack_timeout_err", "ACK timeouts on requester QPs (retransmissions)."),
    ("duplicate_request", "Duplicate requests received: the peer retransmitted."),
    ("rnr_nak_retry_err", "RNR NAKs received: the remote receiver had no receive posted."),
    ("out_of_buffer", "Packets dropped because a receive queue had no WQE posted."),
    ("rx_icrc_encapsulated", "RoCE packets received with a bad ICRC."),
    ("roce_adp_retrans", "Adaptive retransmission events."),
    ("roce_adp_retrans_to", "Adaptive retransmission timeouts."),
    ("roce_slow_restart", "Slow-restart events."),
    ("roce_slow_restart_cnps", "CNPs received during slow restart."),
    ("roce_slow_restart_trans", "Transitions into slow restart."),
    ("req_cqe_error", "Requester completions with an error."),
    ("resp_cqe_error", "Responder completions with an error."),
)

#: IB PMA counters (``counters/*``) of the uplink port that are not traffic volume.
RDMA_PORT_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("port_xmit_discards", "rdma_port_transmit_discards", "Packets the port discarded at transmit."),
    ("port_rcv_errors", "rdma_port_receive_errors", "Packets received with errors."),
    ("symbol_error", "rdma_port_symbol_errors", "Symbol errors on the physical link."),
    ("link_downed", "rdma_port_link_downed", "Times the link went down after error recovery failed."),
)

#: ``rdma link`` state words -> IB port state numbers (IBTA; sysfs ``ports/<p>/state`` prints them).
RDMA_STATES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
#: ``rdma link`` physical state words -> IB physical port state numbers (sysfs ``phys_state``).
RDMA_PHYS_STATES = {"SLEEP": 1, "POLLING": 2, "DISABLED": 3, "PORT_CONFIGURATION_TRAINING": 4,
                    "LINK_UP": 5, "LINK_ERROR_RECOVERY": 6, "PHY_TEST": 7}
#: rtnetlink ``IF_OPER_*`` values (RFC 2863), include/uapi/linux/if.h.
OPER_STATES = {"UNKNOWN": 0, "NOTPRESENT": 1, "DOWN": 2, "LOWERLAYERDOWN": 3, "TESTING": 4,
               "DORMANT": 5, "UP": 6}

_DIRECTIONS = ("rx", "tx")
_PRIOS = range(8)


def _s(value: Any) -> str:
    """A label value: None -> "" (Prometheus treats an empty label as absent), bools as words."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Families:
    """Families created on first use, emitted in creation order, empty ones left out."""

    def __init__(self) -> None:
        self._fams: dict[str, Metric] = {}
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def _get(self, cls: type, name: str, doc: str, labels: Iterable[str], values: list[str]) -> Any:
        # Two samples with one label set make Prometheus reject them; a node that confuses the
        # topology (two rules naming one rail) must not cost the whole scrape. The first one wins.
        key = (name, tuple(values))
        if key in self._seen:
            return None
        self._seen.add(key)
        fam = self._fams.get(name)
        if fam is None:
            fam = cls(name, doc, labels=list(labels))
            self._fams[name] = fam
        return fam

    def gauge(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str], value: float) -> None:
        vals = list(values)
        fam = self._get(GaugeMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, value)

    def counter(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str], value: float) -> None:
        vals = list(values)
        fam = self._get(CounterMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, value)

    def info(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str],
             facts: dict[str, str]) -> None:
        vals = list(values)
        fam = self._get(InfoMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, facts)

    def __iter__(self) -> Iterator[Metric]:
        return (f for f in self._fams.values() if f.samples)


class RailscopeExporter:
    """Renders the current ``MetricsState``.

    ``get_state`` returns the latest state (the daemon swaps it whole after each sample);
    ``clock`` gives "now" for ``railscope_sample_age_seconds``; ``representor_include`` is a regex on
    representor netdev names that turns on per-representor series (off by default: a node of
    8 PFs x 127 VFs would add a thousand series per family).
    """

    def __init__(self, get_state: Callable[[], MetricsState | None], *,
                 clock: Callable[[], float] = time.time,
                 representor_include: str | re.Pattern[str] | None = None) -> None:
        self._get_state = get_state
        self._clock = clock
        if isinstance(representor_include, str):
            representor_include = re.compile(representor_include)
        self._rep_include = representor_include

    def describe(self) -> list[Metric]:
        # Registering must not render a sample: the family set depends on the node.
        return []

    def collect(self) -> Iterator[Metric]:
        state = self._get_state() or MetricsState()
        fams = _Families()
        self._meta(fams, state)
        snap = state.snapshot
        if snap is not None:
            self._node(fams, snap)
            self._daemons(fams, snap, state)
            topo = state.topology
            if topo is not None:
                rows = {(r.rail, r.plane): r for r in (state.diagnosis.rails if state.diagnosis else ())}
                for rail in topo.rails:
                    self._rail(fams, snap, rail, rows.get((rail.rail, rail.plane)))
                for pf in topo.pfs:
                    self._pf(fams, pf)
                for pf in topo.rail_pfs:
                    self._health(fams, snap, pf)
                degradation.render(fams, snap, topo)
                readiness(fams, snap, topo)
        if state.diagnosis is not None:
            for f in state.diagnosis.findings:
                fams.gauge("railscope_finding",
                           "1 for each current finding of railscope doctor (codes in DESIGN §4).",
                           ("code", "severity", "subject"), (f.code, f.severity, f.subject), 1)
        yield from fams

    # -- the agent itself --------------------------------------------------------------------
    def _meta(self, fams: _Families, state: MetricsState) -> None:
        fams.info("railscope_build", "The railscope agent's version.", ("version",), (__version__,), {})
        for src in sorted(state.sources, key=lambda s: s.source):
            fams.gauge("railscope_scrape_collector_success",
                       "1 when the last read of this source completed, 0 when it failed or did not finish.",
                       ("source",), (src.source,), 1 if src.success else 0)
            fams.gauge("railscope_scrape_collector_duration_seconds",
                       "How long the last read of this source took.",
                       ("source",), (src.source,), src.duration_s)
        for h in sorted(state.hung, key=lambda h: (h.source, h.device)):
            fams.gauge("railscope_source_hung",
                       "1 while a read of this source on this device is stuck in the kernel; it is not retried.",
                       ("source", "device"), (h.source, h.device), 1)
        taken = state.sample_time
        if taken is not None:
            fams.gauge("railscope_sample_age_seconds", "Age of the sample this scrape serves.",
                       (), (), max(0.0, self._clock() - taken))
        b = state.budget
        if b is not None:
            if b.cpu_ratio is not None:
                fams.gauge("railscope_agent_cpu_ratio",
                           "The agent's own CPU use over the last guard interval, in cores (1 = one core busy).",
                           (), (), b.cpu_ratio)
            # resident memory is railscope_agent_resident_memory_bytes of the agent's own collector
            for what, limit in (("cpu", b.cpu_limit), ("rss", b.rss_limit)):
                if limit is not None:
                    fams.gauge("railscope_agent_budget_limit",
                               "The budget the agent keeps to (--budget-cpu in cores, --budget-rss in bytes).",
                               ("resource",), (what,), limit)
                    fams.gauge("railscope_agent_budget_exceeded",
                               "1 while the agent's own use of this resource is above its budget.",
                               ("resource",), (what,), 1 if what in b.over else 0)
            for src in b.paused:
                fams.gauge("railscope_source_paused",
                           "1 while this optional source is paused by the agent's budget guard.",
                           ("source",), (src,), 1)
            fams.counter("railscope_agent_budget_pauses",
                         "Times the budget guard paused the optional sources since the agent started.",
                         (), (), b.pauses)
        for code in sorted(set(state.event_codes) | set(state.event_counts)):
            fams.counter("railscope_events",
                         "Events the agent's detectors raised since it started, by event code (LinkFlapping, PfcStorm, ...).",
                         ("code",), (code,), state.event_counts.get(code, 0))

    # -- node-wide facts ---------------------------------------------------------------------
    def _node(self, fams: _Families, snap: Snapshot) -> None:
        v = snap.versions
        if v.kernel:
            fams.info("railscope_kernel", "The running kernel (/proc/sys/kernel/osrelease).",
                      ("release",), (v.kernel,), {})
        if v.mlx5_version or v.mlx5_srcversion:
            # srcversion changes on every driver swap, including the DOCA driver container putting
            # the inbox driver back when its pod ends; the version string alone may not.
            fams.info("railscope_driver", "The loaded mlx5_core module (/sys/module/mlx5_core).",
                      ("driver", "version", "srcversion"),
                      ("mlx5_core", _s(v.mlx5_version), _s(v.mlx5_srcversion)), {})
        mode = snap.rdma_netns or {"Y": "shared", "N": "exclusive"}.get((v.netns_mode or "").strip().upper())
        if mode:
            fams.info("railscope_rdma_netns", "The RDMA subsystem's network namespace mode (shared or exclusive).",
                      ("mode",), (mode,), {})

    # -- the daemons a rail depends on -------------------------------------------------------
    def _daemons(self, fams: _Families, snap: Snapshot, state: MetricsState) -> None:
        """One series per daemon (a handful a node), the sums over its processes."""
        by: dict[str, list[Any]] = {}
        for p in snap.processes:
            by.setdefault(p.daemon, []).append(p)
        for daemon in sorted(set(by) | set(state.daemon_restarts)):
            procs = by.get(daemon, [])
            lab = (daemon,)
            fams.gauge("railscope_daemon_processes", "Processes of this daemon running now (0: it is not).",
                       ("daemon",), lab, len(procs))
            fams.counter("railscope_daemon_restarts",
                         "Restarts of this daemon seen since the agent started (a process replaced by another).",
                         ("daemon",), lab, state.daemon_restarts.get(daemon, 0))
            if not procs:
                continue
            cpu = [p.cpu_seconds for p in procs if p.cpu_seconds is not None]
            if cpu:
                fams.counter("railscope_daemon_cpu_seconds",
                             "User and system CPU of this daemon's processes (rate() is cores busy; a restart resets it).",
                             ("daemon",), lab, sum(cpu))
            rss = [p.rss_bytes for p in procs if p.rss_bytes is not None]
            if rss:
                fams.gauge("railscope_daemon_resident_memory_bytes", "Resident memory of this daemon's processes.",
                           ("daemon",), lab, sum(rss))
            starts = [p.start_time for p in procs if p.start_time is not None]
            if starts:
                fams.gauge("railscope_daemon_start_time_seconds",
                           "When this daemon's newest process started (unix seconds).", ("daemon",), lab, max(starts))

    # -- per rail ----------------------------------------------------------------------------
    def _rail(self, fams: _Families, snap: Snapshot, rail: Rail, row: RailRow | None) -> None:
        link: Link | None = rail.netdev
        netdev = link.ifname if link is not None else rail.expected_netdev
        base = (_s(rail.rail), _s(rail.plane), _s(netdev))
        rdma_link = rail.rdma
        fams.info("railscope_rail", "A rail: its netdev, PCI function and RDMA device.",
                  RAIL, base, {"pci": _s(rail.pci), "rdma": _s(rdma_link.dev if rdma_link else None)})
        fams.gauge("railscope_rail_up",
                   "1 when the rail netdev is oper up with carrier, 0 when it is down or missing.",
                   RAIL, base, 1 if link is not None and link.is_oper_up else 0)
        if link is None:
            return
        if link.operstate in OPER_STATES:
            fams.gauge("railscope_rail_oper_state",
                       "Kernel operstate as IF_OPER_* (0 unknown, 2 down, 3 lowerlayerdown, 5 dormant, 6 up).",
                       RAIL, base, OPER_STATES[link.operstate])
        if link.carrier is not None:
            fams.gauge("railscope_rail_carrier", "1 when the rail netdev has carrier.", RAIL, base, link.carrier)
        for attr, name, doc in (
            ("carrier_changes", "railscope_rail_carrier_changes", "Carrier changes of the rail netdev."),
            ("carrier_up_count", "railscope_rail_carrier_up_changes", "Carrier gains of the rail netdev."),
            ("carrier_down_count", "railscope_rail_carrier_down_changes", "Carrier losses of the rail netdev."),
        ):
            val = getattr(link, attr)
            if val is not None:
                fams.counter(name, doc, RAIL, base, val)
        speed = link.speed_mbps
        if speed is None and row is not None:
            speed = row.speed_mbps
        if speed is not None and speed > 0:
            fams.gauge("railscope_rail_speed_bytes", "Link speed in bytes per second (/sys/class/net/<if>/speed).",
                       RAIL, base, speed * 1_000_000 / 8)
        if link.mtu is not None:
            fams.gauge("railscope_rail_mtu_bytes", "MTU of the rail netdev.", RAIL, base, link.mtu)
        stats = dict(link.stats64 or ())
        for key, name, doc in (
            ("bytes", "railscope_rail_bytes", "Bytes through the rail netdev (rtnetlink stats64)."),
            ("packets", "railscope_rail_packets", "Packets through the rail netdev (rtnetlink stats64)."),
            ("errors", "railscope_rail_errors", "Errored packets on the rail netdev (rtnetlink stats64)."),
            ("dropped", "railscope_rail_dropped", "Packets the rail netdev dropped (rtnetlink stats64)."),
        ):
            for d in _DIRECTIONS:
                if f"{d}_{key}" in stats:
                    fams.counter(name, doc, (*RAIL, "direction"), (*base, d), stats[f"{d}_{key}"])
        est = snap.ethtool_of(link.ifname)
        if est is not None:
            self._ethtool(fams, base, est.as_dict())
        drv = snap.driver_of(link.ifname)
        if drv is not None and (drv.firmware or drv.psid):
            fams.info("railscope_firmware", "NIC firmware of the rail (ethtool -i).", RAIL, base,
                      {"version": _s(drv.firmware), "psid": _s(drv.psid)})
        if rdma_link is not None:
            self._rdma(fams, snap, rail, rdma_link)

    def _ethtool(self, fams: _Families, base: tuple[str, ...], c: dict[str, int]) -> None:
        labels = (*RAIL, "prio", "direction")
        for p in _PRIOS:
            for d in _DIRECTIONS:
                # The driver counts pause duration in microseconds (mlx5 counters.rst).
                for suffix, name, doc, per_unit in (
                    ("pause", "railscope_pfc_pause_frames", "PFC pause frames on this priority.", 1),
                    ("pause_duration", "railscope_pfc_pause_duration_seconds",
                     "Time paused by PFC on this priority: rx = our transmit held off by the switch, "
                     "tx = pause we asked the switch for.", 1_000_000),
                    ("pause_transition", "railscope_pfc_pause_transitions",
                     "PFC XOFF to XON transitions on this priority.", 1),
                ):
                    key = f"{d}_prio{p}_{suffix}"
                    if key in c:
                        fams.counter(name, doc, labels, (*base, str(p), d), c[key] / per_unit)
        for d in _DIRECTIONS:
            for suffix, name, doc, per_unit in (
                ("global_pause", "railscope_global_pause_frames",
                 "802.3x link-level pause frames (present only when global pause is on).", 1),
                ("global_pause_duration", "railscope_global_pause_duration_seconds",
                 "Time paused by 802.3x link-level pause.", 1_000_000),
            ):
                key = f"{d}_{suffix}"
                if key in c:
                    fams.counter(name, doc, (*RAIL, "direction"), (*base, d), c[key] / per_unit)
        for key, name, doc in (
            ("tx_pause_storm_warning_events", "railscope_pause_storm_warning_events",
             "The NIC's stall watchdog saw pause sent past the warning watermark."),
            ("tx_pause_storm_error_events", "railscope_pause_storm_error_events",
             "The NIC's stall watchdog hit the critical watermark and stopped sending pause."),
        ):
            if key in c:
                fams.counter(name, doc, RAIL, base, c[key])
        for p in _PRIOS:
            for d in _DIRECTIONS:
                for suffix, name, doc in (
                    ("bytes", "railscope_prio_bytes", "Bytes on the wire on this priority."),
                    ("packets", "railscope_prio_packets", "Packets on the wire on this priority."),
                ):
                    key = f"{d}_prio{p}_{suffix}"
                    if key in c:
                        fams.counter(name, doc, labels, (*base, str(p), d), c[key])
        prio = (*RAIL, "prio")
        for p in _PRIOS:
            for suffix, name, doc in (
                ("discards", "railscope_prio_discards",
                 "Received packets of this priority dropped for lack of a receive buffer."),
                ("buf_discard", "railscope_prio_buffer_discards",
                 "Received packets of this priority dropped for lack of per-host buffer."),
                ("cong_discard", "railscope_prio_congestion_discards",
                 "Received packets of this priority dropped by per-host congestion control."),
                ("marked", "railscope_prio_ecn_marked_packets",
                 "Received packets of this priority the NIC ECN-marked for per-host congestion."),
            ):
                key = f"rx_prio{p}_{suffix}"
                if key in c:
                    fams.counter(name, doc, prio, (*base, str(p)), c[key])
        for d in _DIRECTIONS:
            key = f"{d}_discards_phy"
            if key in c:
                fams.counter("railscope_port_discards",
                             "Packets the physical port dropped (rx: no buffer, all priorities; "
                             "tx: link down or held off too long).",
                             (*RAIL, "direction"), (*base, d), c[key])
        if "rx_out_of_buffer" in c:
            fams.counter("railscope_rx_out_of_buffer",
                         "Times a receive queue had no software buffer posted (the host is too slow).",
                         RAIL, base, c["rx_out_of_buffer"])

    def _rdma(self, fams: _Families, snap: Snapshot, rail: Rail, rl: RdmaLink) -> None:
        base = (_s(rail.rail), _s(rail.plane), _s(rl.dev))
        up = rl.state == "ACTIVE" and rl.physical_state in (None, "LINK_UP")
        fams.gauge("railscope_rdma_port_up",
                   "1 when the rail's RDMA port is ACTIVE with the physical link up.", RAIL, base, 1 if up else 0)
        if rl.state in RDMA_STATES:
            fams.gauge("railscope_rdma_port_state",
                       "IB port state of the rail's RDMA port (1 down, 2 init, 3 armed, 4 active).",
                       RAIL, base, RDMA_STATES[rl.state])
        if rl.physical_state in RDMA_PHYS_STATES:
            fams.gauge("railscope_rdma_port_physical_state",
                       "IB physical port state (2 polling, 3 disabled, 5 link up, 6 error recovery).",
                       RAIL, base, RDMA_PHYS_STATES[rl.physical_state])
        dev: RdmaDevice | None = rail.rdma_device if rail.rdma_device is not None and \
            rail.rdma_device.name == rl.dev else next((d for d in snap.rdma_devices if d.name == rl.dev), None)
        if dev is None:
            return
        # Only the uplink port: in switchdev the PF's RDMA device has one port per representor.
        c = {name: val for port, name, val in dev.counters if port == rl.port}
        for key, doc in RDMA_HW_COUNTERS:
            if key in c:
                fams.counter(f"railscope_rdma_{key}", doc, RAIL, base, c[key])
        for d, key in (("rx", "port_rcv_data"), ("tx", "port_xmit_data")):
            if key in c:
                # IB PMA data counters count 4-byte words.
                fams.counter("railscope_rdma_port_bytes", "Bytes through the rail's RDMA port.",
                             (*RAIL, "direction"), (*base, d), c[key] * 4)
        for d, key in (("rx", "port_rcv_packets"), ("tx", "port_xmit_packets")):
            if key in c:
                fams.counter("railscope_rdma_port_packets", "Packets through the rail's RDMA port.",
                             (*RAIL, "direction"), (*base, d), c[key])
        for key, name, doc in RDMA_PORT_COUNTERS:
            if key in c:
                fams.counter(f"railscope_{name}", doc, RAIL, base, c[key])

    # -- per PF: SR-IOV, representors, eswitch, devlink params --------------------------------
    def _pf(self, fams: _Families, pf: Pf) -> None:
        base = (_s(pf.bdf), _s(pf.netdev))
        if pf.numvfs is not None:
            fams.gauge("railscope_sriov_vfs", "VFs enabled on the PF (sriov_numvfs).", PF, base, pf.numvfs)
        if pf.totalvfs is not None:
            fams.gauge("railscope_sriov_vfs_max", "VFs the PF supports (sriov_totalvfs).", PF, base, pf.totalvfs)
        reps = pf.representors
        fams.gauge("railscope_representors", "Representor netdevs the PF owns (VFs and SFs), stale ones included.",
                   PF, base, len(reps))
        fams.gauge("railscope_representors_stale",
                   "Representors for VF indexes at or above sriov_numvfs (a leak: their VF is gone).",
                   PF, base, len(pf.stale_representors))
        fams.gauge("railscope_representors_down", "Representors that are not oper up.",
                   PF, base, len(pf.representors_down))
        if self._rep_include is not None:
            for r in reps:
                if not self._rep_include.search(r.netdev):
                    continue
                fams.gauge("railscope_representor_up",
                           "1 when the representor is oper up (opt-in, names matching --representor-include).",
                           ("pci", "device"), (_s(pf.bdf), r.netdev), 1 if r.up else 0)
                fams.gauge("railscope_representor_stale",
                           "1 when the representor's VF index is at or above sriov_numvfs (opt-in).",
                           ("pci", "device"), (_s(pf.bdf), r.netdev), 1 if r.stale else 0)
                # Only when the sampler read statistics for this representor: bulk dumps carry none
                # (each one is a firmware query on mlx5, DESIGN §3).
                stats = dict(r.link.stats64 or ())
                for key, name, doc in (
                    ("bytes", "railscope_representor_bytes", "Bytes through the representor (opt-in)."),
                    ("packets", "railscope_representor_packets", "Packets through the representor (opt-in)."),
                ):
                    for d in _DIRECTIONS:
                        if f"{d}_{key}" in stats:
                            fams.counter(name, doc, ("pci", "device", "direction"), (_s(pf.bdf), r.netdev, d),
                                         stats[f"{d}_{key}"])
        if pf.eswitch_mode is not None:
            fams.info("railscope_devlink_eswitch", "The PF's eswitch mode (devlink dev eswitch show).",
                      PF, base, {"mode": _s(pf.eswitch_mode)})
        for pname, value in _params(pf):
            fams.info("railscope_devlink_param", "A watched devlink parameter of the PF (runtime value).",
                      (*PF, "param"), (*base, pname), {"value": _s(value)})


    def _health(self, fams: _Families, snap: Snapshot, pf: Pf) -> None:
        """The rail PF's devlink health reporters, its ports' included (one series per reporter name:
        the worst state and the largest counts when two ports have a reporter of the same name)."""
        base = (_s(pf.bdf), _s(pf.netdev))
        by_name: dict[str, tuple[int, int | None]] = {}
        for r in reporters_of(pf, snap.health):
            if r.state is None:
                continue
            state, errors = by_name.get(r.name, (0, None))
            err = r.error if errors is None else max(errors, r.error or 0)
            by_name[r.name] = (max(state, 1 if r.state == "error" else 0), err)
        for name in sorted(by_name):
            state, errors = by_name[name]
            fams.gauge("railscope_devlink_health_reporter_state",
                       "1 while the PF's devlink health reporter is in state error, 0 when healthy.",
                       (*PF, "reporter"), (*base, name), state)
            if errors is not None:
                fams.counter("railscope_devlink_health_reporter_errors",
                             "Errors the PF's devlink health reporter saw since the driver loaded.",
                             (*PF, "reporter"), (*base, name), errors)


def _params(pf: Pf) -> list[tuple[str, Any]]:
    """(name, value) of the PF's watched devlink params that could be read, sorted by name."""
    return sorted((n, v) for n, v in pf.params if v is not None)
