"""No credential in the collector's log. aiohttp logs a refused request line with the bytes it
refused (``Invalid header value char: b'Authorization: Bearer …'``); every line, message and
traceback alike, loses the credentials an HTTP request carries before a handler writes it: the
``Authorization`` / ``Cookie`` header values and any ``Bearer`` / ``Basic`` credentials (the same
forms as the capture's redaction, which the collector does not import: docs/design.md §1).
"""

from __future__ import annotations

import logging
import re
import traceback

__all__ = ["SecretFilter", "install", "scrub"]

_MARK = "[redacted]"
_FORMS = (
    (re.compile(r"(?i)\b((?:proxy-)?authorization[ \t]*[:=][ \t]*)[^\r\n'\"]+"), r"\1" + _MARK),
    (re.compile(r"(?i)\b((?:set-)?cookie[ \t]*:[ \t]*)[^\r\n'\"]+"), r"\1" + _MARK),
    (re.compile(r"(?i)\b(bearer[ \t]+)[A-Za-z0-9._~+/=-]{4,}"), r"\1" + _MARK),
    (re.compile(r"(?i)\b(basic[ \t]+)[A-Za-z0-9+/=]{8,}"), r"\1" + _MARK),
)


def scrub(text: str) -> str:
    """``text`` without the credentials of an HTTP request."""
    low = text.lower()
    if not any(w in low for w in ("authorization", "cookie", "bearer", "basic")):
        return text
    for pattern, repl in _FORMS:
        text = pattern.sub(repl, text)
    return text


class SecretFilter(logging.Filter):
    """Rewrites a record whose text (or traceback) holds a secret form; others pass untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a broken format: logging reports it itself
            return True
        tb = ""
        if record.exc_info and record.exc_info is not True:
            tb = "".join(traceback.format_exception(*record.exc_info))
        elif record.exc_text:
            tb = record.exc_text
        clean, clean_tb = scrub(text), scrub(tb) if tb else ""
        if clean == text and clean_tb == tb:
            return True
        record.msg = clean + ("\n" + clean_tb.rstrip("\n") if clean_tb else "")
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


def install(root: logging.Logger | None = None) -> None:
    """The filter on every handler of the root logger (a logger's filter misses its children's records)."""
    root = root or logging.getLogger()
    for h in root.handlers:
        if not any(isinstance(f, SecretFilter) for f in h.filters):
            h.addFilter(SecretFilter())
