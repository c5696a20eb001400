"""A refusal: an HTTP status, a SPEC.md error code and one line for a person."""

from __future__ import annotations

from aiohttp import web

__all__ = ["Refused", "error_response"]


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   close: bool = False) -> web.Response:
    resp = web.json_response({"error": code, "message": message}, status=status, headers=headers)
    if close:
        # The body may be unread: the connection cannot carry another request.
        resp.force_close()
    return resp
