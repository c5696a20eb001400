"""The node spool (DESIGN §7): where the daemon's bundles wait for the uploader.

A directory of mode 0700 holding, per bundle, ``<name>.tar.gz``, ``<name>.tar.gz.sha256`` and a
small JSON sidecar ``<name>.json`` with the upload metadata (bundle id, node, cluster, incident,
reason, agent version, bytes, sha256). It survives restarts (it is a host path in the chart); a
bundle counts once its sidecar exists, which is written last. The spool is size-capped: past the
cap the oldest bundles are dropped first, each with a log line and
``railscope_spool_dropped_total``. The uploader removes a bundle once the collector has it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent import __version__
from agent.capture.archive import read_chunks

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
            elif name.endswith(".tar.gz") and not os.path.exists(path[: -len(".tar.gz")] + ".json"):
                log.warning("spool: removing a bundle without its sidecar", extra={"bundle": name})
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
            if os.path.exists(bundle):
                out.append(SpoolEntry(stem, bundle, bundle + ".sha256", side, meta))
        return sorted(out, key=lambda e: (float(e.meta.get("created_at") or 0), e.name))

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self.entries())

    def add(self, result: Any, *, node: str | None, cluster: str | None, incident: str | None,
            reason: str | None) -> SpoolEntry:
        """Register a bundle written into the spool (``capture_to_file(host, spool.root, ...)``):
        write its sidecar, then enforce the cap."""
        meta = {
            "schema": SIDECAR_SCHEMA, "bundle_id": result.bundle_id, "name": result.name,
            "node": result.manifest.get("node") or node, "cluster": cluster, "incident": incident,
            "reason": reason, "agent_version": __version__, "bytes": result.bytes, "sha256": result.sha256,
            "partial": result.partial, "created_at": round(time.time(), 3),
        }
        bundle = result.path
        stem = os.path.basename(bundle)[: -len(".tar.gz")]
        side = os.path.join(self.root, stem + ".json")
        tmp = os.path.join(self.root, f".railscope-{stem}.json.part")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, side)
        entry = SpoolEntry(stem, bundle, bundle + ".sha256", side, meta)
        self.enforce()
        return entry

    def capture(self, host: Any, params: Any, **kw: Any) -> SpoolEntry:
        """Capture ``host`` into the spool (``params``: ``CaptureParams``) and register it."""
        from agent.capture.runner import capture_to_file

        res = capture_to_file(host, self.root + "/", params, **kw)
        return self.add(res, node=params.node, cluster=params.cluster, incident=params.incident,
                        reason=params.reason)

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
