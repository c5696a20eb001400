"""Manifest items of a bundle (DESIGN §2): the one place capture builds them.

Each item: ``path``, ``kind`` (file|command|netlink|generated), ``argv``, ``rc``, ``duration_s``,
``bytes``, ``sha256``, ``truncated``, ``timed_out``, ``skipped`` + ``reason``; capture adds the
``plugin`` that declared it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["item"]


def item(path: str, kind: str, *, argv: list[str] | tuple[str, ...] | None = None, rc: int | None = None,
         duration_s: float = 0.0, nbytes: int = 0, sha256: str | None = None, truncated: bool = False,
         timed_out: bool = False, skipped: bool = False, reason: str | None = None,
         plugin: str | None = None) -> dict[str, Any]:
    """One ``items[]`` entry."""
    out: dict[str, Any] = {
        "path": path, "kind": kind, "argv": list(argv) if argv is not None else None, "rc": rc,
        "duration_s": round(float(duration_s), 6), "bytes": int(nbytes), "sha256": sha256,
        "truncated": bool(truncated), "timed_out": bool(timed_out), "skipped": bool(skipped),
    }
    if reason is not None:
        out["reason"] = reason
    if plugin is not None:
        out["plugin"] = plugin
    return out
