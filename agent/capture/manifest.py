"""Manifest items of a bundle (docs/design.md §2), built as ``agent.host.image.ManifestItem`` (the one
definition the image reader and writer share, with the ``plugin`` that declared each step); and the
manifest's note of an event capture that waited for the rails' links to settle."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.host.image import ManifestItem

__all__ = ["as_item", "item", "settle_note"]


def item(path: str, kind: str, *, argv: list[str] | tuple[str, ...] | None = None, rc: int | None = None,
         duration_s: float = 0.0, nbytes: int = 0, sha256: str | None = None, truncated: bool = False,
         timed_out: bool = False, skipped: bool = False, reason: str | None = None,
         plugin: str | None = None) -> dict[str, Any]:
    """One ``items[]`` entry as JSON."""
    return ManifestItem(path=path, kind=kind, argv=tuple(argv) if argv is not None else None, rc=rc,
                        duration_s=round(float(duration_s), 6), bytes=int(nbytes), sha256=sha256,
                        truncated=bool(truncated), timed_out=bool(timed_out), skipped=bool(skipped),
                        reason=reason, plugin=plugin).as_json()


def as_item(doc: dict[str, Any]) -> ManifestItem:
    """An ``items[]`` entry as :func:`item` made it (its bytes and digest filled in when packed)."""
    argv = doc.get("argv")
    return ManifestItem(path=doc["path"], kind=doc["kind"], argv=tuple(argv) if argv is not None else None,
                        rc=doc.get("rc"), duration_s=doc.get("duration_s", 0.0), bytes=doc.get("bytes", 0),
                        sha256=doc.get("sha256"), truncated=doc.get("truncated", False),
                        timed_out=doc.get("timed_out", False), skipped=doc.get("skipped", False),
                        reason=doc.get("reason"), plugin=doc.get("plugin"))


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ts * 1000) % 1000:03d}Z"


def settle_note(waited_s: float, change: tuple[float, str, bool] | None, settled: bool) -> str | None:
    """The manifest note of an event capture that waited for the rails' links to settle
    (``agent.capture.trigger``): how long, and the last change of a rail it saw (time, netdev, oper up).
    None when it did not wait."""
    if change is None or (waited_s <= 0 and settled):
        return None
    ts, netdev, up = change
    state = "came back up" if up else "went down"
    if settled:
        return (f"settle: waited {waited_s:.1f}s for the rails' links to settle before the capture; "
                f"{netdev} {state} at {_when(ts)}")
    return (f"settle: the rails' links did not settle within {waited_s:.1f}s; captured as they were: "
            f"{netdev} {state} at {_when(ts)} and was {'up' if up else 'down'} at capture start")
