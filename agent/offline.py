"""The offline pipeline: open a node image and diagnose it, once, the same way for every caller.

``railscope doctor`` (live or ``--from``), ``report``, ``diff``, ``metrics --from`` and the collector's
pages all call ``diagnose_host`` (or ``diagnose_image``, which opens the image first): snapshot,
topology, history, diagnosis, with what the history and the image could not read in ``unavailable``.
Anything that is not a node image is an ``InputError`` with one line for the operator, never a
traceback. What the pipeline reads is its *input* (a node image path, or a host a caller opened):
*source* is a reader's word (``agent.readers``). This module never opens the live host (the collector imports it): a caller with a live
node passes its host in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.analysis import pipeline
from agent.analysis.checks import KernelRow
from agent.analysis.diagnose import with_unavailable
from agent.analysis.topology import Topology
from agent.config import Expectations, Judged, ReadConfig, judge_image
from agent.findings import Diagnosis
from agent.host import Host, HostError
from agent.model import Snapshot
from agent.readers.history import History, load_history

if TYPE_CHECKING:
    from agent.host.recorded import RecordedHost

__all__ = ["Diagnosed", "InputError", "diagnose_host", "diagnose_image", "open_input"]


class InputError(Exception):
    """The input cannot be analysed (not an image, a damaged archive, a reader failure)."""


@dataclass(frozen=True)
class Diagnosed:
    """A node read and judged: what ``doctor`` prints, ``report`` renders and ``diff`` compares."""

    #: what the input is called: its path, or "this node"
    input: str
    snapshot: Snapshot
    topology: Topology
    history: History
    diagnosis: Diagnosis
    #: the image's manifest as JSON (None for a live node or an image without a readable one)
    manifest: dict[str, Any] | None
    #: why the manifest could not be read, when it could not
    manifest_error: str | None
    #: a node image's judgement: the expectations used and where each came from (its manifest's, under
    #: the command line's); None for a live node
    judged: Judged | None = None
    #: the expectations the diagnosis used (``judged.expectations`` for an image)
    expectations: Expectations | None = None


def open_input(path: str) -> RecordedHost:
    """The recorded host of a node image path; ``InputError`` when it is not one."""
    from agent.host.recorded import open_image

    try:
        return open_image(path)
    except HostError as exc:
        raise InputError(str(exc)) from None


def diagnose_host(host: Host, exp: Expectations, kernel_table: tuple[KernelRow, ...], *,
                  name: str = "this node", given: dict[str, str] | None = None,
                  exclude_devices: str | None = None, lldp: str | None = None, lldp_wait_s: float = 0.0,
                  lldp_progress: Callable[[int, int, float], None] | None = None) -> Diagnosed:
    """Read ``host`` (live or recorded) and diagnose it; the caller closes it. A reader failure is a
    ``InputError`` naming the input, ``name`` (``RAILSCOPE_DEBUG=1`` raises it instead).

    A node image is judged with the expectations its manifest records (docs/design.md §2), except those in
    ``given`` (field -> the flag or variable that stated it: the command line's), which ``exp`` holds.
    """
    from agent.readers.snapshot import take_snapshot

    judged = None
    if host.image is not None:
        recorded = host.image.manifest
        judged = judge_image(exp, given or {}, recorded.extra.get("expectations") if recorded is not None else None)
        exp = judged.expectations
    try:
        snap = take_snapshot(host, ReadConfig(net_templates=exp.net_templates, rdma_templates=exp.rdma_templates,
                                              exclude_devices=exclude_devices, lldp=lldp, rail_map=exp.rail_map,
                                              lldp_wait_s=lldp_wait_s, lldp_progress=lldp_progress))
        hist = load_history(host)
        out = pipeline.run(snap, exp, kernel_table, history=hist)
        image = host.image
        # Read after the snapshot: the readers add what they could not read of the image as they go.
        problems = image.problems if image is not None else ()
        diag = with_unavailable(out.diagnosis, problems)
        if judged is not None and judged.problems:
            diag = with_unavailable(diag, tuple(("manifest", p) for p in judged.problems))
        manifest = image.manifest.as_json() if image is not None and image.manifest is not None else None
    except HostError as exc:
        raise InputError(str(exc)) from None
    except Exception as exc:  # a reader bug must not become a traceback on an operator's terminal
        if os.environ.get("RAILSCOPE_DEBUG"):
            raise
        raise InputError(f"could not diagnose {name}: {type(exc).__name__}: {exc} "
                          "(RAILSCOPE_DEBUG=1 shows the traceback)") from None
    manifest_error = next((why for src, why in problems if src == "manifest"), None)
    return Diagnosed(name, snap, out.topology, hist, diag, manifest if isinstance(manifest, dict) else None,
                     manifest_error, judged, exp)


def diagnose_image(path: str, exp: Expectations, kernel_table: tuple[KernelRow, ...], *,
                   given: dict[str, str] | None = None, exclude_devices: str | None = None) -> Diagnosed:
    """Open the node image at ``path`` (a directory or a bundle ``.tar.gz``) and diagnose it, judged with
    its recorded expectations under ``given`` (see :func:`diagnose_host`); ``exclude_devices`` as there."""
    with open_input(path) as host:
        return diagnose_host(host, exp, kernel_table, name=path, given=given, exclude_devices=exclude_devices)
