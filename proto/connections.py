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

Behind a proxy that speaks the PROXY protocol (HAProxy's, v1 text or v2 binary:
https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt), a connection from one of the
configured proxy addresses (``ProxyProtocol``) must begin with its header; the address the header
names is then the connection's peer, for the cap per peer and for the handler
(``request.remote``). A header missing, malformed or longer than a proxy ever sends is refused
(400, then closed), as the specification asks: never guessed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from yarl import URL

__all__ = ["ConnectionGuard", "GuardedSite", "ProxyHeaderError", "ProxyProtocol", "limit_accept_errors",
           "parse_proxy_header", "runner_args", "total_connections"]

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

    def admit(self, peer: str, capped: bool = True) -> bool:
        """Count one more connection of ``peer``; False past a cap. ``capped=False``: the total only
        (a proxy's connection before its header names the client)."""
        if self.count >= self.total or (capped and self.per_peer and self.open.get(peer, 0) >= self.per_peer):
            self.refused += 1
            return False
        self.open[peer] = self.open.get(peer, 0) + 1
        self.count += 1
        return True

    def move(self, old: str, new: str) -> bool:
        """One connection of ``old`` is ``new``'s from now on (the client a PROXY header names),
        within ``new``'s cap; False (and still ``old``'s) past it."""
        if old == new:
            return True
        if self.per_peer and self.open.get(new, 0) >= self.per_peer:
            self.refused += 1
            return False
        self.release(old)
        self.open[new] = self.open.get(new, 0) + 1
        self.count += 1
        return True

    def release(self, peer: str) -> None:
        n = self.open.get(peer, 0) - 1
        if n > 0:
            self.open[peer] = n
        else:
            self.open.pop(peer, None)
        self.count -= 1


#: The read buffer asyncio's TLS layer gives each connection (``asyncio.sslproto.SSLProtocol.max_size``,
#: 256 KiB in CPython 3.11, allocated with the protocol, before the handshake) and the size of each
#: decrypting read. A TLS record holds at most 16 KiB (RFC 8446 §5.1), so 64 KiB loses nothing,
#: and 1,000 agents' long polls over TLS hold 64 MiB of buffers instead of 256 MiB: with the rest
#: of the replica they went past the chart's 512 Mi limit (bench/soak_collector.py --tls).
TLS_READ_BUFFER = 64 * 1024


def _small_tls_buffers() -> None:
    """Set the TLS read buffer for the whole process (asyncio offers no per-connection setting; the
    collector's and the agent's other TLS, clients of an API server, read small answers)."""
    from asyncio import sslproto

    if sslproto.SSLProtocol.max_size > TLS_READ_BUFFER:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


#: PROXY protocol v2's signature (proxy-protocol.txt §2.2), and v1's start
_V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"
_V1_START = b"PROXY "
#: v1: a header is at most 107 bytes, CRLF included (§2.1)
_V1_MAX = 107
#: v2: the address block and TLVs a proxy sends are small (addresses, an ALPN, a VPC endpoint id);
#: the 16-bit length allows 64 KiB, which nothing here needs to buffer for a client it cannot name
_V2_MAX_PAYLOAD = 2048
#: v2 address lengths by family (§2.2: AF_INET 12, AF_INET6 36, AF_UNIX 216)
_V2_ADDR_LEN = {0x1: 12, 0x2: 36, 0x3: 216}


class ProxyHeaderError(ValueError):
    """A PROXY protocol header that is not one: the connection is refused."""


def _v1_port(text: bytes) -> int:
    # decimal, 0..65535, no sign and no leading zero (§2.1: "a number ... in decimal")
    if not text.isdigit() or len(text) > 5 or (len(text) > 1 and text[0:1] == b"0") or int(text) > 65535:
        raise ProxyHeaderError(f"bad port {text[:8]!r}")
    return int(text)


def _parse_v1(line: bytes) -> tuple[str, int] | None:
    fields = line.split(b" ")
    if fields[0] != b"PROXY" or len(fields) < 2:
        raise ProxyHeaderError("v1 header does not start with 'PROXY '")
    proto = fields[1]
    if proto == b"UNKNOWN":
        return None  # §2.1: the rest up to CRLF is ignored; the connection's own endpoints stand
    if proto not in (b"TCP4", b"TCP6") or len(fields) != 6:
        raise ProxyHeaderError("v1 header: expected 'PROXY TCP4|TCP6 <src> <dst> <sport> <dport>'")
    kind = ipaddress.IPv4Address if proto == b"TCP4" else ipaddress.IPv6Address
    try:
        src = kind(fields[2].decode("ascii"))
        kind(fields[3].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ProxyHeaderError(f"v1 header: not {proto.decode()} addresses") from None
    sport = _v1_port(fields[4])
    _v1_port(fields[5])
    return str(src), sport


def _check_tlvs(data: bytes) -> None:
    # §2.2.7: type (1 byte), length (2 bytes), value; they must tile the rest of the header exactly
    i = 0
    while i < len(data):
        if len(data) - i < 3:
            raise ProxyHeaderError("v2 header: a truncated TLV")
        (n,) = struct.unpack_from("!H", data, i + 1)
        i += 3 + n
        if i > len(data):
            raise ProxyHeaderError("v2 header: a TLV longer than the header")


def _parse_v2(head: bytes, payload: bytes) -> tuple[str, int] | None:
    ver_cmd, fam = head[12], head[13]
    if ver_cmd >> 4 != 2:
        raise ProxyHeaderError(f"v2 header: version {ver_cmd >> 4}")
    cmd = ver_cmd & 0xF
    if cmd not in (0x0, 0x1):
        raise ProxyHeaderError(f"v2 header: command {cmd}")
    if cmd == 0x0:
        # LOCAL: the proxy's own connection (a health check); its endpoints stand, and the block,
        # family included, is skipped whole (§2.2; AWS NLB's health checks carry dummy IPv4
        # addresses here: pires/go-proxyproto#12)
        return None
    af, proto = fam >> 4, fam & 0xF
    if af not in (0x0, 0x1, 0x2, 0x3) or proto not in (0x0, 0x1, 0x2):
        raise ProxyHeaderError(f"v2 header: family/protocol 0x{fam:02x}")
    need = _V2_ADDR_LEN.get(af, 0)
    if len(payload) < need:
        raise ProxyHeaderError("v2 header: shorter than its address block")
    if af != 0x0:
        _check_tlvs(payload[need:])
    if af == 0x0:
        return None  # PROXY over an unspecified family: the connection's endpoints stand (§2.2)
    if proto != 0x1:
        raise ProxyHeaderError("v2 header: not a stream connection")
    if af == 0x1:
        return str(ipaddress.IPv4Address(payload[0:4])), struct.unpack_from("!H", payload, 8)[0]
    if af == 0x2:
        return str(ipaddress.IPv6Address(payload[0:16])), struct.unpack_from("!H", payload, 32)[0]
    return None  # AF_UNIX: no address to cap by; the proxy's stands


def parse_proxy_header(buf: bytes) -> tuple[int, tuple[str, int] | None] | None:
    """The PROXY protocol header (v1 or v2) at the start of ``buf``: ``(length, source)``, source the
    client's ``(address, port)`` or None where the header names none (v1 UNKNOWN, v2 LOCAL or an
    unspecified family: the connection's own endpoints stand). None while ``buf`` may still become
    a header; :class:`ProxyHeaderError` as soon as it cannot (or would be longer than a proxy sends)."""
    if buf[:1] == b"\r":
        if _V2_SIG[:len(buf)] != buf[:len(_V2_SIG)]:
            raise ProxyHeaderError("not a PROXY protocol header")
        if len(buf) < 16:
            return None
        (n,) = struct.unpack_from("!H", buf, 14)
        if n > _V2_MAX_PAYLOAD:
            raise ProxyHeaderError(f"v2 header of {n} bytes (at most {_V2_MAX_PAYLOAD} here)")
        if len(buf) < 16 + n:
            return None
        return 16 + n, _parse_v2(buf[:16], buf[16:16 + n])
    if _V1_START[:len(buf)] != buf[:len(_V1_START)]:
        raise ProxyHeaderError("not a PROXY protocol header")
    end = buf.find(b"\r\n", 0, _V1_MAX)
    if end < 0:
        if len(buf) >= _V1_MAX or b"\n" in buf[:_V1_MAX]:
            raise ProxyHeaderError(f"v1 header without its CRLF within {_V1_MAX} bytes")
        return None
    return end + 2, _parse_v1(buf[:end])


class ProxyProtocol:
    """The proxies trusted to name their clients (addresses or networks): a connection from one
    must begin with a PROXY protocol header, within ``timeout_s``. Refusals are logged once per
    ``log_every_s`` with the count since."""

    def __init__(self, trusted: Iterable[str], timeout_s: float = 10.0, log: logging.Logger | None = None,
                 log_every_s: float = 10.0) -> None:
        self.networks = tuple(ipaddress.ip_network(t.strip(), strict=False) for t in trusted if t.strip())
        self.timeout_s = timeout_s
        self.refused = 0
        self._log = log or logging.getLogger("railscope")
        self._every, self._last, self._quiet = log_every_s, float("-inf"), 0

    def trusts(self, host: str) -> bool:
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.networks)

    def refuse(self, proxy: str, why: str) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._last < self._every:
            self._quiet += 1
            return
        self._log.warning("refused a connection from proxy %s: %s (%d more refused since the last report)",
                          proxy, why, self._quiet)
        self._last, self._quiet = now, 0


class _NamedTransport(asyncio.Transport):
    """A transport whose ``peername`` is the client a PROXY header named; all else is the socket's."""

    def __init__(self, inner: asyncio.Transport, peername: tuple[str, int]) -> None:
        super().__init__()
        self._inner, self._peername = inner, peername

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peername
        return self._inner.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:  # write, close, pause_reading, ... of the socket's
        return getattr(self._inner, name)

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        self._inner.abort()

    def write(self, data: Any) -> None:
        self._inner.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._inner.writelines(list_of_data)

    def write_eof(self) -> None:
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()


_PROXY_REFUSAL = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n%s")


class _Guarded(asyncio.Protocol):
    """The request handler behind a gate, counted from the TCP accept on.

    With TLS, the handshake runs here (``loop.start_tls``) rather than in the listening server:
    asyncio's own TLS server calls the protocol only once the handshake is done, so a client that
    sends no ClientHello would be held for asyncio's 60 s handshake timeout outside every bound.
    Here a connection counts against the peer's and the replica's caps the moment it is accepted,
    its handshake counts against the handshake caps until it ends, and a handshake not done within
    ``handshake_timeout_s`` is aborted.
    """

    def __init__(self, guard: ConnectionGuard, inner: Any, tls: _Tls | None = None,
                 proxy: ProxyProtocol | None = None) -> None:
        self._guard, self._inner, self._tls, self._proxy = guard, inner, tls, proxy
        self._peer: str | None = None
        #: a trusted proxy's connection before its PROXY header: what has arrived, and the deadline
        self._header: bytearray | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._connected = False  # the inner handler has had connection_made
        self._lost = False
        self._early: list[bytes | None] = []  # what arrived between the handshake and the handler
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._lost or self._connected or self._peer is not None:
            return  # start_tls hands this protocol to the TLS layer: only the TCP accept counts
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        from_proxy = self._proxy is not None and self._proxy.trusts(host)
        # A proxy's connection counts against the total at once, against a peer's cap only once its
        # header names the client (the proxy carries the whole fleet).
        if not self._guard.admit(host, capped=not from_proxy):
            self._inner = None
            transport.abort()  # type: ignore[attr-defined]
            return
        self._peer = host
        if from_proxy:
            assert self._proxy is not None
            self._transport = transport  # type: ignore[assignment]
            self._header = bytearray()
            self._header_timer = asyncio.get_running_loop().call_later(
                self._proxy.timeout_s, self._refuse_proxy, "no PROXY protocol header in time")
            return
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

    def _proxy_data(self, data: bytes) -> None:
        assert self._header is not None and self._proxy is not None and self._transport is not None
        self._header += data
        try:
            parsed = parse_proxy_header(bytes(self._header))
        except ProxyHeaderError as exc:
            self._refuse_proxy(str(exc))
            return
        if parsed is None:
            return  # not whole yet (parse_proxy_header bounds how long it may grow)
        length, source = parsed
        rest, self._header = bytes(self._header[length:]), None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        proxy, transport = self._peer or "?", self._transport
        if source is not None:
            if not self._guard.move(proxy, source[0]):
                # past the client's cap: as a direct connection past it, closed at once
                self._inner = None
                transport.abort()
                return
            self._peer = source[0]
            transport = _NamedTransport(transport, source)
        self._connect(transport)
        if rest and self._inner is not None:
            self._inner.data_received(rest)

    def _refuse_proxy(self, why: str) -> None:
        """A trusted proxy's connection without a valid header: 400 (a person testing through the proxy
        reads why), then closed; never served as if the proxy were the client."""
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer, self._header = None, None
        if self._proxy is not None:
            self._proxy.refuse(self._peer or "?", why)
        self._inner = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            body = f"PROXY protocol header refused: {why}\n".encode()
            transport.write(_PROXY_REFUSAL % (len(body), body))
            transport.close()

    def _release(self) -> None:
        if self._peer is not None:
            self._guard.release(self._peer)
            self._peer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._release()
        if self._inner is not None and self._connected:
            self._inner.connection_lost(exc)
        self._inner = None

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._header is not None:
            self._proxy_data(data)
            return
        if self._connected:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._inner is None:
            return None
        if self._header is not None:
            self._refuse_proxy("the connection ended before its PROXY protocol header")
            return True
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
    ends one that takes longer. ``proxy``: the proxies whose connections begin with a PROXY protocol
    header naming their client (plain HTTP only).
    """

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard,
                 ssl_context: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
                 handshakes: ConnectionGuard | None = None, handshake_timeout_s: float = 10.0,
                 proxy: ProxyProtocol | None = None, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        if proxy is not None and ssl_context is not None:
            # The header precedes the ClientHello, which asyncio's TLS layer must read from the
            # socket itself: PROXY protocol is for a proxy that ends TLS (plain HTTP behind it).
            raise ValueError("the PROXY protocol is served over plain HTTP only")
        self.guard = guard
        self.proxy = proxy
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
            _small_tls_buffers()
            tls = _Tls(self._tls_context, self.handshakes, self.handshake_timeout_s)

        proxy = self.proxy

        def factory() -> asyncio.Protocol:
            return _Guarded(guard, server(), tls, proxy)

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
