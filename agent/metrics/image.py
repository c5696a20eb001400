"""The ``MetricsState`` a node image stands for: what the agent would have served at capture time.

The same readers, topology and checks run on the image as on a live node. The parts that only a
running agent has come from what the image recorded instead: per-source read times from the
manifest's ``duration_s``, hung reads from its ``timed_out`` items, event counts from ``events.json``;
the sample is as old as the capture.
"""

from __future__ import annotations

from collections import Counter

from agent.analysis.diagnose import diagnose, with_unavailable
from agent.analysis.topology import build_topology
from agent.config import Expectations, ReadConfig
from agent.events import EVENT_CODES
from agent.host.recorded import RecordedHost
from agent.metrics.state import HungSource, MetricsState, SourceStatus
from agent.readers.history import load_history
from agent.readers.snapshot import take_snapshot

__all__ = ["SOURCES", "source_of", "state_from_image"]

#: The agent's background sources (``railscope agent`` samples each on its own interval), as
#: ``railscope_scrape_collector_*{source}`` names them live.
SOURCES = ("config", "links", "devlink", "rdma", "counters")

#: A recorded command's argv[0] -> the agent source that runs it.
_COMMAND_SOURCE = {"devlink": "devlink", "rdma": "rdma", "ethtool": "counters", "ovs-vsctl": "config"}


def source_of(argv: list[str]) -> str | None:
    """The agent source that runs ``argv``: ``["ethtool", "-S", "net_rail0"]`` -> ``"counters"``."""
    return _COMMAND_SOURCE.get(argv[0]) if argv else None


def _device_of(argv: list[str]) -> str:
    """What a stuck command was reading: the devlink handle or the netdev, else ""."""
    for tok in argv[1:]:
        if tok.startswith(("pci/", "auxiliary/")):
            return tok
    if argv and argv[0] == "ethtool" and len(argv) >= 3:
        return argv[-1]
    return ""


def _sources(host: RecordedHost) -> tuple[tuple[SourceStatus, ...], tuple[HungSource, ...]]:
    """Per-source status as the live agent reports it: a read succeeds when it completes (what it
    could not read is the diagnosis' business), and a command that timed out when the image was
    recorded is a read that hung."""
    took: Counter[str] = Counter()
    timed_out: set[str] = set()
    hung: list[HungSource] = []
    for item in host.manifest.items if host.manifest else ():
        argv = list(item.argv or ())
        src = "links" if item.kind == "netlink" else source_of(argv) if item.argv is not None else None
        if src is None:
            continue
        took[src] += item.duration_s
        if item.timed_out:
            timed_out.add(src)
            hung.append(HungSource(src, _device_of(argv)))
    status = tuple(SourceStatus(s, s not in timed_out, round(took[s], 6)) for s in SOURCES)
    return status, tuple(sorted(set(hung), key=lambda h: (h.source, h.device)))


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
    sources, hung = _sources(host)
    return MetricsState(
        snapshot=snap, topology=topo, diagnosis=diagnosis, sources=sources, hung=hung,
        event_counts=dict(Counter(ev.code for ev in hist.events)), event_codes=tuple(sorted(EVENT_CODES)),
        taken_at=snap.taken_at,
    )
