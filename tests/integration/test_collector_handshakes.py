"""TLS connections are bounded from their TCP accept on, before the handshake: a client that sends
no ClientHello counts against its address's and the replica's caps, its handshake against the
handshake caps, and a handshake not done by the deadline is ended (asyncio's own TLS server holds it
60 s outside every bound). In-process, on loopback."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from proto.connections import ConnectionGuard, GuardedSite
from tests.support.tls_certs import issue, make_ca


def _contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "pki" / "tls.crt", tmp_path / "pki" / "tls.key"
    issue(ca, cert, key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(ca.file))


async def _site(server_ctx: ssl.SSLContext, guard: ConnectionGuard, **kw: object) -> tuple[web.AppRunner, int]:
    app = web.Application()

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=30)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, guard=guard, ssl_context=server_ctx, **kw)  # type: ignore[arg-type]
    await site.start()
    return runner, site.port


async def _idle(port: int, n: int, source: str = "127.0.0.1") -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``n`` TCP connections that never send a byte."""
    return [await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)) for _ in range(n)]


async def _closed(conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], within_s: float) -> int:
    """How many of ``conns`` the server has closed within ``within_s``."""

    async def one(reader: asyncio.StreamReader) -> bool:
        try:
            return await asyncio.wait_for(reader.read(1), within_s) == b""
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    return sum(await asyncio.gather(*(one(r) for r, _w in conns)))


def _close(conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _r, w in conns:
        w.close()


async def _get(port: int, client_ctx: ssl.SSLContext) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/healthz", ssl=client_ctx) as r:
        return r.status


def test_silent_tls_clients_count_against_the_peer_cap_at_accept(tmp_path: Path) -> None:
    server_ctx, client_ctx = _contexts(tmp_path)

    async def main() -> None:
        guard = ConnectionGuard(per_peer=4, total=1000)
        runner, port = await _site(server_ctx, guard)
        try:
            idle = await _idle(port, 10)
            closed = await _closed(idle, 1.5)
            assert closed == 6, f"{closed} of 10 silent TLS connections closed past a per-peer cap of 4"
            assert guard.count == 4 and guard.refused == 6
            _close(idle)
            await asyncio.sleep(0.2)
            assert guard.count == 0
            assert await _get(port, client_ctx) == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_handshake_past_its_deadline_is_ended(tmp_path: Path) -> None:
    server_ctx, client_ctx = _contexts(tmp_path)

    async def main() -> None:
        guard = ConnectionGuard(per_peer=100, total=1000)
        handshakes = ConnectionGuard(per_peer=100, total=1000)
        runner, port = await _site(server_ctx, guard, handshakes=handshakes, handshake_timeout_s=0.5)
        try:
            t0 = time.monotonic()
            idle = await _idle(port, 3)
            await asyncio.sleep(0.1)
            assert handshakes.count == 3 and guard.count == 3
            assert await _closed(idle, 3.0) == 3
            assert time.monotonic() - t0 < 3.0
            await asyncio.sleep(0.1)
            assert handshakes.count == 0 and guard.count == 0
            _close(idle)
            for _ in range(5):  # a finished handshake releases its slot; the connection keeps its own
                assert await _get(port, client_ctx) == 200
            assert handshakes.count == 0
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_handshakes_in_progress_are_capped_per_peer_and_in_all(tmp_path: Path) -> None:
    server_ctx, client_ctx = _contexts(tmp_path)

    async def main() -> None:
        guard = ConnectionGuard(per_peer=100, total=1000)
        handshakes = ConnectionGuard(per_peer=2, total=3)
        runner, port = await _site(server_ctx, guard, handshakes=handshakes, handshake_timeout_s=30)
        try:
            first = await _idle(port, 5)
            assert await _closed(first, 0.5) == 3  # the peer's 2
            second = await _idle(port, 2, source="127.0.0.2")
            assert await _closed(second, 0.5) == 1  # the replica's 3
            assert handshakes.count == 3 and guard.count == 3
            _close(first + second)
            await asyncio.sleep(0.2)
            assert handshakes.count == 0 and guard.count == 0
            assert await _get(port, client_ctx) == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_half_a_renewal_keeps_the_old_pair_serving(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    from collector.tls import CertReloader, server_context
    from tests.support.tls_certs import served_serial

    ca = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "pki" / "tls.crt", tmp_path / "pki" / "tls.key"
    first = issue(ca, cert, key)
    ctx = server_context(str(cert), str(key))
    reloader = CertReloader(ctx, str(cert), str(key))

    async def main() -> list[int]:
        app = web.Application()
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, guard=ConnectionGuard(0, 100), ssl_context=lambda: reloader.ctx)
        await site.start()
        serial = lambda: asyncio.to_thread(served_serial, "127.0.0.1", site.port, ca.file)  # noqa: E731
        try:
            seen = [await serial()]
            # Half a renewal: the new certificate is in place, its key not yet.
            new_cert, new_key = tmp_path / "new.crt", tmp_path / "new.key"
            second = issue(ca, new_cert, new_key)
            new_cert.replace(cert)
            assert reloader.check() is False
            seen.append(await serial())
            # The key follows: the whole new pair is served.
            new_key.replace(key)
            assert reloader.check() is True
            seen.append(await serial())
            seen.append(second)
            return seen
        finally:
            await runner.cleanup()

    with caplog.at_level("WARNING", logger="railscope.collector"):
        seen = asyncio.run(main())
    assert seen[0] == first and seen[1] == first, "half a renewal took the served pair down"
    assert seen[2] == seen[3]
    assert any("previous pair stays in use" in r.getMessage() for r in caplog.records)


def test_stopping_the_site_ends_the_handshakes_in_progress(tmp_path: Path) -> None:
    server_ctx, _client_ctx = _contexts(tmp_path)

    async def main() -> tuple[int, int, int]:
        guard = ConnectionGuard(per_peer=100, total=1000)
        handshakes = ConnectionGuard(per_peer=100, total=1000)
        runner, port = await _site(server_ctx, guard, handshakes=handshakes, handshake_timeout_s=30)
        idle = await _idle(port, 4)
        await asyncio.sleep(0.1)
        during = handshakes.count
        await runner.cleanup()
        closed = await _closed(idle, 1.0)
        _close(idle)
        return during, handshakes.count + guard.count, closed

    assert asyncio.run(main()) == (4, 0, 4)


def test_an_open_tls_connection_holds_a_small_read_buffer(tmp_path: Path) -> None:
    # asyncio gives each TLS connection a 256 KiB read buffer: 1,000 agents' long polls held 256 MiB
    # of a replica limited to 512 Mi (the soak with --tls ran out of memory). The server runs in a
    # thread of its own; the clients are blocking sockets (OpenSSL's memory, which tracemalloc does
    # not count), so what is traced is the server's.
    import socket
    import threading
    import tracemalloc

    server_ctx, client_ctx = _contexts(tmp_path)
    loop = asyncio.new_event_loop()
    started: dict[str, object] = {}
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        runner, port = loop.run_until_complete(_site(server_ctx, ConnectionGuard(per_peer=0, total=1000),
                                                     handshakes=ConnectionGuard(0, 1000)))
        started.update(runner=runner, port=port)
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(10)
    n, socks = 100, []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            raw = socket.create_connection(("127.0.0.1", started["port"]), timeout=10)  # type: ignore[arg-type]
            socks.append(client_ctx.wrap_socket(raw, server_hostname="127.0.0.1"))  # the handshake, done
        time.sleep(0.5)
        per_conn = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
        for s in socks:
            s.close()
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
    assert per_conn < 128 * 1024, f"{per_conn / 1024:.0f} KiB traced per open TLS connection"
