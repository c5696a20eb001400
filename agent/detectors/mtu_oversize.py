"""MtuMismatch as an event: a rail counted frames larger than its MTU between two samples —
``rx_oversize_pkts_phy`` (received frames above the port's MTU) or ``rx_out_of_range_len_phy`` (frames
whose length is out of range) rose (mlx5 ``counters.rst``): the peer sends larger frames than this rail
takes, so RoCE packets at the fabric's MTU are dropped here (docs/design.md §4 ``MtuMismatch``, the rising form).

From one snapshot the counters are history since the driver loaded and are not judged. A counter that
goes down (a driver reload) re-baselines; one event per episode, re-armed after ``QUIET_S`` without a rise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.detectors.common import counter_deltas, episode_fires, make_event
from agent.detectors.observations import CountersObs
from agent.model import Event

__all__ = ["COUNTERS", "MtuOversizeState", "initial", "step"]

CODE = "MtuMismatch"
COUNTERS = ("rx_oversize_pkts_phy", "rx_out_of_range_len_phy")
#: an episode of oversize frames is one event; a new one after this long without any
QUIET_S = 300.0
_FORGET_S = 3600.0


@dataclass(frozen=True, slots=True)
class _Port:
    seen: float
    values: tuple[int | None, ...]
    last_true: float | None = None


@dataclass(frozen=True, slots=True)
class MtuOversizeState:
    ports: Mapping[str, _Port] = field(default_factory=dict)


def initial() -> MtuOversizeState:
    return MtuOversizeState()


def step(state: MtuOversizeState, obs: CountersObs, now: float) -> tuple[MtuOversizeState, tuple[Event, ...]]:
    values = tuple(obs.counters.get(n) for n in COUNTERS)
    prev = state.ports.get(obs.name)
    deltas = counter_deltas(COUNTERS, prev.values if prev is not None else None, values)
    events: tuple[Event, ...] = ()
    last_true = prev.last_true if prev else None
    if deltas:
        if episode_fires(last_true, now, QUIET_S):
            shown = ", ".join(f"{k} +{v}" for k, v in deltas.items())
            events = (make_event(now, CODE, obs.name,
                                 f"{obs.name}: frames larger than its MTU arrive ({shown}): the peer's MTU is larger",
                                 {"netdev": obs.netdev, "deltas": deltas}),)
        last_true = now
    ports = {k: v for k, v in state.ports.items() if now - v.seen < _FORGET_S}
    ports[obs.name] = _Port(seen=now, values=values, last_true=last_true)
    return replace(state, ports=ports), events
