"""RailResourcesLost: an extended resource of the node dropped to 0 allocatable after the agent saw it
above 0 — the device plugin lost the rails (k8s-rdma-shared-dev-plugin #48, #74, #118), the stop
signal of a rolling upgrade (docs/design.md §4). An event only: the allocatable comes from the API server
(the agent's one watch on its Node object), never from the node.

``step`` takes the watched resources of one Node object (name -> allocatable) and fires once per drop:
a resource re-arms when it is above 0 again. A resource that was never above 0 (a node that has no
such rails) never fires, and neither does one the node object no longer lists at all while its
allocatable map is absent (a partial object says nothing).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.detectors.common import make_event
from agent.model import Event

__all__ = ["CODE", "ResourcesState", "initial", "parse_allocatable", "step", "watched"]

CODE = "RailResourcesLost"


@dataclass(frozen=True, slots=True)
class ResourcesState:
    #: resources seen above 0 since the agent started (or since they last dropped to 0)
    armed: frozenset[str] = frozenset()
    #: the last allocatable of every watched resource
    last: Mapping[str, int] = field(default_factory=dict)


def initial() -> ResourcesState:
    return ResourcesState()


def _quantity(value: Any) -> int | None:
    # Extended resources are whole numbers ("8"); anything else is not a count of rails.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def watched(name: str, patterns: Iterable[str]) -> bool:
    """``nvidia.com/rail0`` against ``nvidia.com/*``; ``nvidia.com/gpu`` is a GPU, never a rail resource."""
    return name != "nvidia.com/gpu" and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def parse_allocatable(node: Mapping[str, Any], patterns: Iterable[str]) -> dict[str, int] | None:
    """The watched resources of a Node object's ``status.allocatable``; None when it has none.

    Sample (a Node object's status, as the API server sends it)::

        {"status": {"allocatable": {"cpu": "190", "nvidia.com/gpu": "8", "nvidia.com/rail0": "1",
                                    "rdma/rdma_shared_device_a": "63"}}}
    """
    pats = tuple(patterns)
    status = node.get("status") if isinstance(node.get("status"), Mapping) else None
    alloc = status.get("allocatable") if status is not None else None
    if not isinstance(alloc, Mapping):
        return None
    out = {}
    for k, v in alloc.items():
        if isinstance(k, str) and watched(k, pats) and (q := _quantity(v)) is not None:
            out[k] = q
    return out


def step(state: ResourcesState, allocatable: Mapping[str, int] | None, now: float,
         node: str = "node") -> tuple[ResourcesState, tuple[Event, ...]]:
    if allocatable is None:
        return state, ()
    events = []
    armed = set(state.armed)
    # A resource gone from the list after it was above 0 is at 0: the plugin unregistered it.
    names = sorted(set(allocatable) | armed)
    for name in names:
        value = allocatable.get(name, 0)
        if value > 0:
            armed.add(name)
        elif name in armed:
            armed.discard(name)
            before = state.last.get(name)
            events.append(make_event(now, CODE, name,
                                     f"{name}: allocatable dropped to 0 on {node} (was {before}): the device plugin "
                                     "lost the rails", {"before": before, "after": value, "node": node}))
    return replace(state, armed=frozenset(armed), last=dict(allocatable)), tuple(events)
