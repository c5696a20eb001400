"""NicHealthError as an event: a devlink health reporter of a rail PF counted a new error between two
samples (docs/design.md §4). The reporter may be healthy again by the next sample (``auto_recover``): its
``error`` count is what proves the firmware or a queue failed in between. A count that goes down (a
driver reload) re-baselines; a reporter without a count is never judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import counter_delta, make_event
from agent.detectors.observations import HealthObs
from agent.model import Event

__all__ = ["HealthState", "initial", "step"]

CODE = "NicHealthError"
_FORGET_S = 3600.0


@dataclass(frozen=True, slots=True)
class HealthState:
    th: Thresholds = field(default_factory=Thresholds)
    #: (PF handle, reporter) -> (last seen, error count)
    seen: Mapping[tuple[str, str], tuple[float, int]] = field(default_factory=dict)


def initial(th: Thresholds | None = None) -> HealthState:
    return HealthState(th=th or Thresholds())


def step(state: HealthState, obs: HealthObs, now: float) -> tuple[HealthState, tuple[Event, ...]]:
    if obs.error is None:
        return state, ()
    key = (obs.handle, obs.reporter)
    prev = state.seen.get(key)
    events: tuple[Event, ...] = ()
    rise = counter_delta(prev[1], obs.error) if prev is not None else None
    if rise:
        events = (make_event(now, CODE, obs.handle,
                             f"{obs.handle}: devlink health reporter {obs.reporter} counted {rise} new error(s) "
                             f"(now {obs.state or 'state unknown'})",
                             {"reporter": obs.reporter, "reporter_handle": obs.reporter_handle, "rise": rise,
                              "error": obs.error, "state": obs.state}),)
    seen = {k: v for k, v in state.seen.items() if now - v[0] < _FORGET_S}
    seen[key] = (now, obs.error)
    return replace(state, seen=seen), events
