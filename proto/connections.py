"""Bounds on connections, before any request is read: how many one peer may hold, how many the
server holds in all (below its descriptor limit, so ``/healthz`` and the store always get one),
and how often a failing ``accept`` is logged. One implementation for both HTTP servers railscope
runs, the collector's and the node agent's (it listens on the node's address in the host network,
where no NetworkPolicy applies); here because both may import ``proto`` (tests/unit/test_import_rules.py).

A connection past a bound is closed as soon as it is accepted: it never gets a request handler.
The header deadline is aiohttp's own idle timeout (``keepalive_timeout``), which since 3.10 also
runs from the moment a connection opens and closes one whose request never completes. Over TLS a
connection is counted from its TCP accept, before its handshake, and the handshake has a deadline and
caps of its own (``GuardedSite``).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from yarl import URL

__all__ = ["ConnectionGuard", "GuardedSite", "limit_accept_errors", "runner_args", "total_connections"]

#: Descriptors kept out of the connection budget: the store's sockets, the analysis child, the
#: agent's netlink sockets and commands, logs.
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
    """The request handler behind a gate, counted from the TCP accept on.

    With TLS, the handshake runs here (``loop.start_tls``) rather than in the listening server:
    asyncio's own TLS server calls the protocol only once the handshake is done, so a client that
    sends no ClientHello would be held for asyncio's 60 s handshake timeout outside every bound.
    Here a connection counts against the peer's and the replica's caps the moment it is accepted,
    its handshake counts against the handshake caps until it ends, and a handshake not done within
    ``handshake_timeout_s`` is aborted.
    """

    def __init__(self, guard: ConnectionGuard, inner: Any, tls: _Tls | None = None) -> None:
        self._guard, self._inner, self._tls = guard, inner, tls
        self._peer: str | None = None
        self._connected = False  # the inner handler has had connection_made
        self._lost = False
        self._early: list[bytes | None] = []  # what arrived between the handshake and the handler
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._lost or self._connected or self._peer is not None:
            return  # start_tls hands this protocol to the TLS layer: only the TCP accept counts
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._guard.admit(host):
            self._inner = None
            transport.abort()  # type: ignore[attr-defined]
            return
        self._peer = host
        if self._tls is None:
            self._connect(transport)
            return
        if not self._tls.handshakes.admit(host):
            self._inner = None
            self._release()
            transport.abort()  # type: ignore[attr-defined]
            return
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport, host))
        self._tls.tasks.add(self._task)
        self._task.add_done_callback(self._tls.tasks.discard)

    async def _handshake(self, transport: asyncio.BaseTransport, host: str) -> None:
        assert self._tls is not None
        try:
            app = await asyncio.get_running_loop().start_tls(
                transport, self, self._tls.context, server_side=True,  # type: ignore[arg-type]
                ssl_handshake_timeout=self._tls.timeout_s)
        except BaseException:  # refused, timed out, reset, or the site stopping (cancelled)
            # start_tls has closed the transport; the TLS layer never calls this protocol for a
            # handshake that failed.
            self._tls.handshakes.release(host)
            self._inner = None
            self._release()
            if not transport.is_closing():
                transport.abort()  # type: ignore[attr-defined]
            return
        self._tls.handshakes.release(host)
        if self._lost or app is None:
            self._inner = None
            return
        self._connect(app)

    def _connect(self, transport: asyncio.BaseTransport) -> None:
        self._connected = True
        self._inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            if data is None:
                self._inner.eof_received()
            else:
                self._inner.data_received(data)

    def _release(self) -> None:
        if self._peer is not None:
            self._guard.release(self._peer)
            self._peer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._release()
        if self._inner is not None and self._connected:
            self._inner.connection_lost(exc)
        self._inner = None

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._connected:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._inner is None:
            return None
        if not self._connected:
            self._early.append(None)
            return True  # keep the transport open until the handler has seen it
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None and self._connected:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None and self._connected:
            self._inner.resume_writing()


class _Tls:
    """What a TLS connection is served with: the context (looked up per connection, so a reloaded
    pair is used by the next handshake), the handshake caps and the handshake deadline."""

    def __init__(self, context: Callable[[], ssl.SSLContext], handshakes: ConnectionGuard, timeout_s: float) -> None:
        self._context, self.handshakes, self.timeout_s = context, handshakes, timeout_s
        #: handshakes in progress, ended when the site stops
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def context(self) -> ssl.SSLContext:
        return self._context()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections pass a ``ConnectionGuard`` at accept, before any TLS (the
header deadline is the runner's ``keepalive_timeout``: ``runner_args``).

    ``ssl_context`` may be a context or a function returning the one in use (a reloader's swap).
    ``handshakes`` bounds the TLS handshakes in progress, per peer and in all; ``handshake_timeout_s``
    ends one that takes longer.
    """

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard,
                 ssl_context: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
                 handshakes: ConnectionGuard | None = None, handshake_timeout_s: float = 10.0,
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard
        self.handshakes = handshakes or ConnectionGuard(0, 1 << 30)
        self.handshake_timeout_s = handshake_timeout_s
        if isinstance(ssl_context, ssl.SSLContext):
            fixed = ssl_context
            self._tls_context: Callable[[], ssl.SSLContext] | None = lambda: fixed
        else:
            self._tls_context = ssl_context

    @property
    def name(self) -> str:
        scheme = "https" if self._tls_context is not None else "http"
        return str(URL.build(scheme=scheme, host=self._host, port=self._port))

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        guard = self.guard
        tls = None
        if self._tls_context is not None:
            tls = _Tls(self._tls_context, self.handshakes, self.handshake_timeout_s)

        def factory() -> asyncio.Protocol:
            return _Guarded(guard, server(), tls)

        self._tls = tls
        # No ssl= here: the handshake is the protocol's (see _Guarded).
        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        tls = getattr(self, "_tls", None)
        if tls is not None:
            for task in list(tls.tasks):
                task.cancel()
            if tls.tasks:
                await asyncio.gather(*tls.tasks, return_exceptions=True)
        await super().stop()


def runner_args(header_timeout_s: float, max_header_bytes: int = 8190) -> dict[str, int | float]:
    """``web.AppRunner`` arguments: bounded request line and header fields (aiohttp's parser refuses
    longer ones with 400), and the header deadline. aiohttp closes a connection idle this long,
    counted from its opening too (3.10+): a request whose headers never complete is closed then."""
    return {"max_line_size": 8190, "max_field_size": max_header_bytes, "keepalive_timeout": header_timeout_s}


def limit_accept_errors(loop: asyncio.AbstractEventLoop, every_s: float = 10.0,
                        clock: Callable[[], float] = time.monotonic,
                        log: logging.Logger | None = None) -> None:
    """Log a failing ``accept`` (out of descriptors) once per ``every_s`` with the count since, not
    once per attempt: at the descriptor limit the loop retries every second per listening socket."""
    state = {"last": float("-inf"), "quiet": 0}
    default = loop.get_exception_handler()
    log = log or logging.getLogger("railscope")

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
