"""No credential in the collector's log. aiohttp logs a refused request line with the bytes it
refused (``Invalid header value char: b'Authorization: Bearer …'``); every line, message and
traceback alike, passes the capture's secret redaction before a handler writes it.
"""

from __future__ import annotations

import logging
import traceback

from agent.capture.redact import Redactor

__all__ = ["SecretFilter", "install"]

_REDACTOR = Redactor()


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
        clean, clean_tb = _REDACTOR.text(text), _REDACTOR.text(tb) if tb else ""
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
