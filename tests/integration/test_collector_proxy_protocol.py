"""Behind a proxy that speaks the PROXY protocol, the cap per peer is the client's: connections from a
trusted proxy address must begin with a v1 or v2 header, the client it names is the peer for the cap
and for the handler (``request.remote``), a connection without a valid header is refused (400, then
closed), and the replica's total stays. In-process, on loopback sockets sending real headers."""

from __future__ import annotations

import asyncio
import socket
import struct

from aiohttp import web

from proto.connections import ConnectionGuard, GuardedSite, ProxyProtocol

PROXY = "127.0.0.1"  # the trusted proxy's address (a sidecar on the pod's loopback)


def v1(client: str, port: int = 40000) -> bytes:
    return f"PROXY TCP4 {client} 127.0.0.1 {port} 9842\r\n".encode()


def v2(client: str, port: int = 40000) -> bytes:
    block = socket.inet_aton(client) + socket.inet_aton("127.0.0.1") + struct.pack("!HH", port, 9842)
    return b"\r\n\r\n\x00\r\nQUIT\n\x21\x11" + struct.pack("!H", len(block)) + block


async def _site(guard: ConnectionGuard, proxy: ProxyProtocol) -> tuple[web.AppRunner, int]:
    app = web.Application()

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text=request.remote or "?")

    app.router.add_get("/whoami", whoami)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=30)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, guard=guard, proxy=proxy)
    await site.start()
    return runner, site.port


async def _open(port: int, head: bytes, source: str = PROXY) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(head)
    await writer.drain()
    return reader, writer


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """One GET /whoami on an open connection; the answer's bytes (b"" when closed)."""
    writer.write(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    except (ConnectionError, asyncio.IncompleteReadError):
        return b""
    length = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
    return head + await reader.readexactly(length)


async def _closed(reader: asyncio.StreamReader, within_s: float = 2.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), within_s) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_the_cap_per_peer_is_the_named_clients_and_the_handler_sees_it() -> None:
    async def main() -> None:
        guard = ConnectionGuard(per_peer=2, total=100)
        runner, port = await _site(guard, ProxyProtocol([PROXY]))
        try:
            # Ten clients behind the one proxy, two connections each, v1 and v2: all served.
            conns = []
            for i in range(10):
                head = v1 if i % 2 else v2
                conns += [await _open(port, head(f"10.1.0.{i + 1}", 40000 + k)) for k in range(2)]
            answers = await asyncio.gather(*(_ask(r, w) for r, w in conns))
            assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers[:3]
            assert [a.rsplit(b"\r\n\r\n", 1)[1].decode() for a in answers[::2]] == [f"10.1.0.{i + 1}" for i in range(10)]
            assert guard.open == {f"10.1.0.{i + 1}": 2 for i in range(10)}
            # A third connection of one client is past its cap: closed at once, the others are not.
            r, w = await _open(port, v1("10.1.0.3", 41000))
            assert await _closed(r)
            w.close()
            assert (await _ask(*conns[4])).startswith(b"HTTP/1.1 200")
            for _r, w in conns:
                w.close()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_missing_or_malformed_header_from_the_proxy_is_refused() -> None:
    async def main() -> None:
        proxy = ProxyProtocol([PROXY], timeout_s=0.5)
        guard = ConnectionGuard(per_peer=2, total=100)
        runner, port = await _site(guard, proxy)
        try:
            for head in (b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n",             # no header: a client guessing
                         b"PROXY TCP4 10.1.0.1 127.0.0.1 040000 9842\r\n",        # heading zero
                         b"\r\n\r\n\x00\r\nQUIT\n\x21\x12\x00\x0c" + bytes(12)):  # UDP
                reader, writer = await _open(port, head)
                answer = await asyncio.wait_for(reader.read(), 5)
                writer.close()
                assert answer.startswith(b"HTTP/1.1 400 ") and b"PROXY protocol header refused" in answer, answer
            # No byte at all: closed at the header deadline, with the same answer.
            reader, writer = await _open(port, b"")
            t0 = asyncio.get_running_loop().time()
            answer = await asyncio.wait_for(reader.read(), 5)
            assert b"no PROXY protocol header in time" in answer and asyncio.get_running_loop().time() - t0 < 2
            writer.close()
            await asyncio.sleep(0.1)
            assert proxy.refused == 4 and guard.count == 0
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_an_untrusted_address_is_its_own_peer_and_cannot_name_another() -> None:
    async def main() -> None:
        guard = ConnectionGuard(per_peer=2, total=100)
        runner, port = await _site(guard, ProxyProtocol([PROXY]))
        try:
            # Not a trusted proxy: served directly, capped by its own address; a PROXY line from it
            # is no header but a bad request line (never a spoofed address).
            direct = [await _open(port, b"", source="127.0.0.2") for _ in range(2)]
            assert [(await _ask(r, w)).endswith(b"127.0.0.2") for r, w in direct] == [True, True]
            r, w = await _open(port, b"", source="127.0.0.2")
            assert await _closed(r)
            w.close()
            for _r, w in direct:
                w.close()
            await asyncio.sleep(0.1)
            r, w = await _open(port, v1("10.9.9.9") + b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n", source="127.0.0.2")
            answer = await asyncio.wait_for(r.read(), 5)
            assert answer.split(b" ")[1] == b"400" and b"10.9.9.9" not in answer.split(b"\r\n\r\n")[0]
            w.close()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_the_total_is_kept_for_the_proxys_connections() -> None:
    async def main() -> None:
        guard = ConnectionGuard(per_peer=2, total=6)
        runner, port = await _site(guard, ProxyProtocol([PROXY]))
        try:
            # Six connections waiting for their header hold the replica's six; a seventh is closed.
            held = [await _open(port, b"") for _ in range(6)]
            await asyncio.sleep(0.1)
            r, w = await _open(port, v1("10.1.0.1"))
            assert await _closed(r) and guard.count == 6
            w.close()
            for _r, w in held:
                w.close()
        finally:
            await runner.cleanup()

    asyncio.run(main())
