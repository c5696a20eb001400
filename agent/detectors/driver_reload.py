"""DriverReload: the NIC driver was reloaded — an event of its own, not fifty flaps.

Seen two ways: ``/sys/module/mlx5_core/srcversion`` changed (every driver swap: the DOCA driver
container loads its driver and restores the inbox one when its pod ends; ``version`` when the
kernel keeps no srcversion), or every rail netdev was
recreated (a new ifindex for each PCI function and port) within the reload grace, which also
catches a reload of the same driver. One reload gives one event whichever is seen first; the
engine then tells the flap detectors to forgive what the reload did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import make_event
from agent.detectors.observations import DriverObs, LinkObs
from agent.model import Event

__all__ = ["DriverState", "initial", "step"]

CODE = "DriverReload"


@dataclass(frozen=True, slots=True)
class DriverState:
    th: Thresholds = field(default_factory=Thresholds)
    srcversion: str | None = None
    version: str | None = None
    #: When the previous DriverObs came (the reload happened after it).
    driver_seen: float | None = None
    ifindex: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: key -> when its netdev was last recreated
    recreated: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: A reload was reported from recreated netdevs since the last DriverObs: the srcversion
    #: change that follows is the same reload.
    reported_since_driver_obs: bool = False
    last_reload: float | None = None


def initial(th: Thresholds | None = None) -> DriverState:
    return DriverState(th=th or Thresholds())


def step(state: DriverState, obs: DriverObs | LinkObs, now: float) -> tuple[DriverState, tuple[Event, ...]]:
    if isinstance(obs, LinkObs):
        return _link(state, obs, now)
    if obs.srcversion is None and obs.version is None:
        return state, ()
    changed = _changed(state.srcversion, obs.srcversion) or (
        (state.srcversion is None or obs.srcversion is None) and _changed(state.version, obs.version))
    events: tuple[Event, ...] = ()
    if changed and not state.reported_since_driver_obs:
        what = "srcversion" if _changed(state.srcversion, obs.srcversion) else "version"
        events = (make_event(
            now, CODE, "node",
            f"mlx5_core reloaded: {what} changed, srcversion {state.srcversion} -> {obs.srcversion}"
            f" (version {state.version} -> {obs.version})",
            {"reason": f"{what} changed", "old_srcversion": state.srcversion,
             "new_srcversion": obs.srcversion, "old_version": state.version, "new_version": obs.version,
             "previous_check_ts": state.driver_seen}),)
    return replace(state, srcversion=obs.srcversion or state.srcversion, version=obs.version or state.version,
                   driver_seen=now, reported_since_driver_obs=False,
                   last_reload=now if events else state.last_reload), events


def _changed(old: str | None, new: str | None) -> bool:
    """Both known and different: a value that could not be read is not a change."""
    return old is not None and new is not None and old != new


def _link(state: DriverState, obs: LinkObs, now: float) -> tuple[DriverState, tuple[Event, ...]]:
    if obs.ifindex is None:
        return state, ()
    old = state.ifindex.get(obs.key)
    ifindex = {**state.ifindex, obs.key: obs.ifindex}
    if old is None or old == obs.ifindex:
        return replace(state, ifindex=ifindex), ()
    grace = state.th.reload_grace_s
    recreated = {k: t for k, t in state.recreated.items() if now - t <= grace}
    recreated[obs.key] = now
    state = replace(state, ifindex=ifindex, recreated=recreated)
    if set(recreated) != set(ifindex):
        return state, ()
    if state.last_reload is not None and now - state.last_reload <= grace:
        return state, ()
    ev = make_event(now, CODE, "node",
                    f"every rail netdev was recreated within {grace:g} s: driver reloaded",
                    {"reason": "netdevs recreated", "netdevs": sorted(o for o in _names(recreated)),
                     "srcversion": state.srcversion, "version": state.version})
    return replace(state, recreated={}, reported_since_driver_obs=True, last_reload=now), (ev,)


def _names(recreated: Mapping[tuple[str, str], float]) -> list[str]:
    return [f"{pci}/{port}" if port else pci for pci, port in recreated]
