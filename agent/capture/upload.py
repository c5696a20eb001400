"""Bundles to the collector: the spool's side of an upload, and the upload calls as functions.

The HTTP is :class:`agent.clients.collector.CollectorClient`'s (one client of the collector's API,
with the retry policy); this module keeps what is the spool's: the ``hello`` of a spooled bundle from
its sidecar, and where a bundle the collector refuses for good goes. :func:`upload`,
:func:`drain_spool` and :func:`upload_while_producing` are the client's calls for a caller that has a
URL and a token, not a client.

The spool is ``agent.capture.spool``'s: ``<name>.tar.gz``, the sidecar ``<name>.json`` (the hello's
keys, bytes, sha256) and ``<name>.tar.gz.sha256``, written last. A drain sends bundles oldest first
and deletes one only after the collector answered stored or duplicate; one the collector refuses for
good (409, 400, 413) or whose bytes no longer match their sha256 moves to ``<spool>/rejected/``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from agent.clients.collector import (
    CONTENT_TYPE,
    CollectorClient,
    CollectorError,
    DrainResult,
    RetryPolicy,
    UploadResult,
    frame_stream,
)
from proto.frames import Hello

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_CLUSTER",
    "NO_INCIDENT",
    "DrainResult",
    "RetryPolicy",
    "UploadError",
    "UploadResult",
    "drain_spool",
    "frame_stream",
    "hello_from_spool",
    "reject",
    "upload",
    "upload_sync",
    "upload_while_producing",
]

log = logging.getLogger("railscope.agent.upload")

#: What a failed upload raises (or returns, from :func:`upload_while_producing`): the client's error.
UploadError = CollectorError

#: Key parts for a spooled bundle that names no cluster or incident (a capture outside any incident).
DEFAULT_CLUSTER = "default"
NO_INCIDENT = "unassigned"
#: Bundles kept in ``<spool>/rejected/`` for a person; older ones are removed.
KEEP_REJECTED = 16

_CLIENT_KEYS = ("token", "token_file", "retry", "session", "rng", "timeout")


def _client(url: str, kwargs: dict[str, Any]) -> tuple[CollectorClient, dict[str, Any]]:
    """A client from the function-style keywords, and the keywords left for the call."""
    own = {k: kwargs.pop(k) for k in _CLIENT_KEYS if k in kwargs}
    return CollectorClient(url, **own), kwargs


async def upload(url: str, hello: Hello, source: str | Path | Iterable[bytes] | AsyncIterator[bytes],
                 **kwargs: Any) -> UploadResult:
    """:meth:`CollectorClient.upload` (keywords: the client's ``token``, ``token_file``, ``retry``,
    ``session``, ``rng``, ``timeout``; the call's ``expected_sha256``, ``progress``)."""
    client, rest = _client(url, dict(kwargs))
    async with client:
        return await client.upload(hello, source, **rest)


def upload_sync(url: str, hello: Hello, source: str | Path | Iterable[bytes], **kwargs: Any) -> UploadResult:
    """:func:`upload` for a caller without an event loop."""
    return asyncio.run(upload(url, hello, source, **kwargs))


async def drain_spool(spool: object, url: str, **kwargs: Any) -> DrainResult:
    """:meth:`CollectorClient.drain_spool` for a spool (or its directory) and a URL."""
    client, _rest = _client(url, dict(kwargs))
    async with client:
        return await client.drain_spool(spool)


async def upload_while_producing(url: str, hello: Hello, produce: Callable[[Callable[[bytes], None]], object],
                                 **kwargs: Any) -> tuple[object, UploadResult | CollectorError]:
    """:meth:`CollectorClient.upload_while_producing` for a URL."""
    client, _rest = _client(url, dict(kwargs))
    async with client:
        return await client.upload_while_producing(hello, produce)


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
