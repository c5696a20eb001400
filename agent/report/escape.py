"""Text from a node or an image, made safe for a terminal, and documents made strict JSON.

A bundle is untrusted input (DESIGN §2): a node name, a kernel release, an event's message or a
member name may hold an escape sequence (window title, screen clear), a carriage return or a newline
(a forged ``CRITICAL`` line). Every text renderer passes such strings through ``clean``; the only
control characters left in its output are the newlines it writes itself.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["clean", "strict_json"]

_TABLE: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TABLE.update({c: f"\\x{c:02x}" for c in (0x09, 0x0A, 0x0D)})
# Line and paragraph separators, and the bidirectional overrides that reorder what a reader sees
# (CVE-2021-42574, "Trojan Source").
_TABLE.update({c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                                          *range(0x2066, 0x206A))})


def clean(text: object) -> str:
    """``text`` as one line with every control character shown as ``\\xNN`` / ``\\uNNNN``.

    >>> clean("gpu-01\\x1b]0;owned\\x07\\nCRITICAL")
    'gpu-01\\\\x1b]0;owned\\\\x07\\\\x0aCRITICAL'
    """
    return str(text).translate(_TABLE)


def strict_json(obj: Any) -> Any:
    """``obj`` with NaN / Infinity as ``null`` and tuples / sets as lists, so ``json.dumps(...,
    allow_nan=False)`` gives RFC 8259 JSON (a rate over zero time is NaN in Python)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return [strict_json(v) for v in sorted(obj, key=str)]
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    return str(obj)
