"""What every metrics subject module shares: the families of one scrape, the label helper, the scrape's
inputs, and the declaration a subject module makes of itself (``SUBJECT``).

The exporter (``agent.metrics.exporter``) finds every module of this package that declares
``SUBJECT = Subject(order, render)`` and, at each scrape, calls their ``render`` in ``order`` on one
``Families``: families are emitted in the order they were first used, so ``order`` is also the order
of the exposition. Adding a subject is a module that declares its ``SUBJECT``; the exporter names none.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from agent.findings import RailRow
from agent.metrics.state import MetricsState

__all__ = ["PF", "RAIL", "Families", "Scrape", "Subject", "discover", "label"]

RAIL = ("rail", "plane", "device")
PF = ("pci", "device")


def label(value: Any) -> str:
    """A label value: None -> "" (Prometheus treats an empty label as absent), bools as words."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Families:
    """Families created on first use, emitted in creation order, empty ones left out."""

    def __init__(self) -> None:
        self._fams: dict[str, Metric] = {}
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def _get(self, cls: type, name: str, doc: str, labels: Iterable[str], values: list[str]) -> Any:
        # Two samples with one label set make Prometheus reject them; a node that confuses the
        # topology (two rules naming one rail) must not cost the whole scrape. The first one wins.
        key = (name, tuple(values))
        if key in self._seen:
            return None
        self._seen.add(key)
        fam = self._fams.get(name)
        if fam is None:
            fam = cls(name, doc, labels=list(labels))
            self._fams[name] = fam
        return fam

    def gauge(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str], value: float) -> None:
        vals = list(values)
        fam = self._get(GaugeMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, value)

    def counter(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str], value: float) -> None:
        vals = list(values)
        fam = self._get(CounterMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, value)

    def info(self, name: str, doc: str, labels: Iterable[str], values: Iterable[str],
             facts: dict[str, str]) -> None:
        vals = list(values)
        fam = self._get(InfoMetricFamily, name, doc, labels, vals)
        if fam is not None:
            fam.add_metric(vals, facts)

    def __iter__(self) -> Iterator[Metric]:
        return (f for f in self._fams.values() if f.samples)


@dataclass(frozen=True, slots=True)
class Scrape:
    """What one scrape renders: the latest state, "now", and the exporter's options."""

    state: MetricsState
    now: float
    #: regex on representor netdev names that turns on per-representor series (None: off)
    representor_include: re.Pattern[str] | None = None

    @property
    def rows(self) -> dict[tuple[int | None, int | None], RailRow]:
        """(rail, plane) -> the diagnosis' rail row."""
        diag = self.state.diagnosis
        return {(r.rail, r.plane): r for r in (diag.rails if diag else ())}


@dataclass(frozen=True, slots=True)
class Subject:
    """A metrics subject module's declaration: where it renders among the others, and how."""

    order: int
    render: Callable[[Families, Scrape], None]


#: modules of this package that are the plumbing, not a subject (the exposition and the image renderer
#: import the exporter, which finds the subjects)
_PLUMBING = frozenset({"exporter", "exposition", "families", "image", "state"})


def discover(package_dir: str | None = None, package: str = "agent.metrics") -> tuple[Subject, ...]:
    """Every ``SUBJECT`` of the modules of ``package``, in ``order``."""
    here = package_dir or os.path.dirname(os.path.abspath(__file__))
    found: list[tuple[int, str, Subject]] = []
    for fname in sorted(os.listdir(here)):
        mod, ext = os.path.splitext(fname)
        if ext != ".py" or mod.startswith("_") or mod in _PLUMBING:
            continue
        subject = getattr(import_module(f"{package}.{mod}"), "SUBJECT", None)
        if isinstance(subject, Subject):
            found.append((subject.order, mod, subject))
    orders = [o for o, _, _ in found]
    if len(set(orders)) != len(orders):
        raise RuntimeError(f"two metrics subjects share one order: {sorted((o, m) for o, m, _ in found)}")
    return tuple(s for _, _, s in sorted(found, key=lambda t: (t[0], t[1])))
