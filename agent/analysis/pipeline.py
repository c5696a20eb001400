"""The one pipeline from a snapshot to a diagnosis: snapshot -> topology -> history -> diagnosis.

``railscope doctor``, ``railscope metrics --from`` and the daemon all call ``run``; they differ only in
where the snapshot and the history come from (a node image's ``events.json`` / ``recorder.jsonl`` and
capture time, or the daemon's event log and its clock). Pure: the kernel table is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.analysis.checks import KernelRow
from agent.analysis.diagnose import diagnose, with_unavailable
from agent.analysis.topology import Topology, build_topology
from agent.config import Expectations
from agent.findings import Diagnosis
from agent.model import Snapshot
from agent.readers.history import History

__all__ = ["Outcome", "run"]


@dataclass(frozen=True, slots=True)
class Outcome:
    snapshot: Snapshot
    topology: Topology
    diagnosis: Diagnosis


def run(snap: Snapshot, exp: Expectations, kernel_table: tuple[KernelRow, ...], *,
        history: History | None = None, capture_time: float | None = None) -> Outcome:
    """The topology and diagnosis of ``snap``; ``capture_time`` (default: the history's) ends the event
    window. What the history could not read joins ``unavailable``."""
    hist = history or History()
    topo = build_topology(snap, exp)
    when = capture_time if capture_time is not None else hist.capture_time
    diag = diagnose(snap, exp, events=hist.events, recorder=hist.recorder, capture_time=when,
                    kernel_table=kernel_table, topology=topo)
    return Outcome(snap, topo, with_unavailable(diag, hist.unavailable))
