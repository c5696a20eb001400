"""The passive LLDP listener (``--lldp listen``): the last LLDP frame seen on each rail, with its time.

One ``AF_PACKET`` socket per rail netdev, bound to that netdev and to ethertype 0x88cc (IEEE 802.1AB),
joined to the nearest-bridge group 01:80:c2:00:00:0e alone (``PACKET_ADD_MEMBERSHIP`` with
``PACKET_MR_MULTICAST``: never ``PACKET_MR_PROMISC``, never ``IFF_PROMISC``). Nothing is ever sent on
these sockets: the agent stays invisible to the switch. Frames the node itself transmits (an lldpd of its
own) are ignored (``PACKET_OUTGOING``).

Bounded whatever the wire does: one frame per rail is kept, cut to ``MAX_FRAME`` bytes; each socket's
receive buffer is small, so a flood is dropped by the kernel; a socket is drained at most once per
``HOLD_S`` (the last of at most ``DRAIN`` queued frames is kept), so a flood costs the agent a few reads a
second, not one per frame. The frame is untrusted: ``agent.readers.lldp`` decodes it with every length
checked.

The listener is one per process (the network namespace the agent runs in), started by the first live
read of the ``lldp`` source that asks for it; the readers see only ``frames()``.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass

__all__ = ["DRAIN", "ETH_P_LLDP", "HOLD_S", "IDLE_S", "LLDP_GROUP", "MAX_FRAME", "Frame", "Listener", "listener"]

ETH_P_LLDP = 0x88CC
#: the nearest-bridge group address LLDP is sent to (IEEE 802.1AB-2016 §7.1): a bridge never forwards it,
#: so what arrives on a rail comes from the switch port it is cabled to
LLDP_GROUP = bytes.fromhex("0180c200000e")
# linux/if_packet.h
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_MULTICAST = 0
PACKET_OUTGOING = 4
#: an LLDPDU fits one untagged 1500-byte frame in practice; what is longer is cut (the decoder says so)
MAX_FRAME = 4096
#: at most this many queued frames read per socket per drain; the last one is kept
DRAIN = 32
#: a socket is read at most once per this many seconds (LLDP's fastest transmit interval is 1 s)
HOLD_S = 0.5
#: the kernel's receive buffer per socket: a flood beyond it is dropped before it reaches the agent
RCVBUF = 64 << 10
#: at most this many rails are listened on
MAX_RAILS = 64
#: with nothing held, the thread sleeps in select() this long at most: a frame, watch() or close()
#: wakes it (the wake pipe), so an idle listener costs no periodic wake-up a second
IDLE_S = 30.0


@dataclass(frozen=True, slots=True)
class Frame:
    """The last LLDP frame of a rail: the time it arrived (unix seconds) and its bytes (cut to MAX_FRAME)."""

    ts: float
    data: bytes
    #: frames received on the rail since it was watched
    count: int = 1


class Listener:
    """The per-process listener: ``watch(netdevs)`` opens what is new, closes what is gone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: dict[str, socket.socket] = {}
        self._next: dict[str, float] = {}
        self._frames: dict[str, Frame] = {}
        self._since: dict[str, float] = {}
        self._errors: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # watch() and close() wake the thread out of select() through this pipe
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # -- what the reader asks ----------------------------------------------------------------
    def watch(self, netdevs: list[str] | tuple[str, ...]) -> None:
        """Listen on exactly these netdevs (at most MAX_RAILS): open sockets for new ones (and for one whose
        socket failed), close those of netdevs no longer named."""
        want = list(dict.fromkeys(netdevs))[:MAX_RAILS]
        with self._lock:
            for name in [n for n in self._socks if n not in want]:
                self._close(name)
                self._since.pop(name, None)
                self._frames.pop(name, None)
            for name in want:
                if name in self._socks:
                    continue
                try:
                    self._socks[name] = _open(name)
                    self._next[name] = 0.0
                    self._errors.pop(name, None)
                    self._since.setdefault(name, time.time())
                except OSError as exc:
                    self._errors[name] = _why(exc)
            for name in [n for n in self._errors if n not in want]:
                del self._errors[name]
            if self._socks and (self._thread is None or not self._thread.is_alive()):
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="railscope-lldp", daemon=True)
                self._thread.start()
        self._poke()

    def frames(self) -> dict[str, Frame]:
        with self._lock:
            return dict(self._frames)

    def since(self) -> dict[str, float]:
        """netdev -> when the listener started listening on it (unix seconds)."""
        with self._lock:
            return dict(self._since)

    def errors(self) -> dict[str, str]:
        """netdev -> why it cannot be listened on (no CAP_NET_RAW, no such device)."""
        with self._lock:
            return dict(self._errors)

    def close(self) -> None:
        self._stop.set()
        self._poke()
        with self._lock:
            for name in list(self._socks):
                self._close(name)
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except (BlockingIOError, OSError):
            pass  # a full pipe wakes the thread as well

    # -- the thread --------------------------------------------------------------------------
    def _close(self, name: str) -> None:
        sock = self._socks.pop(name, None)
        self._next.pop(name, None)
        if sock is not None:
            sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                ready = {s.fileno(): n for n, s in self._socks.items() if self._next.get(n, 0.0) <= now}
                wait = min((self._next[n] - now for n in self._socks if self._next.get(n, 0.0) > now),
                           default=IDLE_S)
                if not self._socks:
                    return
            try:
                got, _, _ = select.select([self._wake_r, *ready], [], [], max(0.01, min(wait, IDLE_S)))
            except (OSError, ValueError):
                time.sleep(0.1)  # a socket closed under us by watch(): the next round rebuilds the set
                continue
            for fd in got:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 512)
                    except BlockingIOError:
                        pass
                    continue
                self._drain(ready[fd])

    def _drain(self, name: str) -> None:
        with self._lock:
            sock = self._socks.get(name)
        if sock is None:
            return
        last: bytes | None = None
        n = 0
        for _ in range(DRAIN):
            try:
                data, addr = sock.recvfrom(MAX_FRAME + 1, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError as exc:
                # the netdev went away (ENETDOWN / ENXIO): the next watch() opens it again
                with self._lock:
                    self._errors[name] = _why(exc)
                    self._close(name)
                return
            if len(addr) > 2 and addr[2] == PACKET_OUTGOING:
                continue
            last, n = data[:MAX_FRAME], n + 1
        with self._lock:
            if last is not None and name in self._socks:
                prev = self._frames.get(name)
                self._frames[name] = Frame(time.time(), last, (prev.count if prev else 0) + n)
            if name in self._next:
                self._next[name] = time.monotonic() + HOLD_S


def _open(name: str) -> socket.socket:
    ifindex = socket.if_nametoindex(name)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_LLDP))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((name, ETH_P_LLDP))
        # struct packet_mreq {int mr_ifindex; unsigned short mr_type, mr_alen; unsigned char mr_address[8];}
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_MULTICAST, len(LLDP_GROUP), LLDP_GROUP)
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _why(exc: OSError) -> str:
    if exc.errno in (errno.EPERM, errno.EACCES):
        return "an AF_PACKET socket needs CAP_NET_RAW"
    if exc.errno in (errno.ENODEV, errno.ENXIO, errno.ENETDOWN) or exc.errno is None:
        return f"no such netdev ({exc.strerror or exc})"
    return exc.strerror or os.strerror(exc.errno or 0) or str(exc)


_LISTENER: Listener | None = None
_LISTENER_LOCK = threading.Lock()


def listener() -> Listener:
    """The process's listener (started on first use)."""
    global _LISTENER
    with _LISTENER_LOCK:
        if _LISTENER is None:
            _LISTENER = Listener()
        return _LISTENER
