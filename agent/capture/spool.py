"""The node spool (docs/design.md §7): where the daemon's bundles wait for the uploader.

A directory of mode 0700 holding, per bundle, ``<name>.tar.gz``, a small JSON sidecar
``<name>.json`` with the upload metadata (the keys of ``proto.frames.Hello.to_json``: bundle id,
node, cluster, incident, reason, agent version, capture time, plan; plus bytes and sha256) and
``<name>.tar.gz.sha256``, written last: a bundle counts (for the uploader too) once it exists. It
survives restarts (it is a host path in the chart). The spool is size-capped: past the
cap the oldest bundles are dropped first, each with a log line and
``railscope_spool_dropped_total``. The uploader removes a bundle once the collector has it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agent import __version__
from agent.capture.archive import read_chunks
from proto.frames import Hello

__all__ = ["Spool", "SpoolEntry"]

log = logging.getLogger("railscope.capture.spool")

SIDECAR_SCHEMA = "railscope.spool/v1"


@dataclass(frozen=True)
class SpoolEntry:
    name: str
    bundle: str  # <spool>/<name>.tar.gz
    sha256_file: str
    sidecar: str
    meta: dict[str, Any]
    #: the capture that made it, when it was made by this process
    result: Any = field(default=None, compare=False)

    @property
    def bytes(self) -> int:
        try:
            return os.path.getsize(self.bundle)
        except OSError:
            return 0

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The bundle's bytes, as the uploader streams them."""
        with open(self.bundle, "rb") as fh:
            yield from read_chunks(fh, size)


class Spool:
    def __init__(self, root: str, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("the spool cap must be positive")
        self.root = os.path.abspath(root)
        self.max_bytes = max_bytes
        self.dropped_total = 0
        self._lock = threading.Lock()
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)  # an existing directory too: bundles hold topology and logs
        self._clean_leftovers()

    def _clean_leftovers(self) -> None:
        """What a capture killed mid-way left (a ``.part`` file, a staging tree, an orphan bundle)."""
        import shutil

        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if name.startswith(".railscope-"):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    _unlink(path)
            elif name.endswith(".tar.gz") and not (os.path.exists(path + ".sha256") and
                                                   os.path.exists(path[: -len(".tar.gz")] + ".json")):
                log.warning("spool: removing a bundle a capture left unfinished", extra={"bundle": name})
                _unlink(path[: -len(".tar.gz")] + ".json")
                _unlink(path)
                _unlink(path + ".sha256")

    def entries(self) -> list[SpoolEntry]:
        """The complete bundles, oldest first."""
        out = []
        for name in os.listdir(self.root):
            if not name.endswith(".json") or name.startswith("."):
                continue
            stem = name[: -len(".json")]
            bundle = os.path.join(self.root, stem + ".tar.gz")
            side = os.path.join(self.root, name)
            try:
                with open(side, encoding="utf-8") as fh:
                    meta = json.load(fh)
                if not isinstance(meta, dict):
                    raise ValueError("not an object")
            except (OSError, ValueError):
                continue
            if os.path.exists(bundle) and os.path.exists(bundle + ".sha256"):
                out.append(SpoolEntry(stem, bundle, bundle + ".sha256", side, meta))
        return sorted(out, key=lambda e: (float(e.meta.get("spooled_at") or 0), e.name))

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries())

    def sidecar(self, result: Any, hello: Hello) -> dict[str, Any]:
        """Write a spooled bundle's sidecar (before its ``.sha256``: the uploader reads it then): the
        upload's ``hello`` and what the capture made."""
        meta = {
            **hello.to_json(),
            "name": result.name, "bytes": result.bytes, "sha256": result.sha256, "partial": result.partial,
            "spooled_at": round(time.time(), 6),
        }
        stem = os.path.basename(result.path)[: -len(".tar.gz")]
        tmp = os.path.join(self.root, f".railscope-{stem}.json.part")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, os.path.join(self.root, stem + ".json"))
        return meta

    def capture(self, host: Any, params: Any, *, hello: Callable[..., Hello] | None = None, **kw: Any) -> SpoolEntry:
        """Capture ``host`` into the spool (``params``: ``CaptureParams``), then enforce the cap.
        ``hello(bundle=, node=, created=)`` gives the upload's hello (``Job.hello``); without it, one
        of ``params`` with no plan."""
        from agent.capture.runner import capture_to_file

        def default(*, bundle: str, node: str, created: float) -> Hello:
            return Hello(bundle=bundle, node=node, cluster=params.cluster or "", incident=params.incident or "",
                         reason=params.reason or "", agent=__version__, created=int(created), plan="")

        make = hello or default
        meta: dict[str, Any] = {}

        def sidecar(res: Any) -> None:
            meta.update(self.sidecar(res, make(bundle=res.bundle_id, node=res.manifest.get("node") or "",
                                               created=res.started_ts or time.time())))

        res = capture_to_file(host, self.root + "/", params, before_sha256=sidecar, **kw)
        assert res.path is not None
        stem = os.path.basename(res.path)[: -len(".tar.gz")]
        # The sidecar as written, kept: nothing on disk is read back.
        entry = SpoolEntry(stem, res.path, res.path + ".sha256", os.path.join(self.root, stem + ".json"), meta, res)
        self.enforce()
        return entry

    def enforce(self) -> list[str]:
        """Drop the oldest bundles until the spool is within its cap; returns the dropped names."""
        dropped = []
        with self._lock:
            entries = self.entries()
            total = sum(e.bytes for e in entries)
            while entries and total > self.max_bytes:
                old = entries.pop(0)
                total -= old.bytes
                self._remove(old)
                self.dropped_total += 1
                dropped.append(old.name)
                log.warning("spool: over its cap, dropped the oldest bundle", extra={
                    "bundle": old.name, "cap_bytes": self.max_bytes, "spool_bytes": total})
        return dropped

    def remove(self, entry: SpoolEntry) -> None:
        """After the collector has the bundle."""
        with self._lock:
            self._remove(entry)

    @staticmethod
    def _remove(entry: SpoolEntry) -> None:
        _unlink(entry.sidecar)  # first: a bundle without its sidecar no longer counts
        _unlink(entry.bundle)
        _unlink(entry.sha256_file)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
