"""Bounds on connections, before any request is read: how many one peer may hold, how many the
replica holds in all (below its descriptor limit, so ``/healthz`` and the store always get one),
and how often a failing ``accept`` is logged.

A connection past a bound is closed as soon as it is accepted: it never gets a request handler.
The header deadline is aiohttp's own idle timeout (``keepalive_timeout``), which since 3.10 also
runs from the moment a connection opens and closes one whose request never completes.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["ConnectionGuard", "GuardedSite", "limit_accept_errors", "total_connections"]

log = logging.getLogger("railscope.collector")

#: Descriptors kept out of the connection budget: the store's sockets, the analysis child, logs.
_RESERVE_FDS = 64


def total_connections() -> int:
    """The replica's connection budget: its descriptor limit less a reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, soft - _RESERVE_FDS)


class ConnectionGuard:
    """Counts open connections per peer address and in all."""

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer, self.total = per_peer, total
        self.open: dict[str, int] = {}
        self.count = 0
        self.refused = 0

    def admit(self, peer: str) -> bool:
        if self.count >= self.total or (self.per_peer and self.open.get(peer, 0) >= self.per_peer):
            self.refused += 1
            return False
        self.open[peer] = self.open.get(peer, 0) + 1
        self.count += 1
        return True

    def release(self, peer: str) -> None:
        n = self.open.get(peer, 0) - 1
        if n > 0:
            self.open[peer] = n
        else:
            self.open.pop(peer, None)
        self.count -= 1


class _Guarded(asyncio.Protocol):
    """The request handler behind a gate: admitted connections reach it, others are closed."""

    def __init__(self, guard: ConnectionGuard, inner: Any) -> None:
        self._guard, self._inner, self._peer = guard, inner, None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._guard.admit(host):
            self._inner = None
            transport.abort()  # type: ignore[attr-defined]
            return
        self._peer = host
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is not None:
            self._guard.release(self._peer)
            self._peer = None
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections pass a ``ConnectionGuard`` first."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard,
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        guard = self.guard

        def factory() -> asyncio.Protocol:
            return _Guarded(guard, server())

        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def limit_accept_errors(loop: asyncio.AbstractEventLoop, every_s: float = 10.0,
                        clock: Callable[[], float] = time.monotonic) -> None:
    """Log a failing ``accept`` (out of descriptors) once per ``every_s`` with the count since, not
    once per attempt: at the descriptor limit the loop retries every second per listening socket."""
    state = {"last": float("-inf"), "quiet": 0}
    default = loop.get_exception_handler()

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith("socket.accept()"):
            now = clock()
            if now - state["last"] < every_s:
                state["quiet"] += 1
                return
            exc = context.get("exception")
            log.error("%s: %s (%d more since the last report)", message, exc, state["quiet"])
            state["last"], state["quiet"] = now, 0
            return
        if default is not None:
            default(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
