"""LinkFlapping: at least N carrier losses of one rail or uplink within a window.

Losses come from ``carrier_down_count`` deltas (``carrier`` 1 -> 0 on kernels without the counter).
A counter that goes down, or a new ifindex for the same (PCI function, port), is a reset — the
netdev was recreated — never a loss; carrier losses in the reload grace around a recreation are the
reload's, and a loss while the netdev is administratively down was asked for. One event per episode: the detector re-arms after a whole window without a qualifying
loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agent.config import Thresholds
from agent.detectors.common import counter_delta, episode_fires, make_event
from agent.detectors.observations import LinkObs
from agent.model import Event

__all__ = ["LinkFlapState", "forgive", "initial", "step"]

CODE = "LinkFlapping"


@dataclass(frozen=True, slots=True)
class _Link:
    ifindex: int | None
    down_count: int | None
    carrier: int | None
    #: Times of the latest carrier losses, oldest first; at most ``flap_count`` are needed.
    losses: tuple[float, ...] = ()
    recreated_at: float | None = None
    last_true: float | None = None  # the last loss that met the threshold (episode)


@dataclass(frozen=True, slots=True)
class LinkFlapState:
    th: Thresholds = field(default_factory=Thresholds)
    links: Mapping[tuple[str, str], _Link] = field(default_factory=dict)
    suppress_until: float = -math.inf


def initial(th: Thresholds | None = None) -> LinkFlapState:
    return LinkFlapState(th=th or Thresholds())


def step(state: LinkFlapState, obs: LinkObs, now: float) -> tuple[LinkFlapState, tuple[Event, ...]]:
    th = state.th
    prev = state.links.get(obs.key)
    if prev is None:
        link = _Link(ifindex=obs.ifindex, down_count=obs.carrier_down_count, carrier=obs.carrier)
        return _put(state, obs.key, link), ()

    if obs.ifindex is not None and prev.ifindex is not None and obs.ifindex != prev.ifindex:
        # A new netdev for the same function and port: its counters start again, and the carrier
        # loss the old netdev reported on its way out belongs to the recreation, not the cable.
        kept = tuple(t for t in prev.losses if t < now - th.reload_grace_s)
        link = _Link(ifindex=obs.ifindex, down_count=obs.carrier_down_count, carrier=obs.carrier,
                     losses=kept, recreated_at=now, last_true=prev.last_true)
        return _put(state, obs.key, link), ()

    if obs.carrier_down_count is not None:
        lost = counter_delta(prev.down_count, obs.carrier_down_count) or 0
    else:
        # Kernels before 4.16 have no IFLA_CARRIER_DOWN_COUNT: a carrier edge is the best there is.
        lost = 1 if prev.carrier == 1 and obs.carrier == 0 else 0
    down_count = obs.carrier_down_count if obs.carrier_down_count is not None else prev.down_count
    carrier = obs.carrier if obs.carrier is not None else prev.carrier
    ifindex = obs.ifindex if obs.ifindex is not None else prev.ifindex

    ignored = obs.admin_up is False or now < state.suppress_until or (
        prev.recreated_at is not None and now - prev.recreated_at < th.reload_grace_s)
    losses = tuple(t for t in prev.losses if t > now - th.flap_window_s)
    if lost and not ignored:
        losses = (losses + (now,) * min(lost, th.flap_count))[-th.flap_count:]

    events: tuple[Event, ...] = ()
    last_true = prev.last_true
    if lost and not ignored and len(losses) >= th.flap_count:
        if episode_fires(last_true, now, th.flap_window_s):
            events = (make_event(
                now, CODE, obs.name,
                f"{obs.name}: {len(losses)} carrier losses within {th.flap_window_s:g} s "
                f"(threshold {th.flap_count})",
                {"netdev": obs.netdev, "pci": obs.key[0], "port": obs.key[1], "losses": len(losses),
                 "window_s": th.flap_window_s, "first_loss_ts": losses[0],
                 "carrier_down_count": obs.carrier_down_count, "operstate": obs.operstate}),)
        last_true = now

    link = _Link(ifindex=ifindex, down_count=down_count, carrier=carrier, losses=losses,
                 recreated_at=prev.recreated_at, last_true=last_true)
    return _put(state, obs.key, link), events


def forgive(state: LinkFlapState, since: float, now: float) -> LinkFlapState:
    """A driver reload was seen at ``now``: losses since ``since`` were the reload's, and losses
    for the grace period after it will be too."""
    links = {k: replace(v, losses=tuple(t for t in v.losses if t < since)) for k, v in state.links.items()}
    return replace(state, links=links, suppress_until=max(state.suppress_until, now + state.th.reload_grace_s))


def _put(state: LinkFlapState, key: tuple[str, str], link: _Link) -> LinkFlapState:
    links = dict(state.links)
    links[key] = link
    return replace(state, links=links)
