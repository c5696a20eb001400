"""The ``MetricsState`` a node image stands for: what the agent would have served at capture time.

The same readers, topology and checks run on the image as on a live node. The parts that only a
running agent has come from what the image recorded instead: per-source read times from the
manifest's ``duration_s``, event counts from ``events.json``; the sample is as old as the capture.
"""

from __future__ import annotations

from collections import Counter

from ..config import Expectations, ReadConfig
from ..diagnose import diagnose, with_unavailable
from ..events import EVENT_CODES
from ..history import load_history
from ..host.recorded import RecordedHost
from ..snapshot import take_snapshot
from ..topology import build_topology
from .state import MetricsState, SourceStatus

__all__ = ["SOURCES", "source_of", "state_from_image"]

#: The sources a sampler reads on its own, in ``railscope_scrape_collector_*{source}``.
SOURCES = ("devlink", "ethtool", "links", "ovs", "pci", "rdma", "rules", "versions")

# The first word of a reader's ``unavailable`` key or a recorded command's argv[0] -> source.
_WORD_TO_SOURCE = {
    "netlink": "links", "links": "links", "pci": "pci", "devlink": "devlink", "rdma": "rdma",
    "infiniband": "rdma", "ethtool": "ethtool", "versions": "versions", "udev": "rules", "ovs": "ovs",
    "ovs-vsctl": "ovs",
}


def source_of(word: str) -> str | None:
    """``"ethtool -S net_rail0"`` -> ``"ethtool"``; ``"udev net rules"`` -> ``"rules"``; else None."""
    first = word.split(None, 1)[0] if word.strip() else ""
    return _WORD_TO_SOURCE.get(first)


def _sources(host: RecordedHost, unavailable: tuple[tuple[str, str], ...]) -> tuple[SourceStatus, ...]:
    failed = {source_of(src) for src, _ in unavailable}
    took: Counter[str] = Counter()
    ran: set[str] = set()
    skipped: set[str] = set()
    for item in (host.manifest or {}).get("items") or []:
        if not isinstance(item, dict):
            continue
        argv = item.get("argv")
        if item.get("kind") == "netlink":
            src = "links"
        elif isinstance(argv, list) and argv:
            src = source_of(str(argv[0]))
        else:
            src = None
        if src is None:
            continue
        (skipped if item.get("skipped") else ran).add(src)
        dur = item.get("duration_s")
        if isinstance(dur, int | float) and not isinstance(dur, bool):
            took[src] += float(dur)
    # A source the capture skipped on purpose (no OVS db socket on the node) was never read: it
    # did not fail, and an alert on railscope_scrape_collector_success must not fire for it.
    never_read = skipped - ran
    return tuple(SourceStatus(s, s not in failed, round(took[s], 6)) for s in SOURCES if s not in never_read)


def state_from_image(host: RecordedHost, exp: Expectations, cfg: ReadConfig | None = None) -> MetricsState:
    """Read the image like the agent reads a node, and package it as the agent's latest sample."""
    cfg = cfg or ReadConfig(net_templates=exp.net_templates, rdma_templates=exp.rdma_templates)
    snap = take_snapshot(host, cfg)
    topo = build_topology(snap, exp)
    # The same history the doctor reads: events.json findings and recorder.jsonl rates.
    hist = load_history(host)
    diagnosis = with_unavailable(
        diagnose(snap, exp, events=hist.events, recorder=hist.recorder, capture_time=hist.capture_time,
                 topology=topo),
        hist.unavailable)
    return MetricsState(
        snapshot=snap, topology=topo, diagnosis=diagnosis,
        sources=_sources(host, snap.unavailable),
        event_counts=dict(Counter(ev.code for ev in hist.events)), event_codes=tuple(sorted(EVENT_CODES)),
        taken_at=snap.taken_at,
    )
