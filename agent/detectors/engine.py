"""All detectors behind one pure ``step``: the watcher feeds observations, gets events back.

The one coupling between detectors lives here: a ``DriverReload`` makes the link- and
config-flap detectors forgive what the reload did (netdevs recreated, counters reset, numvfs
and eswitch mode re-applied by the operators), since the sample before it and for the grace after.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors import (
    config_flapping,
    driver_reload,
    link_flapping,
    lossless_drops,
    mtu_oversize,
    nic_health,
    pfc_storm,
    representor_stale,
)
from agent.detectors.observations import (
    ConfigObs,
    CountersObs,
    DriverObs,
    HealthObs,
    LinkObs,
    Obs,
    RepresentorObs,
)
from agent.model import Event

__all__ = ["DetectorState", "initial", "run", "step"]


@dataclass(frozen=True, slots=True)
class DetectorState:
    th: Thresholds = field(default_factory=Thresholds)
    link: link_flapping.LinkFlapState = field(default_factory=link_flapping.LinkFlapState)
    config: config_flapping.ConfigFlapState = field(default_factory=config_flapping.ConfigFlapState)
    representors: representor_stale.RepresentorState = field(default_factory=representor_stale.RepresentorState)
    storm: pfc_storm.PfcStormState = field(default_factory=pfc_storm.PfcStormState)
    drops: lossless_drops.LosslessDropsState = field(default_factory=lossless_drops.LosslessDropsState)
    driver: driver_reload.DriverState = field(default_factory=driver_reload.DriverState)
    health: nic_health.HealthState = field(default_factory=nic_health.HealthState)
    oversize: mtu_oversize.MtuOversizeState = field(default_factory=mtu_oversize.MtuOversizeState)


def initial(th: Thresholds | None = None) -> DetectorState:
    th = th or Thresholds()
    return DetectorState(th=th, link=link_flapping.initial(th), config=config_flapping.initial(th),
                         representors=representor_stale.initial(th), storm=pfc_storm.initial(th),
                         drops=lossless_drops.initial(th), driver=driver_reload.initial(th),
                         health=nic_health.initial(th))


def step(state: DetectorState, obs: Obs, now: float) -> tuple[DetectorState, tuple[Event, ...]]:
    """Feed one observation made at ``now`` (unix seconds); return the new state and its events."""
    if isinstance(obs, LinkObs):
        state, reload_events = _driver_step(state, obs, now)
        link, events = link_flapping.step(state.link, obs, now)
        return replace(state, link=link), reload_events + events
    if isinstance(obs, DriverObs):
        return _driver_step(state, obs, now)
    if isinstance(obs, ConfigObs):
        config, events = config_flapping.step(state.config, obs, now)
        return replace(state, config=config), events
    if isinstance(obs, RepresentorObs):
        reps, events = representor_stale.step(state.representors, obs, now)
        return replace(state, representors=reps), events
    if isinstance(obs, CountersObs):
        storm, storm_events = pfc_storm.step(state.storm, obs, now)
        drops, drop_events = lossless_drops.step(state.drops, obs, now)
        oversize, mtu_events = mtu_oversize.step(state.oversize, obs, now)
        return replace(state, storm=storm, drops=drops, oversize=oversize), storm_events + drop_events + mtu_events
    if isinstance(obs, HealthObs):
        health, events = nic_health.step(state.health, obs, now)
        return replace(state, health=health), events
    raise TypeError(f"not an observation: {type(obs).__name__}")


def run(state: DetectorState, observations: Iterable[Obs], now: float) -> tuple[DetectorState, list[Event]]:
    """Feed a batch made at the same time (one periodic sample)."""
    out: list[Event] = []
    for obs in observations:
        state, events = step(state, obs, now)
        out.extend(events)
    return state, out


def _driver_step(state: DetectorState, obs: LinkObs | DriverObs, now: float) -> tuple[DetectorState, tuple[Event, ...]]:
    """The driver-reload detector's step; a reload it reports forgives what the reload caused."""
    since = state.driver.driver_seen
    driver, events = driver_reload.step(state.driver, obs, now)
    state = replace(state, driver=driver)
    if events:
        state = _forgive(state, since, now)
    return state, events


def _forgive(state: DetectorState, since: float | None, now: float) -> DetectorState:
    lookback = now - state.th.reload_grace_s if since is None else min(since, now - state.th.reload_grace_s)
    return replace(state, link=link_flapping.forgive(state.link, lookback, now),
                   config=config_flapping.forgive(state.config, now))
