"""The collector's HTTP app: upload, the bundle API, capture requests, alerts, pages and the probes.

An app factory (aiohttp-demos ``polls``): the store, the authenticator and the request board live in
``cleanup_ctx``; the routes are the table of ``collector.routes``, each checked by the guard
middleware against the roles it names; ``serve`` binds the address with bounded request lines and
headers.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
from collections.abc import AsyncIterator

from aiohttp import web

from proto.connections import (
    ConnectionGuard,
    GuardedSite,
    ProxyProtocol,
    limit_accept_errors,
    runner_args,
    total_connections,
)

from . import alerts, logsafe, pages, routes
from . import requests as capture_requests
from .auth import Authenticator
from .cluster import watch as cluster_watch
from .config import CollectorSettings
from .guard import guard
from .state import STATE, Collector
from .storage import Store, open_store
from .tls import CertReloader, server_context

__all__ = ["make_app", "serve"]

log = logging.getLogger("railscope.collector")

def make_app(settings: CollectorSettings, store: Store | None = None) -> web.Application:
    """The app; raises ``SettingsError`` for a configuration that cannot work (no token source)."""
    col = Collector(settings=settings, store=store or open_store(settings), auth=Authenticator(settings))
    # Only small JSON bodies are read whole; the upload streams and enforces its own cap.
    app = web.Application(client_max_size=64 * 1024, middlewares=[guard])
    app[STATE] = col
    store_clock = getattr(col.store, "clock", None)  # a stand-in store in a test may keep none
    if store_clock is not None:
        col.metrics.store_clock_skew.set_function(store_clock.gauge)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        await col.store.start()
        await col.auth.start()
        yield
        await col.auth.close()
        await col.store.close()

    app.cleanup_ctx.append(resources)
    pages.setup(app)
    capture_requests.setup(app)
    alerts.setup(app)
    cluster_watch.setup(app)
    routes.add_routes(app)
    return app


def handler_args(settings: CollectorSettings) -> dict[str, int | float]:
    """The shared bounds (``proto.connections.runner_args``: request line, header fields, the header
    deadline) and a body buffer of one frame: with aiohttp's 64 KiB the socket stops reading
    whenever the handler awaits its store, and a single upload runs at a fraction of the link."""
    return {**runner_args(settings.header_timeout_s, settings.max_header_bytes), "read_bufsize": 1 << 20}


def _fixed_mmap_threshold() -> None:
    """Keep part buffers in mmap'ed memory, which goes back to the kernel when one is dropped; keep
    everything smaller on the heap, where it is reused.

    glibc raises its mmap threshold after a large block is freed (up to 32 MiB, mallopt(3)); after
    that every 8 MiB part comes from the heap of some thread's arena, where freed parts stay
    resident: the replica's RSS then grows well past parts_in_flight x part_size. A fixed threshold
    stops that. It sits at 4 MiB, below the smallest part (S3's 5 MiB) and above a chunk frame
    (1 MiB of data plus framing): at 1 MiB every received chunk was a fresh mmap, page-faulted in
    and unmapped again, about a third of the collector's CPU per GiB.
    """
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD = 4 MiB, fixed
    except (OSError, AttributeError):
        pass  # not glibc: nothing to fix


async def serve(settings: CollectorSettings, ready: asyncio.Event | None = None) -> int:
    """Serve until SIGTERM / SIGINT. 1 when the address cannot be bound."""
    _fixed_mmap_threshold()
    logsafe.install()
    app = make_app(settings)
    settings.check_transport()
    ssl_ctx = reloader = None
    if settings.tls_cert_file and settings.tls_key_file:
        ssl_ctx = server_context(settings.tls_cert_file, settings.tls_key_file)
        reloader = CertReloader(ssl_ctx, settings.tls_cert_file, settings.tls_key_file)
    runner = web.AppRunner(app, access_log=None, **handler_args(settings))
    await runner.setup()
    conns = ConnectionGuard(settings.peer_conn_cap, total_connections())
    proxy = None
    if settings.proxy_protocol_from:
        proxy = ProxyProtocol(settings.proxy_protocol_from, timeout_s=settings.header_timeout_s, log=log)
        log.info("--proxy-protocol-from %s: connections from there begin with a PROXY protocol header; the cap "
                 "per client address applies to the client it names", ",".join(settings.proxy_protocol_from))
    elif settings.plain_http and settings.max_conns_per_peer:
        log.info("--plain-http: every connection comes from the proxy in front, so no cap per client address "
                 "(--max-conns-per-peer %d is not applied; --proxy-protocol-from names the clients); the "
                 "replica's total stays", settings.max_conns_per_peer)
    limit_accept_errors(asyncio.get_running_loop(), log=log)
    handshakes = ConnectionGuard(settings.max_handshakes_per_peer, settings.max_handshakes)
    # The context is asked for per connection: the reloader swaps in a renewed pair's.
    tls = (lambda: reloader.ctx) if reloader is not None else None
    site = GuardedSite(runner, settings.listen, settings.port, guard=conns, backlog=1024, ssl_context=tls,
                       handshakes=handshakes, handshake_timeout_s=settings.header_timeout_s, proxy=proxy)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        log.error("cannot serve on %s:%s: %s", settings.listen, settings.port, exc.strerror)
        return 1
    log.info("collector serving %s on %s:%s, store %s", "https" if ssl_ctx else "plain http", settings.listen,
             settings.port, app[STATE].store.description)
    if reloader is not None:
        reloader.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    if reloader is not None:
        await reloader.close()
    await runner.cleanup()
    return 0
