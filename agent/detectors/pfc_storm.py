"""PfcStorm: the rail's NIC floods the fabric with pause frames on the lossless priority.

Critical when ``tx_pause_storm_error_events`` rose (the NIC's stall watchdog hit its critical
watermark and stopped sending pause, so drops may follow), or when the transmitted pause duration
on the lossless priority grew by at least ``storm_ratio`` of wall time over the last
``storm_window_s`` (between two samples while fewer exist). ``tx_pause_storm_warning_events``
rising alone is a warning. Received pause is the node being a victim of someone else's storm:
evidence, never a storm of its own. A counter that goes down (driver reload) re-baselines.
Counter meanings and units: https://docs.kernel.org/networking/device_drivers/ethernet/mellanox/mlx5/counters.html
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import counter_delta, episode_fires, make_event
from agent.detectors.observations import CountersObs
from agent.model import Event

__all__ = ["PfcStormState", "initial", "step"]

CODE = "PfcStorm"
ERROR_EVENTS = "tx_pause_storm_error_events"
WARNING_EVENTS = "tx_pause_storm_warning_events"
#: A rail that sends no sample for this long is forgotten (renamed or gone).
_FORGET_S = 3600.0
#: At most this many duration samples are kept per window.
_SAMPLES_PER_WINDOW = 120


@dataclass(frozen=True, slots=True)
class _Port:
    seen: float
    error_events: int | None = None
    warning_events: int | None = None
    #: (time, tx pause duration µs, rx pause duration µs) within the window plus one sample
    #: before it, oldest first: the oldest is the anchor the ratio is measured from.
    durations: tuple[tuple[float, int, int | None], ...] = ()
    critical_last: float | None = None
    warning_last: float | None = None


@dataclass(frozen=True, slots=True)
class PfcStormState:
    th: Thresholds = field(default_factory=Thresholds)
    ports: Mapping[str, _Port] = field(default_factory=dict)


def initial(th: Thresholds | None = None) -> PfcStormState:
    return PfcStormState(th=th or Thresholds())


def step(state: PfcStormState, obs: CountersObs, now: float) -> tuple[PfcStormState, tuple[Event, ...]]:
    th = state.th
    c = obs.counters
    p = th.lossless_prio
    prev = state.ports.get(obs.name) or _Port(seen=now)

    err_delta = counter_delta(prev.error_events, c.get(ERROR_EVENTS))
    warn_delta = counter_delta(prev.warning_events, c.get(WARNING_EVENTS))

    tx = c.get(f"tx_prio{p}_pause_duration")
    rx = c.get(f"rx_prio{p}_pause_duration")
    durations = prev.durations
    if tx is None or (durations and tx < durations[-1][1]):
        durations = ()
    if tx is not None:
        if len(durations) >= 2 and now - durations[-2][0] < th.storm_window_s / _SAMPLES_PER_WINDOW:
            # faster samples (netlink and periodic feeds together) thin out: the history stays
            # bounded and the anchor moves in steps of a fraction of the window at worst
            durations = durations[:-1]
        durations = (*durations, (now, tx, rx))
        cut = now - th.storm_window_s
        while len(durations) > 2 and durations[1][0] <= cut:
            durations = durations[1:]
    tx_ratio = rx_ratio = None
    if len(durations) >= 2 and now > durations[0][0]:
        t0, tx0, rx0 = durations[0]
        wall_us = (now - t0) * 1e6  # pause durations count microseconds
        tx_ratio = (tx - tx0) / wall_us
        if rx is not None and rx0 is not None and rx >= rx0:
            rx_ratio = (rx - rx0) / wall_us
    span = now - durations[0][0] if durations else 0.0

    causes = []
    if err_delta:
        causes.append(f"{ERROR_EVENTS} +{err_delta}")
    if tx_ratio is not None and tx_ratio >= th.storm_ratio:
        causes.append(f"tx_prio{p}_pause_duration {tx_ratio:.0%} of wall time over {span:g} s")
    evidence = {"netdev": obs.netdev, "prio": p, "tx_pause_ratio": _round(tx_ratio),
                "rx_pause_ratio": _round(rx_ratio), "ratio_window_s": span,
                "storm_error_events_delta": err_delta, "storm_warning_events_delta": warn_delta,
                "tx_pause_frames": c.get(f"tx_prio{p}_pause"), "rx_pause_frames": c.get(f"rx_prio{p}_pause")}

    events: tuple[Event, ...] = ()
    critical_last, warning_last = prev.critical_last, prev.warning_last
    if causes:
        if episode_fires(critical_last, now, th.storm_quiet_s):
            events = (make_event(now, CODE, obs.name, f"{obs.name}: pause storm on prio {p}: " + "; ".join(causes),
                                 {**evidence, "causes": causes}),)
        critical_last = now
    elif warn_delta and episode_fires(critical_last, now, th.storm_quiet_s):
        if episode_fires(warning_last, now, th.storm_quiet_s):
            events = (make_event(now, CODE, obs.name,
                                 f"{obs.name}: NIC pause-storm watchdog warning on prio {p}: "
                                 f"{WARNING_EVENTS} +{warn_delta}",
                                 {**evidence, "causes": [f"{WARNING_EVENTS} +{warn_delta}"]}, severity="warning"),)
        warning_last = now

    port = _Port(seen=now, error_events=c.get(ERROR_EVENTS), warning_events=c.get(WARNING_EVENTS),
                 durations=durations, critical_last=critical_last, warning_last=warning_last)
    ports = {k: v for k, v in state.ports.items() if now - v.seen < _FORGET_S}
    ports[obs.name] = port
    return replace(state, ports=ports), events


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
