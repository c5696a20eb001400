"""A rail's pause and loss counters from its ethtool statistics: PFC per priority, 802.3x global pause,
the stall watchdog's storm counters, per-priority traffic and discards. Rendered with each rail (the
rails subject calls it), so the families keep the rail's place in the exposition. A counter the NIC
does not have is left out, never exported as 0: a missing PFC key means PFC is off or unsupported on
that priority."""

from __future__ import annotations

from agent.metrics.families import RAIL, Families

__all__ = ["render_rail"]

_DIRECTIONS = ("rx", "tx")
_PRIOS = range(8)


def render_rail(fams: Families, base: tuple[str, ...], c: dict[str, int]) -> None:
    """The rail's PFC, global pause, storm, per-priority traffic and discard counters (ethtool statistics)."""
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
