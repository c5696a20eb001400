"""Bundles to the collector: the spool's side of an upload.

The HTTP is :class:`agent.clients.collector.CollectorClient`'s (one client of the collector's API,
with the retry policy); this module keeps what is the spool's: the ``hello`` of a spooled bundle from
its sidecar, and where a bundle the collector refuses for good goes. :func:`drain_spool` sends the
spool through a client.

The spool is ``agent.capture.spool``'s: ``<name>.tar.gz``, the sidecar ``<name>.json`` (the hello's
keys, bytes, sha256) and ``<name>.tar.gz.sha256``, written last. A drain sends bundles oldest first
and deletes one only after the collector answered stored or duplicate; one the collector refuses for
good (409, 400, 413) or whose bytes no longer match their sha256 moves to ``<spool>/rejected/``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy, UploadResult
from proto.frames import FrameError, Hello

__all__ = ["DEFAULT_CLUSTER", "NO_INCIDENT", "DrainResult", "drain_spool", "hello_from_spool", "reject"]

log = logging.getLogger("railscope.agent.upload")

#: Key parts for a spooled bundle that names no cluster or incident (a capture outside any incident).
DEFAULT_CLUSTER = "default"
NO_INCIDENT = "unassigned"
#: Bundles kept in ``<spool>/rejected/`` for a person; older ones are removed.
KEEP_REJECTED = 16


@dataclass
class DrainResult:
    sent: list[UploadResult] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    left: int = 0  # bundles still in the spool (the collector unreachable)
    error: str = ""


async def drain_spool(spool: object, client: CollectorClient, *, retry: RetryPolicy | None = None) -> DrainResult:
    """Send every complete bundle of the spool (a ``Spool`` or its directory), oldest first, through
    ``client`` (with an optional ``retry`` for these uploads).

    A bundle is removed only after the collector answered stored or duplicate; one it refuses for
    good (or whose bytes no longer match their digest) moves to ``rejected/``; the first bundle that
    cannot reach the collector, or a token file that must be fixed first, ends the drain, leaving it
    and the rest for the next one.
    """
    return await _drain(spool, client, retry)


async def _drain(spool: object, client: CollectorClient, retry: RetryPolicy | None) -> DrainResult:
    from agent.capture.spool import Spool

    if not isinstance(spool, Spool):
        # Listing only: the cap is the capture's business.
        spool = Spool(str(spool), max_bytes=1 << 62)
    root = Path(spool.root)
    result = DrainResult()
    entries = spool.entries()
    for i, entry in enumerate(entries):
        files = [entry.bundle, entry.sha256_file, entry.sidecar]
        name = os.path.basename(entry.bundle)
        try:
            hello = hello_from_spool(entry.meta)
            expected = str(entry.meta.get("sha256") or "") or Path(entry.sha256_file).read_text().split()[0]
        except (OSError, IndexError, FrameError) as exc:
            reject(root, files, f"unreadable sidecar or .sha256: {exc}")
            result.rejected.append(name)
            continue
        try:
            res = await client.upload(hello, Path(entry.bundle), expected_sha256=expected, retry=retry)
        except CollectorError as exc:
            # Nothing wrong with the bundle when the collector is away or the token file must be fixed.
            if exc.retryable or exc.code == "token_file":
                result.left = len(entries) - i
                result.error = str(exc)
                return result
            reject(root, files, str(exc))
            result.rejected.append(name)
            continue
        spool.remove(entry)
        result.sent.append(res)
    return result


def hello_from_spool(meta: dict[str, object]) -> Hello:
    """The hello of a spooled bundle, from its sidecar (``agent.capture.spool``: the keys of
    ``Hello.to_json``); a capture that names no cluster or incident goes under the defaults."""
    doc = dict(meta)
    doc["cluster"] = doc.get("cluster") or DEFAULT_CLUSTER
    doc["incident"] = doc.get("incident") or NO_INCIDENT
    for key in ("reason", "agent", "plan"):
        doc[key] = doc.get(key) or ""
    return Hello.from_json(doc)


def reject(root: Path, files: list[str], why: str) -> None:
    """Set a spooled bundle aside in ``<spool>/rejected/`` with why; keep the newest few there."""
    dest = root / "rejected"
    dest.mkdir(mode=0o700, exist_ok=True)
    for f in files:
        if os.path.exists(f):
            os.replace(f, dest / os.path.basename(f))
    (dest / (os.path.basename(files[0]) + ".why")).write_text(why + "\n")
    log.error("spooled bundle %s set aside in %s: %s", os.path.basename(files[0]), dest, why)
    kept = sorted(dest.glob("*.tar.gz"), key=lambda p: p.stat().st_mtime)
    for old in kept[:-KEEP_REJECTED]:
        for f in (old, old.with_name(old.name + ".sha256"), old.with_name(old.name + ".why"),
                  old.with_name(old.name[: -len(".tar.gz")] + ".json")):
            f.unlink(missing_ok=True)
