"""RepresentorStale (a representor leak): representors for VF indexes >= ``sriov_numvfs``.

While the SR-IOV operator removes VFs, numvfs drops first and the representors follow within
seconds; one that is still there after the grace period leaked (a stuck OVS port or a driver that
failed to clean up). One event when a PF's stale representors first outlast the grace, and another
each time more of them outlast it (the leak is growing); the PF re-arms once it has none left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import make_event
from agent.detectors.observations import RepresentorObs
from agent.model import Event

__all__ = ["RepresentorState", "initial", "step"]

CODE = "RepresentorStale"


@dataclass(frozen=True, slots=True)
class _Pf:
    #: stale VF index -> when it was first seen stale
    stale_since: Mapping[int, float] = field(default_factory=dict)
    #: stale VF indexes already reported in this episode
    reported: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class RepresentorState:
    th: Thresholds = field(default_factory=Thresholds)
    pfs: Mapping[str, _Pf] = field(default_factory=dict)


def initial(th: Thresholds | None = None) -> RepresentorState:
    return RepresentorState(th=th or Thresholds())


def step(state: RepresentorState, obs: RepresentorObs, now: float) -> tuple[RepresentorState, tuple[Event, ...]]:
    if obs.numvfs is None:
        return state, ()
    th = state.th
    prev = state.pfs.get(obs.handle, _Pf())
    stale = sorted({i for i in obs.vf_indexes if i >= obs.numvfs})
    if not stale:
        if obs.handle not in state.pfs:
            return state, ()
        pfs = dict(state.pfs)
        del pfs[obs.handle]
        return replace(state, pfs=pfs), ()

    since = {i: prev.stale_since.get(i, now) for i in stale}
    old = [i for i in stale if now - since[i] >= th.representor_grace_s]
    reported = prev.reported & set(stale)
    events: tuple[Event, ...] = ()
    if set(old) - reported:
        names = dict(zip(obs.vf_indexes, obs.names, strict=False))
        stale_names = [names[i] for i in old if i in names]
        growing = bool(reported)
        what = ", ".join(stale_names) if stale_names else ", ".join(f"vf{i}" for i in old)
        events = (make_event(
            now, CODE, obs.handle,
            f"{obs.handle}: {len(old)} representor(s) for VFs beyond sriov_numvfs={obs.numvfs} for more "
            f"than {th.representor_grace_s:g} s{' (growing)' if growing else ''}: {what}",
            {"numvfs": obs.numvfs, "stale_vfs": old, "representors": stale_names,
             "representor_count": len(obs.vf_indexes), "oldest_since": min(since[i] for i in old),
             "growing": growing}),)
        reported = reported | set(old)
    pfs = dict(state.pfs)
    pfs[obs.handle] = _Pf(stale_since=since, reported=frozenset(reported))
    return replace(state, pfs=pfs), events
