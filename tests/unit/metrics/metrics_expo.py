"""Helpers shared by the metrics tests: build a state, read an exposition back."""

from __future__ import annotations

from functools import lru_cache

from prometheus_client.parser import text_string_to_metric_families

from agent.config import Expectations
from agent.metrics.state import MetricsState
from agent.model import Snapshot
from agent.topology import build_topology


def state_for(snap: Snapshot, **kw) -> MetricsState:
    return MetricsState(snapshot=snap, topology=build_topology(snap, Expectations()), **kw)


@lru_cache(maxsize=16)
def series(text: bytes) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value); cached, so callers must not modify the result."""
    out = []
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.append((s.name, dict(s.labels), s.value))
    return out


def value(text: bytes, name: str, **labels: str) -> float:
    hits = [v for n, lab, v in series(text) if n == name and all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} series"
    return hits[0]


def names(text: bytes) -> set[str]:
    return {n for n, _, _ in series(text)}
