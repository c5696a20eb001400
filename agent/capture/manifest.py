"""Manifest items of a bundle (DESIGN §2), built as ``agent.host.image.ManifestItem`` (the one
definition the image reader and writer share), plus the ``plugin`` that declared each step."""

from __future__ import annotations

from typing import Any

from agent.host.image import ManifestItem

__all__ = ["item"]


def item(path: str, kind: str, *, argv: list[str] | tuple[str, ...] | None = None, rc: int | None = None,
         duration_s: float = 0.0, nbytes: int = 0, sha256: str | None = None, truncated: bool = False,
         timed_out: bool = False, skipped: bool = False, reason: str | None = None,
         plugin: str | None = None) -> dict[str, Any]:
    """One ``items[]`` entry as JSON."""
    doc = ManifestItem(path=path, kind=kind, argv=tuple(argv) if argv is not None else None, rc=rc,
                       duration_s=round(float(duration_s), 6), bytes=int(nbytes), sha256=sha256,
                       truncated=bool(truncated), timed_out=bool(timed_out), skipped=bool(skipped),
                       reason=reason).as_json()
    if plugin is not None:
        doc["plugin"] = plugin
    return doc
