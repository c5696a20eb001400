"""Findings that need time: rates from the flight recorder, and the agent's recent events.

- ``PfcStorm`` (critical): ``tx_pause_storm_error_events`` rose, or transmitted pause duration on
  the lossless priority (µs, kernel ``mlx5/counters.rst``) grew >= ``storm_ratio`` of wall time over
  the last 60 s of the recorder (or between its last two samples). Received pause alone means the
  node is a victim of someone else's storm: evidence, not a finding.
- ``LosslessDrops`` (critical): a lossless-priority discard counter rose.
- ``LinkFlapping`` (warning): ``carrier_down_count`` rose >= ``flap_count`` times within
  ``flap_window_s``. Rails and uplinks only: representors follow their pods.

A counter that goes down was reset (driver reload recreates the netdev): that step counts nothing.
Events within ``event_window_s`` before the capture time become findings as they are.
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding
from agent.analysis.checks.pfc import STORM_ERROR, lossless_discard_keys
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import EVENT_CODES, Finding
from agent.model import Event, Snapshot
from agent.readers.history import Recorder, Sample

STORM_WINDOW_S = 60.0


def check(snap: Snapshot, topo: Topology, exp: Expectations, *, events: tuple[Event, ...] = (),
          recorder: Recorder | None = None, capture_time: float | None = None) -> list[Finding]:
    out = recorder_findings(topo, exp, recorder) if recorder is not None else []
    out.extend(event_findings(events, exp, capture_time))
    return out


def event_findings(events: tuple[Event, ...], exp: Expectations, capture_time: float | None) -> list[Finding]:
    if not events:
        return []
    end = capture_time if capture_time is not None else max(e.ts for e in events)
    start = end - exp.event_window_s
    # Code, severity, subject and evidence as the agent wrote them; the message says how long before
    # the capture it happened, so a person can tell a fault of the last minute from one of 14 min ago.
    return [Finding(e.code, e.severity, e.subject,
                    f"{e.message or f'{e.code} event'} (agent event, {end - e.ts:.0f} s before the capture)",
                    {**dict(e.evidence), "event_ts": e.ts})
            for e in events if start <= e.ts <= end]


def _steps(samples: tuple[Sample, ...], key: str) -> list[tuple[float, int]]:
    """(ts, increase) between consecutive samples that both have ``key``; a decrease is a reset."""
    out = []
    prev: Sample | None = None
    for s in samples:
        v = s.get(key)
        if v is None:
            continue
        if prev is not None:
            pv = prev.get(key)
            if pv is not None and v > pv:
                out.append((s.ts, v - pv))
        prev = s
    return out


def _subject(topo: Topology, netdev: str) -> str | None:
    if netdev in topo.representor_names:
        return None
    for r in topo.rails:
        if r.netdev_name == netdev or r.expected_netdev == netdev:
            return r.expected_netdev
    return netdev


def recorder_findings(topo: Topology, exp: Expectations, recorder: Recorder) -> list[Finding]:
    out: list[Finding] = []
    p = exp.lossless_prio
    for netdev, samples in recorder.series:
        subject = _subject(topo, netdev)
        if subject is None or len(samples) < 2:
            continue
        out.extend(_storm(subject, netdev, samples, p, exp.storm_ratio))
        drops = {k: sum(d for _, d in _steps(samples, k)) for k in lossless_discard_keys(p)}
        drops = {k: v for k, v in drops.items() if v}
        if drops:
            out.append(finding("LosslessDrops", subject,
                               f"{netdev}: {sum(drops.values())} packet(s) of the lossless priority {p} dropped "
                               f"in the {samples[-1].ts - samples[0].ts:.0f} s the flight recorder covers",
                               netdev=netdev, increase=drops, source="recorder"))
        flap = _flaps(samples, exp.flap_window_s)
        if flap[0] >= exp.flap_count:
            out.append(finding("LinkFlapping", subject,
                               f"{netdev}: {flap[0]} carrier losses within {exp.flap_window_s:.0f} s "
                               f"(threshold {exp.flap_count})", netdev=netdev, carrier_losses=flap[0],
                               window_s=exp.flap_window_s, last_loss_ts=flap[1], source="recorder"))
    return out


def _storm(subject: str, netdev: str, samples: tuple[Sample, ...], prio: int, ratio: float) -> list[Finding]:
    end = samples[-1].ts
    window = tuple(s for s in samples if s.ts >= end - STORM_WINDOW_S)
    if len(window) < 2:
        window = samples[-2:]
    wall = window[-1].ts - window[0].ts
    storms = sum(d for _, d in _steps(window, STORM_ERROR))
    dur_key = f"tx_prio{prio}_pause_duration"
    paused_us = sum(d for _, d in _steps(window, dur_key))
    share = paused_us / (wall * 1e6) if wall > 0 else 0.0
    if storms <= 0 and share < ratio:
        return []
    rx_us = sum(d for _, d in _steps(window, f"rx_prio{prio}_pause_duration"))
    why = []
    if storms > 0:
        why.append(f"the pause-storm watchdog fired {storms} time(s)")
    if share >= ratio:
        why.append(f"it sent pause on priority {prio} for {share:.0%} of the time")
    return [finding("PfcStorm", subject, f"{netdev}: in the last {wall:.0f} s " + " and ".join(why),
                    netdev=netdev, window_s=wall, **{STORM_ERROR: storms, dur_key + "_us": paused_us,
                    "tx_pause_share": round(share, 3), f"rx_prio{prio}_pause_duration_us": rx_us},
                    source="recorder")]


def _flaps(samples: tuple[Sample, ...], window_s: float) -> tuple[int, float | None]:
    """The most carrier losses in any window of ``window_s``, and the time of the last loss."""
    steps = _steps(samples, "carrier_down_count")
    best, j, total = 0, 0, 0
    for ts, d in steps:
        total += d
        while steps[j][0] < ts - window_s:
            total -= steps[j][1]
            j += 1
        best = max(best, total)
    return best, steps[-1][0] if steps else None


#: an event becomes a finding as it is: any event code; the recorder's rates give the flapping and PFC codes
CHECKS = (Check(100, tuple(EVENT_CODES), lambda i: check(i.snap, i.topo, i.exp, events=i.events, recorder=i.recorder,
                                                          capture_time=i.capture_time)),)
