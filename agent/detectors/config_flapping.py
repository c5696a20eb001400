"""ConfigFlapping: a PF's ``sriov_numvfs``, eswitch mode or a devlink param going back and forth.

Two operators fighting over a NIC (the SR-IOV operator and a node script, say) show as a value
that returns to one it had within the window: switchdev -> legacy -> switchdev, or numvfs
8 -> 16 -> 8. A change that stays never fires, nor does a progression (8 -> 16 -> 32).

``sriov_numvfs`` passes through 0 on every change: the kernel refuses to go from one non-zero
count to another ("Disable before enabling", https://docs.kernel.org/PCI/pci-iov-howto.html), so
the SR-IOV operator re-applying a policy writes 8 -> 0 -> 8. Zero is therefore a step, not a value:
8 -> 0 -> 16 -> 0 -> 8 is the fight 8 -> 16 -> 8. After a driver reload every value is re-read from scratch
(numvfs 0, eswitch legacy, runtime params such as ``esw_multiport`` lost) and the operators put
them back: the engine calls ``forgive`` so that this is not taken for a fight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import Thresholds
from agent.detectors.common import episode_fires, make_event
from agent.detectors.observations import ConfigObs
from agent.model import Event

__all__ = ["ConfigFlapState", "forgive", "initial", "step"]

CODE = "ConfigFlapping"
#: Changes kept per value: enough to show a fight in the evidence, bounded whatever the rate.
_MAX_CHANGES = 32
#: name -> the value a change passes through on its way (see the module doc).
_TRANSITIONAL: dict[str, Any] = {"sriov_numvfs": 0}


@dataclass(frozen=True, slots=True)
class _Value:
    value: Any
    #: The value before the first change still in the window.
    start: Any
    #: (time, new value) of the changes within the window, oldest first.
    changes: tuple[tuple[float, Any], ...] = ()
    last_true: float | None = None


@dataclass(frozen=True, slots=True)
class ConfigFlapState:
    th: Thresholds = field(default_factory=Thresholds)
    values: Mapping[tuple[str, str], _Value] = field(default_factory=dict)
    suppress_until: float = -math.inf


def initial(th: Thresholds | None = None) -> ConfigFlapState:
    return ConfigFlapState(th=th or Thresholds())


def step(state: ConfigFlapState, obs: ConfigObs, now: float) -> tuple[ConfigFlapState, tuple[Event, ...]]:
    if obs.value is None:
        return state, ()
    th = state.th
    key = (obs.handle, obs.name)
    prev = state.values.get(key)
    if prev is None:
        return _put(state, key, _Value(value=obs.value, start=obs.value)), ()
    if obs.name in _TRANSITIONAL and obs.value == _TRANSITIONAL[obs.name]:
        return state, ()

    start, changes = prev.start, prev.changes
    while changes and changes[0][0] <= now - th.config_flap_window_s:
        start, changes = changes[0][1], changes[1:]

    if obs.value == prev.value:
        return _put(state, key, replace(prev, start=start, changes=changes)), ()
    if now < state.suppress_until:
        return _put(state, key, replace(prev, value=obs.value, start=obs.value, changes=())), ()

    changes = (*changes, (now, obs.value))
    if len(changes) > _MAX_CHANGES:
        start, changes = changes[-_MAX_CHANGES - 1][1], changes[-_MAX_CHANGES:]
    seq = [start, *(v for _, v in changes)]
    events: tuple[Event, ...] = ()
    last_true = prev.last_true
    if len(changes) >= th.config_flap_changes and _revisits(seq):
        if episode_fires(last_true, now, th.config_flap_window_s):
            shown = " -> ".join(_show(v) for v in seq)
            events = (make_event(
                now, CODE, obs.handle,
                f"{obs.handle} {obs.name} changed back and forth {len(changes)} times within "
                f"{th.config_flap_window_s:g} s: {shown}",
                {"name": obs.name, "values": seq, "change_ts": [t for t, _ in changes],
                 "window_s": th.config_flap_window_s}),)
        last_true = now
    return _put(state, key, _Value(value=obs.value, start=start, changes=changes, last_true=last_true)), events


def forgive(state: ConfigFlapState, now: float) -> ConfigFlapState:
    """A driver reload at ``now``: forget every change so far and take changes during the grace
    period as the new baseline."""
    values = {k: replace(v, start=v.value, changes=()) for k, v in state.values.items()}
    return replace(state, values=values, suppress_until=max(state.suppress_until, now + state.th.reload_grace_s))


def _revisits(seq: list[Any]) -> bool:
    return any(seq[i] == seq[j] for j in range(1, len(seq)) for i in range(j))


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _put(state: ConfigFlapState, key: tuple[str, str], value: _Value) -> ConfigFlapState:
    values = dict(state.values)
    values[key] = value
    return replace(state, values=values)
