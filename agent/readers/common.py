"""Helpers every reader shares: where a reader notes why a source is missing, and tolerant parsing.

A reader never raises for a node that lacks a tool, a file or a kernel feature: it returns what it
could read and notes ``(source, reason)`` here, so that ``Snapshot.unavailable`` says why per source.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.host import CmdResult, Host
from agent.safejson import JSONError, loads_bounded

__all__ = ["BDF_RE", "Notes", "basename", "parse_json", "read_word", "to_int"]

#: A PCI function address as sysfs and netlink print it (domain may be longer than 4 digits on
#: some VMD / Hyper-V hosts).
BDF_RE = re.compile(r"\A[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")


class Notes:
    """Collects ``(source, reason)`` for sources that gave nothing, and devlink handles that were busy."""

    def __init__(self) -> None:
        self.unavailable: list[tuple[str, str]] = []
        self.busy: list[str] = []

    def missing(self, source: str, reason: str) -> None:
        entry = (source, reason)
        if entry not in self.unavailable:
            self.unavailable.append(entry)

    def timed_out(self, handle: str) -> None:
        if handle not in self.busy:
            self.busy.append(handle)

    def command(self, source: str, res: CmdResult) -> None:
        """Note why ``res`` gave no usable answer."""
        self.missing(source, res.why())


def parse_json(text: str, what: str, truncated: bool = False, pairs: bool = False) -> tuple[Any, str | None]:
    """``(document, None)`` or ``(None, one-line reason)`` — corrupt output never raises.

    ``truncated`` says the runner cut the output at its size cap, which explains a broken document.
    ``pairs``: objects as ``agent.safejson.Pairs`` (keys in order, duplicates kept), for tools that
    print a key twice in one object.
    """
    if not text.strip():
        return None, f"{what}: empty output"
    try:
        # Bounded nesting, no NaN: a recorded command's output is as untrusted as the rest of an image.
        return loads_bounded(text, what, pairs=pairs), None
    except JSONError as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        cut = ", output cut at the size cap" if truncated else ""
        return None, f"{what}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}{cut})"


def to_int(value: Any) -> int | None:
    """An int from JSON or sysfs text; None for anything else (bools too: they are not counts)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        s = value.strip()
        try:
            return int(s, 0) if s.lower().startswith("0x") else int(s)
        except ValueError:
            return None
    return None


def read_word(host: Host, path: str, max_bytes: int = 4096) -> str | None:
    """A one-value sysfs / procfs file, stripped; None when missing or empty."""
    text = host.read_text(path, max_bytes)
    if text is None:
        return None
    text = text.strip()
    return text or None


def basename(target: str | None) -> str | None:
    """The last path component of a symlink target (``../../../0000:0c:00.0`` -> ``0000:0c:00.0``)."""
    if not target:
        return None
    name = target.rstrip("/").rsplit("/", 1)[-1]
    return name or None
