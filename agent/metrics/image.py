"""The ``MetricsState`` a node image stands for: what the agent would have served at capture time.

The same offline pipeline as ``doctor --from`` (``agent.offline``) runs on the image. The parts that only a
running agent has come from what the image recorded instead: per-source read times from the
manifest's ``duration_s``, hung reads from its ``timed_out`` items, event counts from ``events.json``;
the sample is as old as the capture.
"""

from __future__ import annotations

from collections import Counter

from agent.analysis.checks import KernelRow
from agent.config import Expectations
from agent.findings import EVENT_CODES
from agent.host.recorded import RecordedHost
from agent.metrics.state import HungSource, MetricsState, SourceStatus
from agent.offline import diagnose_host
from agent.readers import sources as registry

__all__ = ["state_from_image"]


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
        if item.kind == "netlink":
            src: str | None = next(s.name for s in registry.SOURCES if s.netlink)
        else:
            src = registry.source_of(argv) if item.argv is not None else None
        if src is None:
            continue
        took[src] += item.duration_s
        if item.timed_out:
            timed_out.add(src)
            hung.append(HungSource(src, _device_of(argv)))
    status = tuple(SourceStatus(s, s not in timed_out, round(took[s], 6)) for s in registry.names())
    return status, tuple(sorted(set(hung), key=lambda h: (h.source, h.device)))


def state_from_image(host: RecordedHost, exp: Expectations, kernel_table: tuple[KernelRow, ...], *,
                     given: dict[str, str] | None = None, exclude_devices: str | None = None) -> MetricsState:
    """Read the image like the agent reads a node, and package it as the agent's latest sample: judged
    with the expectations the image records, except those the command line states (``given``, held in
    ``exp``); firmware reads never reach what ``exclude_devices`` matches, as on the node.

    Raises ``InputError`` when the image cannot be read (``agent.offline``)."""
    got = diagnose_host(host, exp, kernel_table, name=host.name, given=given, exclude_devices=exclude_devices)
    snap = got.snapshot
    sources, hung = _sources(host)
    return MetricsState(
        snapshot=snap, topology=got.topology, diagnosis=got.diagnosis, sources=sources, hung=hung,
        event_counts=dict(Counter(ev.code for ev in got.history.events)), event_codes=tuple(sorted(EVENT_CODES)),
        taken_at=snap.taken_at,
    )
