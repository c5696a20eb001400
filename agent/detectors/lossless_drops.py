"""LosslessDrops: packets dropped on the lossless priority, which PFC exists to prevent.

Any rise of ``rx_prioP_discards``, ``rx_prioP_buf_discard`` or ``rx_prioP_cong_discard`` is
critical: headroom too small, PFC not negotiated, or the switch ignoring our pause.
``rx_discards_phy`` is not judged: it counts lossy priorities too. A counter that goes down
(driver reload) re-baselines; one event per episode, re-armed after ``drops_quiet_s`` without drops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import counter_deltas, episode_fires, make_event
from agent.detectors.observations import CountersObs
from agent.model import Event

__all__ = ["LosslessDropsState", "discard_counters", "initial", "step"]

CODE = "LosslessDrops"
_FORGET_S = 3600.0


def discard_counters(prio: int) -> tuple[str, ...]:
    return (f"rx_prio{prio}_discards", f"rx_prio{prio}_buf_discard", f"rx_prio{prio}_cong_discard")


@dataclass(frozen=True, slots=True)
class _Port:
    seen: float
    values: tuple[int | None, ...]
    last_true: float | None = None


@dataclass(frozen=True, slots=True)
class LosslessDropsState:
    th: Thresholds = field(default_factory=Thresholds)
    ports: Mapping[str, _Port] = field(default_factory=dict)


def initial(th: Thresholds | None = None) -> LosslessDropsState:
    return LosslessDropsState(th=th or Thresholds())


def step(state: LosslessDropsState, obs: CountersObs, now: float) -> tuple[LosslessDropsState, tuple[Event, ...]]:
    th = state.th
    names = discard_counters(th.lossless_prio)
    values = tuple(obs.counters.get(n) for n in names)
    prev = state.ports.get(obs.name)
    deltas = counter_deltas(names, prev.values if prev is not None else None, values)
    events: tuple[Event, ...] = ()
    last_true = prev.last_true if prev else None
    if deltas:
        if episode_fires(last_true, now, th.drops_quiet_s):
            shown = ", ".join(f"{k} +{v}" for k, v in deltas.items())
            events = (make_event(now, CODE, obs.name,
                                 f"{obs.name}: drops on lossless prio {th.lossless_prio}: {shown}",
                                 {"netdev": obs.netdev, "prio": th.lossless_prio, "deltas": deltas,
                                  "rx_discards_phy": obs.counters.get("rx_discards_phy")}),)
        last_true = now
    ports = {k: v for k, v in state.ports.items() if now - v.seen < _FORGET_S}
    ports[obs.name] = _Port(seen=now, values=values, last_true=last_true)
    return replace(state, ports=ports), events
