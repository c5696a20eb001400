"""Checks: pure functions from a snapshot (and, for time, the history) to findings (docs/design.md §4).

One module per subject, each declaring its ``CHECKS`` (``_util.Check``: its order, the codes it may
emit, the function; ``_util.Refine``: a rule over every check's findings). ``run_checks`` finds every
module of this package that declares ``CHECKS``, runs the checks in order, applies the refinements,
lets the more severe of two findings with the same code and subject stand alone (an event and a
snapshot often see the same cause), and sorts by severity, code, subject in byte order. Adding a check
is a module (or a function in one) that declares it: nothing here names one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import import_module

from agent.analysis.checks._util import Check, Inputs, Refine
from agent.analysis.checks.versions import KernelRow
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding, severity_rank
from agent.model import Event, Snapshot
from agent.readers.history import Recorder

__all__ = ["CHECKS", "REFINES", "Check", "Inputs", "KernelRow", "Refine", "discover", "merge", "run_checks"]


def discover(package_dir: str | None = None, package: str = __name__) -> tuple[tuple[Check, ...], tuple[Refine, ...]]:
    """The ``CHECKS`` of every module of ``package``: its checks and its refinements, each in order."""
    here = package_dir or os.path.dirname(os.path.abspath(__file__))
    checks: list[tuple[int, str, Check]] = []
    refines: list[tuple[int, str, Refine]] = []
    for fname in sorted(os.listdir(here)):
        mod, ext = os.path.splitext(fname)
        if ext != ".py" or mod.startswith("_"):
            continue
        for c in getattr(import_module(f"{package}.{mod}"), "CHECKS", ()):
            if isinstance(c, Check):
                checks.append((c.order, mod, c))
            elif isinstance(c, Refine):
                refines.append((c.order, mod, c))
            else:
                raise RuntimeError(f"{package}.{mod}.CHECKS holds {type(c).__name__}, not a Check or a Refine")
    for kind, found in (("checks", checks), ("refinements", refines)):
        orders = [o for o, _, _ in found]
        if len(set(orders)) != len(orders):
            raise RuntimeError(f"two {kind} share one order: {sorted((o, m) for o, m, _ in found)}")
    return (tuple(c for _, _, c in sorted(checks, key=lambda t: t[0])),
            tuple(r for _, _, r in sorted(refines, key=lambda t: t[0])))


CHECKS, REFINES = discover()


def merge(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """One finding per (code, subject): the most severe (the first of equals) stands alone; sorted."""
    best: dict[tuple[str, str], Finding] = {}
    for f in findings:
        key = (f.code, f.subject)
        cur = best.get(key)
        if cur is None or severity_rank(f.severity) < severity_rank(cur.severity):
            best[key] = f
    return tuple(sorted(best.values(), key=Finding.sort_key))


def run_checks(snap: Snapshot, topo: Topology, exp: Expectations, *, kernel_table: tuple[KernelRow, ...] = (),
               events: tuple[Event, ...] = (), recorder: Recorder | None = None,
               capture_time: float | None = None) -> tuple[Finding, ...]:
    inputs = Inputs(snap, topo, exp, kernel_table=kernel_table, events=events, recorder=recorder,
                    capture_time=capture_time)
    out: list[Finding] = []
    for c in CHECKS:
        out.extend(c.run(inputs))
    for r in REFINES:
        out = r.run(out, inputs)
    return merge(out)
