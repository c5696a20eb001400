"""A refusal: an HTTP status, a SPEC.md error code and one line for a person.

Every refusal of the collector is a :class:`Refused` raised where it is decided (the token, the
key, the body, the store) and answered in one place (``collector.guard``), which counts it in
``railscope_collector_refusals{endpoint,reason}``. ``AuthError`` and ``WebhookError`` are refusals
too, named for where they start.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["Refused", "error_response"]


class Refused(Exception):
    """Answer ``status`` with ``{"error": code, "message": message}``; with ``close``, the body may be
    unread and the connection cannot carry another request."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.close = status, code, message, headers or {}, close


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   close: bool = False) -> web.Response:
    resp = web.json_response({"error": code, "message": message}, status=status, headers=headers)
    if close:
        # The body may be unread: the connection cannot carry another request.
        resp.force_close()
    return resp
