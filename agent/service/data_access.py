"""Who may read the agent's data endpoints (DESIGN §7): ``/v1/image``, ``/v1/events`` and
``/v1/recorder`` hold topology, addresses and logs, so they are never open to the node network.

They answer on the agent's Unix socket (``--data-socket``, inside the pod: what ``kubectl exec …
railscope capture`` uses), or over TCP with ``Authorization: Bearer <token>`` when a token file is
configured (``--data-token-file``, compared in constant time, re-read when the file changes so a
rotated Secret takes effect). Without a token file a TCP request to a data endpoint is refused.
``/metrics``, ``/healthz`` and ``/readyz`` are not affected.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["DATA_PREFIX", "DataAccess", "data_access_middleware"]

log = logging.getLogger("railscope.agent.http")

DATA_PREFIX = "/v1/"


class DataAccess:
    def __init__(self, token_file: str | None = None) -> None:
        self.token_file = token_file
        self._lock = threading.Lock()
        self._cached: tuple[float, int, bytes | None] | None = None

    def token(self) -> bytes | None:
        """The bearer token, or None when TCP access is off (no file, an empty or unreadable file)."""
        if not self.token_file:
            return None
        try:
            st = os.stat(self.token_file)
        except OSError:
            return None
        with self._lock:
            if self._cached is not None and self._cached[:2] == (st.st_mtime, st.st_size):
                return self._cached[2]
            try:
                with open(self.token_file, "rb") as fh:
                    tok: bytes | None = fh.read(4096).strip() or None
            except OSError:
                tok = None
            self._cached = (st.st_mtime, st.st_size, tok)
            return tok


def _on_unix_socket(request: web.Request) -> bool:
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX


def data_access_middleware(access: DataAccess) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.path.startswith(DATA_PREFIX) and not _on_unix_socket(request):
            token = access.token()
            if token is None:
                raise web.HTTPForbidden(text="the data endpoints are served on the agent's Unix socket only "
                                             "(--data-socket); --data-token-file allows them over TCP with a "
                                             "bearer token\n")
            got = request.headers.get("Authorization", "")
            scheme, _, value = got.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token):
                log.warning("data endpoint refused", extra={"path": request.path, "peer": request.remote})
                raise web.HTTPUnauthorized(text="a bearer token is required\n",
                                           headers={"WWW-Authenticate": 'Bearer realm="railscope"'})
        return await handler(request)

    return middleware
