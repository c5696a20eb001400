"""agent: the running agent's ``events.json`` and flight recorder (``recorder.jsonl``); without a
running agent, two samples of the rail counters ``recorder_gap_s`` apart, so rates exist offline
(docs/design.md §6)."""

from __future__ import annotations

import dataclasses
import time

from agent.capture.context import CaptureContext
from agent.capture.plugin import Generated, Plugin
from agent.capture.recorder import FlightRecorder
from agent.host.image.events import events_json
from agent.model import Snapshot
from agent.readers.common import Notes
from agent.readers.ethtool import read_ethtool
from agent.readers.links import read_links
from agent.readers.pcie import read_pcie


def _from_image(ctx: CaptureContext, name: str) -> bytes | None:
    """A node image being captured again carries its own events and recorder."""
    image = ctx.host.image
    return image.file(name) if image is not None and not ctx.host.live else None


def _events(ctx: CaptureContext) -> bytes:
    if ctx.events is None and (kept := _from_image(ctx, "events.json")) is not None:
        return kept
    return events_json(ctx.events)


def _resample(ctx: CaptureContext, snap: Snapshot) -> Snapshot:
    notes = Notes()
    rails = list(ctx.rails)
    stats, _ = read_ethtool(ctx.host, rails, ctx.cfg.command_timeout_s, notes)
    fresh = {lk.ifname: lk for lk in read_links(ctx.host, notes)}
    links = tuple(dataclasses.replace(lk, carrier_down_count=fresh[lk.ifname].carrier_down_count)
                  if lk.ifname in fresh else lk for lk in snap.links)
    # the rail PFs' AER totals again (sysfs, no firmware): a rise between the two lines is PcieErrors
    pcie = read_pcie(ctx.host, [p.bdf for p in snap.pcie], notes) if snap.pcie else snap.pcie
    return dataclasses.replace(snap, ethtool=stats, links=links, pcie=pcie, taken_at=time.time())


def _counters(snap: Snapshot, rails: tuple[str, ...]) -> list[tuple[str, dict[str, int]]]:
    """What the flight recorder keeps per rail: ethtool statistics, carrier losses and the rail PF's
    AER totals (as the daemon's sampler gives them; RDMA port counters are the daemon's alone)."""
    out = []
    pcie = {p.bdf: p for p in snap.pcie}
    for netdev in rails:
        counters: dict[str, int] = {}
        stats = snap.ethtool_of(netdev)
        if stats is not None:
            counters.update(stats.counters)
        link = snap.link(netdev)
        if link is not None and link.carrier_down_count is not None:
            counters["carrier_down_count"] = link.carrier_down_count
        pf = pcie.get(link.parent_dev) if link is not None and link.parent_bus == "pci" and link.parent_dev else None
        if pf is not None:
            counters.update(pf.aer_counters())
        out.append((netdev, counters))
    return out


def _recorder(ctx: CaptureContext) -> bytes:
    if ctx.recorder_jsonl is not None:
        return ctx.recorder_jsonl()
    if (kept := _from_image(ctx, "recorder.jsonl")) is not None:
        return kept
    snap = ctx.snapshot
    if snap is None or not ctx.rails:
        return b""
    rec = FlightRecorder(window_s=max(60.0, ctx.recorder_gap_s * 4), max_netdevs=max(64, len(ctx.rails)))
    first = time.time()
    for netdev, counters in _counters(snap, ctx.rails):
        rec.add(first, netdev, counters)
    gap = min(ctx.recorder_gap_s, ctx.deadline - time.monotonic() - 1.0)
    if gap > 0:
        ctx.sleep(gap)
        later = _resample(ctx, snap)
        for netdev, counters in _counters(later, ctx.rails):
            rec.add(later.taken_at, netdev, counters)
    return rec.to_jsonl().encode()


PLUGIN = Plugin("agent", 1, (
    Generated("events.json", _events),
    Generated("recorder.jsonl", _recorder, timeout_s=60.0),
), "events.json and recorder.jsonl (the running agent's, else two samples)")
