"""Text from a node made safe for a terminal.

A node image is untrusted (docs/design.md §2): a netdev alias, an event message or a manifest reason can
carry escape sequences that would repaint an operator's terminal. Control characters (C0, DEL, C1)
and the bidirectional overrides become visible ``\\xNN`` / ``\\uNNNN`` escapes. This is the one
escaping function: every text renderer (``text.py``, ``report_text.py``, ``diff_text.py``) and every
error line that quotes an image passes node text through ``safe``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["cell", "safe"]

# C0, DEL, C1; the Arabic letter mark, LRM / RLM and the bidirectional embeddings, overrides and
# isolates (CVE-2021-42574, "Trojan Source"); the line and paragraph separators some terminals and
# pagers break lines at.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(value: object) -> str:
    """``str(value)`` with every control character escaped (``None`` is ``-``).

    >>> safe("net\\x1b[2Jrail")
    'net\\\\x1b[2Jrail'
    """
    if value is None:
        return "-"
    return _UNSAFE.sub(_escape, str(value))


def cell(value: object, text: Callable[[object], str] = safe) -> str:
    """A value as a table cell shows it: ``-`` for none, ``on`` / ``off`` for a bool, else ``text``
    of it (``safe`` for a terminal; the HTML page passes ``str`` and escapes for HTML itself)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return text(value)
