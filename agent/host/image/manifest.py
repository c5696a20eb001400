"""The node image manifest (docs/design.md §2, format v1): ``manifest.json`` written and read.

``Manifest`` and ``ManifestItem`` are what capture, the recording host and the test images write
(``manifest_to_json``); ``parse_manifest`` reads one back, validating every field of an untrusted
image: a bad item is named and dropped, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from agent.safejson import JSONError, load_json

__all__ = ["KINDS", "SCHEMA", "Manifest", "ManifestItem", "item_of", "manifest_to_json", "parse_manifest"]

SCHEMA = "railscope.bundle/v1"
KINDS = ("file", "command", "netlink", "generated")


# -- the manifest ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ManifestItem:
    """One ``items[]`` entry: a file, command, link dump or generated file of the image, or one
    that was skipped or never started (``skipped`` + ``reason``). ``path`` is relative to the root,
    None for a command that never ran (nothing was written)."""

    path: str | None
    kind: str
    argv: tuple[str, ...] | None = None
    rc: int | None = None
    duration_s: float = 0.0
    bytes: int = 0
    sha256: str | None = None
    truncated: bool = False
    timed_out: bool = False
    skipped: bool = False
    reason: str | None = None
    #: the capture plug-in that declared the step (written by capture; not read back)
    plugin: str | None = None

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "path": self.path, "kind": self.kind, "argv": list(self.argv) if self.argv is not None else None,
            "rc": self.rc, "duration_s": _finite(self.duration_s), "bytes": self.bytes, "sha256": self.sha256,
            "truncated": self.truncated, "timed_out": self.timed_out, "skipped": self.skipped,
        }
        if self.reason is not None:
            doc["reason"] = self.reason
        if self.plugin is not None:
            doc["plugin"] = self.plugin
        return doc


def item_of(path: str, data: bytes, kind: str = "file", **fields: Any) -> ManifestItem:
    """The item of content written at ``path``: its size and sha256 filled in."""
    return ManifestItem(path=path, kind=kind, bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), **fields)


@dataclass(frozen=True, slots=True)
class Manifest:
    """``manifest.json``. Times are RFC 3339 text as written (``2026-03-01T10:00:00Z``)."""

    schema: str = SCHEMA
    node: str | None = None
    cluster: str | None = None
    incident: str | None = None
    reason: str | None = None
    agent_version: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    items: tuple[ManifestItem, ...] = ()
    #: top-level keys beyond v1's (a capture's ``plugins``, ``notes``, ``hung``), kept as read
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "schema": self.schema, "node": self.node, "cluster": self.cluster, "incident": self.incident,
            "reason": self.reason, "agent_version": self.agent_version, "started_at": self.started_at,
            "ended_at": self.ended_at, "items": [it.as_json() for it in sorted(self.items, key=_item_order)],
        }

    def item(self, path: str | None) -> ManifestItem | None:
        for it in self.items:
            if it.path == path:
                return it
        return None

    def time_of(self, key: str = "ended_at") -> float | None:
        """``ended_at`` (or ``started_at``) as unix seconds; None when absent or without a zone."""
        text = self.ended_at if key == "ended_at" else self.started_at
        if text is None:
            return None
        # Imported here: only a node image has a manifest, and datetime costs a live doctor run its import.
        from datetime import datetime

        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            return None
        return dt.timestamp()


def _item_order(item: ManifestItem) -> tuple[bool, str, tuple[str, ...]]:
    # By path; a command that never ran has none and goes after every item that has one.
    return item.path is None, item.path or "", item.argv or ()


def manifest_to_json(manifest: Manifest) -> str:
    """The ``manifest.json`` text: strict JSON (RFC 8259), items sorted by path (those without one
    last), a final newline."""
    return json.dumps(manifest.as_json(), indent=1, allow_nan=False) + "\n"


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


_TEXT_FIELDS = ("node", "cluster", "incident", "reason", "agent_version", "started_at", "ended_at")
#: a field of the manifest longer than this is not a name or a time: dropped
_MAX_FIELD = 4096


def parse_manifest(data: bytes) -> tuple[Manifest, tuple[str, ...]]:
    """Read ``manifest.json``: each field is checked where it is read. A bad field or item is dropped
    and named in the problems (one line each, at most a few); a document that is not a JSON object
    gives an empty ``Manifest`` and one problem. Never raises for bad content."""
    problems: list[str] = []
    try:
        doc = load_json(data, "manifest.json")
    except JSONError as exc:
        return Manifest(), (str(exc),)
    if not isinstance(doc, dict):
        return Manifest(), ("manifest.json: not a JSON object",)
    text: dict[str, str | None] = {}
    for key in _TEXT_FIELDS:
        val = doc.get(key)
        if val is None or (isinstance(val, str) and len(val) <= _MAX_FIELD):
            text[key] = val
        else:
            text[key] = None
            problems.append(f"manifest.json: {key}: not a string, ignored")
    schema = doc.get("schema")
    if schema is not None and schema != SCHEMA:
        problems.append(f"manifest.json: schema {_short(schema)} is not {SCHEMA}; read as v1")
    raw_items = doc.get("items", [])
    items: list[ManifestItem] = []
    if not isinstance(raw_items, list):
        problems.append("manifest.json: items: not a list, ignored")
        raw_items = []
    bad = 0
    first_bad = ""
    for n, raw in enumerate(raw_items):
        item, why = _item(raw)
        if item is None:
            bad += 1
            first_bad = first_bad or f"items[{n}]: {why}"
        else:
            items.append(item)
    if bad:
        problems.append(f"manifest.json: {bad} malformed item(s) ignored (first: {first_bad})")
    extra = {k: v for k, v in doc.items() if k not in _TEXT_FIELDS and k not in ("schema", "items")}
    return Manifest(schema=SCHEMA, items=tuple(items), extra=extra, **text), tuple(problems)


def _short(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _item(raw: Any) -> tuple[ManifestItem | None, str]:
    if not isinstance(raw, dict):
        return None, "not an object"
    path = raw.get("path")
    kind = raw.get("kind", "file")
    if kind not in KINDS:
        return None, f"kind: not one of {'|'.join(KINDS)}"
    argv = raw.get("argv")
    if argv is not None:
        if not isinstance(argv, list) or not all(isinstance(a, str) and len(a) <= _MAX_FIELD for a in argv) \
                or not 0 < len(argv) <= 256:
            return None, "argv: not a list of strings"
        argv = tuple(argv)
    # A command that never ran has no file: its argv names it.
    if not (isinstance(path, str) and 0 < len(path) <= _MAX_FIELD) and not (path is None and argv is not None):
        return None, "path: not a string"
    rc = raw.get("rc")
    if rc is not None and not (_is_int(rc) and -(1 << 31) <= rc < (1 << 31)):
        return None, "rc: not an integer"
    dur = raw.get("duration_s", 0.0)
    if dur is None:
        dur = 0.0
    if isinstance(dur, bool) or not isinstance(dur, int | float) or not math.isfinite(dur) or dur < 0:
        return None, "duration_s: not a non-negative number"
    size = raw.get("bytes", 0)
    if size is None:
        size = 0
    if not _is_int(size) or size < 0:
        return None, "bytes: not a non-negative integer"
    sha = raw.get("sha256")
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        return None, "sha256: not a hex digest"
    flags = {}
    for key in ("truncated", "timed_out", "skipped"):
        val = raw.get(key, False)
        if val is None:
            val = False
        if not isinstance(val, bool):
            return None, f"{key}: not true or false"
        flags[key] = val
    reason = raw.get("reason")
    if reason is not None and not (isinstance(reason, str) and len(reason) <= _MAX_FIELD):
        return None, "reason: not a string"
    return ManifestItem(path=path, kind=kind, argv=argv, rc=rc, duration_s=float(dur), bytes=size, sha256=sha,
                        reason=reason, **flags), ""


