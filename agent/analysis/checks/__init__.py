"""Checks: pure functions from a snapshot (and, for time, the history) to findings (DESIGN §4).

One module per subject, each ``check(snap, topo, exp[, ...]) -> list[Finding]``. ``run_checks`` runs
them all, lets the more severe of two findings with the same code and subject stand alone (an event
and a snapshot often see the same cause), and sorts by severity, code, subject in byte order.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.analysis.checks import (
    degradation,
    eswitch,
    health,
    pfc,
    rails,
    rdma,
    readiness,
    representors,
    timeline,
    versions,
)
from agent.analysis.checks.versions import KernelRow
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding, severity_rank
from agent.model import Event, Snapshot
from agent.readers.history import Recorder

__all__ = ["SNAPSHOT_CHECKS", "KernelRow", "merge", "run_checks"]

#: the checks that need nothing but one snapshot, by subject
SNAPSHOT_CHECKS = {
    "rails": rails.check,
    "rdma": rdma.check,
    "eswitch": eswitch.check,
    "representors": representors.check,
    "pfc": pfc.check,
    "health": health.check,
    "degradation": degradation.check,
    "readiness": readiness.check,
}


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
    out: list[Finding] = []
    for fn in SNAPSHOT_CHECKS.values():
        out.extend(fn(snap, topo, exp))
    out.extend(versions.check(snap, topo, exp, kernel_table))
    out.extend(timeline.check(snap, topo, exp, events=events, recorder=recorder, capture_time=capture_time))
    out.extend(degradation.recorder_check(topo, exp, recorder))
    return merge(readiness.replaced(out, snap, exp))
