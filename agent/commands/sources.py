"""Open what ``report`` and ``diff`` are given — a node image directory, a bundle ``.tar.gz``, or
``live`` — and run the readers and the analysis on it once.

The same steps as ``railscope doctor --from``: snapshot, topology, history, diagnosis, with the
history's and the manifest's problems in ``unavailable``. Anything that is not a node image is a
``SourceError`` with one line for the operator, never a traceback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agent.analysis.checks import KernelRow
from agent.analysis.diagnose import diagnose, with_unavailable
from agent.analysis.topology import Topology, build_topology
from agent.config import Expectations, Judged, ReadConfig, judge_image
from agent.findings import Diagnosis
from agent.host import HostError
from agent.model import Snapshot
from agent.readers.history import History, load_history

__all__ = ["LIVE", "Loaded", "SourceError", "load"]

#: the word that means "this node, now" where a path is expected (``diff BEFORE live``)
LIVE = "live"


class SourceError(Exception):
    """The source cannot be analysed (not an image, a damaged archive, a reader failure)."""


@dataclass(frozen=True)
class Loaded:
    source: str
    snapshot: Snapshot
    topology: Topology
    history: History
    diagnosis: Diagnosis
    manifest: dict[str, Any] | None
    #: the expectations a node image was judged with and where each came from; None for ``live``
    judged: Judged | None = None


def load(source: str, exp: Expectations, kernel_table: tuple[KernelRow, ...], *, host_root: str = "/",
         allow_live: bool = False, given: dict[str, str] | None = None) -> Loaded:
    """Read ``source`` (a path, or ``live`` when ``allow_live``) and diagnose it. A node image is judged
    with the expectations its manifest records, except those in ``given`` (the command line's:
    ``agent.commands.common.given_expectations``), which ``exp`` holds."""
    import tarfile
    import zlib

    from agent.readers.snapshot import take_snapshot

    damaged = (OSError, EOFError, tarfile.TarError, zlib.error)
    try:
        if allow_live and source == LIVE:
            from agent.host.live import LiveHost

            host: Any = LiveHost(host_root)
        else:
            from agent.host.recorded import open_image

            host = open_image(source)
    except HostError as exc:
        raise SourceError(str(exc)) from None
    except damaged as exc:
        raise SourceError(f"{source}: damaged archive ({exc})") from None

    judged = None
    if host.image is not None:
        manifest_doc = host.image.manifest.extra.get("expectations") if host.image.manifest else None
        judged = judge_image(exp, given or {}, manifest_doc)
        exp = judged.expectations
    try:
        cfg = ReadConfig(net_templates=exp.net_templates, rdma_templates=exp.rdma_templates)
        snap = take_snapshot(host, cfg)
        topo = build_topology(snap, exp)
        hist = load_history(host)
        diag = diagnose(snap, exp, events=hist.events, recorder=hist.recorder, capture_time=hist.capture_time,
                        kernel_table=kernel_table, topology=topo)
        diag = with_unavailable(diag, hist.unavailable)
        if host.image is not None and host.image.problems:
            diag = with_unavailable(diag, host.image.problems)
        if judged is not None and judged.problems:
            diag = with_unavailable(diag, tuple(("manifest", p) for p in judged.problems))
        manifest = host.image.manifest.as_json() if host.image is not None and host.image.manifest else None
    except HostError as exc:
        raise SourceError(str(exc)) from None
    except damaged as exc:
        raise SourceError(f"{source}: damaged archive ({exc})") from None
    except Exception as exc:  # a reader bug must not become a traceback on an operator's terminal
        if os.environ.get("RAILSCOPE_DEBUG"):
            raise
        raise SourceError(f"could not analyse {source}: {type(exc).__name__}: {exc} "
                          "(RAILSCOPE_DEBUG=1 shows the traceback)") from None
    finally:
        host.close()
    return Loaded(source, snap, topo, hist, diag, manifest if isinstance(manifest, dict) else None, judged)
