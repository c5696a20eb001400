"""LinkDegrading, OpticsOutOfRange and PcieErrors as events: the live agent's rate findings (the flight
recorder's first and last PHY sample within ``--ber-window``, docs/design.md §4) become an event when one
appears or gets more severe, so ``railscope_events_total{code}`` counts them and ``--capture-on`` can
capture a bundle. One event per episode: a (code, subject) re-arms once its rate finding is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.detectors.common import make_event
from agent.findings import Finding, severity_rank
from agent.model import Event

__all__ = ["CODES", "DegradationState", "initial", "step"]

#: the codes whose rising forms are events (their one-snapshot forms are findings only)
CODES = frozenset({"LinkDegrading", "OpticsOutOfRange", "PcieErrors"})


@dataclass(frozen=True, slots=True)
class DegradationState:
    #: (code, subject) -> the severity of its current rate finding
    active: Mapping[tuple[str, str], str] = field(default_factory=dict)


def initial() -> DegradationState:
    return DegradationState()


def _rate(f: Finding) -> bool:
    return f.code in CODES and f.severity in ("warning", "critical") and f.evidence.get("source") == "recorder"


def step(state: DegradationState, findings: Iterable[Finding], now: float) -> tuple[DegradationState, tuple[Event, ...]]:
    active: dict[tuple[str, str], str] = {}
    events = []
    for f in findings:
        if not _rate(f) or "event_ts" in f.evidence:  # an event already, read back from the event log
            continue
        key = (f.code, f.subject)
        active[key] = f.severity
        before = state.active.get(key)
        if before is None or severity_rank(f.severity) < severity_rank(before):
            evidence = {k: v for k, v in f.evidence.items() if k != "source"}
            events.append(make_event(now, f.code, f.subject, f.message, {**evidence, "source": "agent"},
                                     severity=f.severity))
    # a finding read back from the event log keeps its episode armed: no second event for it
    for f in findings:
        if f.code in CODES and "event_ts" in f.evidence and (f.code, f.subject) in state.active:
            active.setdefault((f.code, f.subject), state.active[(f.code, f.subject)])
    return DegradationState(active=active), tuple(events)
