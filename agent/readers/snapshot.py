"""One read of the node: every source of the registry (``readers/sources.py``) once, in its order.

Order: the registry's (each reader module declares its own SOURCE): config (udev rules, OVS), links (versions, the link dump, PCI functions and the SR-IOV of
link parents on another bus such as netdevsim, which netdevs are rails, their statistics), then
devlink, RDMA and the rails' counters (ethtool, one at a time). Every source that gives nothing adds
``(source, reason)`` to ``Snapshot.unavailable``; nothing raises for a node that lacks a tool.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Snapshot
from agent.readers import sources
from agent.readers.common import Notes

__all__ = ["take_snapshot"]


def _capture_time(host: Host) -> float | None:
    manifest = host.image.manifest if host.image is not None else None
    if manifest is None:
        return None
    return manifest.time_of("ended_at") or manifest.time_of("started_at")


def _node_name(host: Host, hostname: str | None) -> str | None:
    manifest = host.image.manifest if host.image is not None else None
    if manifest is not None and manifest.node and manifest.node.strip():
        return manifest.node.strip()
    return hostname


def take_snapshot(host: Host, cfg: ReadConfig | None = None, *, now: float | None = None,
                  disabled: Iterable[str] = ()) -> Snapshot:
    """Read the node through ``host``: every source of the registry but the ``disabled`` ones.

    ``now`` is the snapshot time; by default the capture time of a node image (manifest
    ``ended_at``), else the wall clock.
    """
    cfg = cfg or ReadConfig()
    if now is None:
        now = (None if host.live else _capture_time(host)) or time.time()
    off = frozenset(disabled)
    ctx = sources.Context()
    parts: dict[str, sources.Part] = {}
    for src in sources.SOURCES:
        if src.name in off:
            continue
        part = src.read(host, cfg, ctx, Notes())
        parts[src.name] = part
        ctx = sources.after(ctx, part)
    snap = sources.compose(Snapshot(taken_at=float(now)), parts)
    # the node's name is the links source's (its versions read): None when that source did not run
    node = snap.node if any(s.netlink and s.name in parts for s in sources.SOURCES) else None
    skipped = tuple((s.name, "disabled (--disable-source)") for s in sources.SOURCES if s.name in off)
    return dataclasses.replace(snap, taken_at=float(now), node=_node_name(host, node),
                               unavailable=snap.unavailable + skipped)
