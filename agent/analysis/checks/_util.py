"""What the checks share (pure): the finding helper, labels, and the declaration a check module makes of
its checks (``CHECKS``: ``Check`` and ``Refine``) with their ``Inputs``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import CODES, Finding
from agent.model import Event, Snapshot
from agent.readers.history import Recorder


def finding(code: str, subject: str, message: str, severity: str | None = None, **evidence: Any) -> Finding:
    """A finding with the code's default severity unless one is given; None evidence is dropped."""
    return Finding(code, severity or CODES[code], subject, message,
                   {k: v for k, v in evidence.items() if v is not None})


def rail_label(rail: int, plane: int | None) -> str:
    """``"1"``, or ``"1 plane 0"`` on a multiplane node (rail numbers repeat across planes)."""
    return str(rail) if plane is None else f"{rail} plane {plane}"


def name_list(names: list[str] | tuple[str, ...], limit: int = 8) -> str:
    """``a, b, c`` — cut after ``limit`` names with how many more (a node can leak hundreds of
    representors: the message stays one readable line, the evidence keeps them all)."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


@dataclass(frozen=True, slots=True)
class Inputs:
    """Everything a check may judge: one snapshot, its topology, the expectations, and the history."""

    snap: Snapshot
    topo: Topology
    exp: Expectations
    #: the DriverKernelUnvalidated table (``agent.readers.kernel_table``), the caller's
    kernel_table: tuple[Any, ...] = ()
    #: the agent's events and flight recorder (``events.json``, ``recorder.jsonl``) of a node image
    events: tuple[Event, ...] = ()
    recorder: Recorder | None = None
    capture_time: float | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """A check module's declaration of one of its checks (``CHECKS``): its place among the others (the
    first of two equally severe findings with one code and subject stands: an event before the rate
    the recorder gives), the codes it may emit, and the function."""

    order: int
    codes: tuple[str, ...]
    run: Callable[[Inputs], list[Finding]]


@dataclass(frozen=True, slots=True)
class Refine:
    """A rule over every check's findings, applied once they all ran (one finding per cause: a naming
    conflict replaces the mismatches it causes, docs/design.md §4)."""

    order: int
    run: Callable[[list[Finding], Inputs], list[Finding]]
