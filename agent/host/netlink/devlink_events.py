"""The devlink watcher: one thread that creates AND reads its own generic-netlink socket.

devlink announces its objects (devices, ports, params, eswitch mode, reloads) on the ``config``
multicast group of the ``devlink`` generic-netlink family (``devlink_notify`` and friends in
net/devlink/). The watcher resolves that family and group with CTRL_CMD_GETFAMILY, joins the group
and calls ``on_event`` once per received datagram that holds a devlink message; the agent turns that
into a devlink read, rate-limited by its re-read gap. The message bodies are not decoded: any of
them means the devlink state the agent holds may be stale, and the read itself is the one source
of truth.

Where the kernel has no devlink family (no devlink-capable driver built in or loaded, resolve fails
with ENOENT) the watcher logs one line and ends: the periodic devlink read stays the only one.

Why a plain socket: the same thread must create and read it (a pyroute2 socket made in one thread
and read in another gets no events, pyroute2 #1342), and importing pyroute2 costs about a second.

Kernel references: include/uapi/linux/genetlink.h (CTRL_*), include/uapi/linux/devlink.h
(DEVLINK_GENL_MCGRP_CONFIG_NAME); https://docs.kernel.org/userspace-api/netlink/intro.html
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from agent.host.netlink.codec import iter_messages

__all__ = ["DevlinkWatcher", "FamilyInfo", "build_getfamily", "parse_family"]

log = logging.getLogger("railscope.agent.devlink_watch")

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1

NLMSG_ERROR = 2
NLM_F_REQUEST = 0x01
NLM_F_ACK = 0x04

# include/uapi/linux/genetlink.h
GENL_ID_CTRL = 0x10
CTRL_CMD_NEWFAMILY = 1
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
CTRL_ATTR_MCAST_GROUPS = 7
CTRL_ATTR_MCAST_GRP_NAME = 1
CTRL_ATTR_MCAST_GRP_ID = 2

DEVLINK_FAMILY = "devlink"
DEVLINK_GROUP = "config"

_NLMSGHDR = struct.Struct("=IHHII")
_GENLMSGHDR = struct.Struct("=BBH")
_NLA = struct.Struct("=HH")
_NLA_TYPE_MASK = 0x3FFF
_RCVBUF = 1 << 20
_RECV = 1 << 16


class FamilyInfo(NamedTuple):
    """One generic-netlink family: its id and its multicast groups (name -> group id)."""

    family_id: int
    groups: dict[str, int]


def _nla(kind: int, payload: bytes) -> bytes:
    n = _NLA.size + len(payload)
    return _NLA.pack(n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def _attrs(buf: Any, off: int, end: int) -> list[tuple[int, int, int]]:
    """(type, payload start, payload end) of each attribute; a malformed one ends the walk."""
    out = []
    while off + _NLA.size <= end:
        alen, atype = _NLA.unpack_from(buf, off)
        if alen < _NLA.size or off + alen > end:
            break
        out.append((atype & _NLA_TYPE_MASK, off + _NLA.size, off + alen))
        off += (alen + 3) & ~3
    return out


def build_getfamily(seq: int, name: str) -> bytes:
    """CTRL_CMD_GETFAMILY for one family by name."""
    body = _GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + _nla(CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0")
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def parse_family(buf: bytes, n: int | None = None) -> FamilyInfo:
    """The family id and multicast groups from the kernel's answer to ``build_getfamily``.

    Raises ``OSError`` with the kernel's errno when it answered NLMSG_ERROR (ENOENT: no such family),
    ``ValueError`` when the answer holds no CTRL_CMD_NEWFAMILY with a family id.
    """
    n = len(buf) if n is None else n
    for mtype, _flags, _seq, start, end in iter_messages(buf, n):
        if mtype == NLMSG_ERROR:
            code = struct.unpack_from("=i", buf, start)[0] if end - start >= 4 else -errno.EPROTO
            if code < 0:
                raise OSError(-code, f"generic netlink family lookup: {errno.errorcode.get(-code, -code)}")
            continue
        if mtype != GENL_ID_CTRL or end - start < _GENLMSGHDR.size:
            continue
        if _GENLMSGHDR.unpack_from(buf, start)[0] != CTRL_CMD_NEWFAMILY:
            continue
        family_id: int | None = None
        groups: dict[str, int] = {}
        for atype, s, e in _attrs(buf, start + _GENLMSGHDR.size, end):
            if atype == CTRL_ATTR_FAMILY_ID and e - s >= 2:
                family_id = struct.unpack_from("=H", buf, s)[0]
            elif atype == CTRL_ATTR_MCAST_GROUPS:
                for _idx, gs, ge in _attrs(buf, s, e):
                    name: str | None = None
                    gid: int | None = None
                    for gtype, ts, te in _attrs(buf, gs, ge):
                        if gtype == CTRL_ATTR_MCAST_GRP_NAME:
                            name = bytes(buf[ts:te]).split(b"\0", 1)[0].decode("utf-8", "replace")
                        elif gtype == CTRL_ATTR_MCAST_GRP_ID and te - ts >= 4:
                            gid = struct.unpack_from("=I", buf, ts)[0]
                    if name is not None and gid is not None:
                        groups[name] = gid
        if family_id is not None:
            return FamilyInfo(family_id, groups)
    raise ValueError("generic netlink family lookup: no CTRL_CMD_NEWFAMILY in the answer")


def _open_socket() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_GENERIC)


class DevlinkWatcher:
    """Owns one daemon thread; ``start()`` returns once the socket is subscribed or given up."""

    def __init__(self, on_event: Callable[[], None], *,
                 socket_factory: Callable[[], socket.socket] = _open_socket) -> None:
        self._on_event = on_event
        self._socket_factory = socket_factory
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        #: why the watcher is not (or no longer) listening; None while it listens
        self.error: str | None = None
        self.subscribed = False
        self.events = 0

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread = threading.Thread(target=self._run, name="railscope-devlink-watcher", daemon=True)
        self._thread.start()
        self._ready.wait(timeout_s)

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _subscribe(self, sock: socket.socket) -> int:
        """Joins devlink's config group; returns the devlink family id."""
        sock.settimeout(2.0)
        sock.bind((0, 0))
        sock.send(build_getfamily(1, DEVLINK_FAMILY))
        buf = sock.recv(_RECV)
        info = parse_family(buf)
        group = info.groups.get(DEVLINK_GROUP)
        if group is None:
            raise ValueError(f"devlink family has no {DEVLINK_GROUP!r} multicast group")
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE: root may exceed rmem_max
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
        sock.settimeout(0.5)  # how soon stop() is noticed
        return info.family_id

    def _run(self) -> None:
        try:
            sock = self._socket_factory()
        except OSError as exc:
            self._give_up(f"devlink events: {exc.strerror or exc}")
            return
        try:
            try:
                family = self._subscribe(sock)
            except (OSError, ValueError) as exc:
                if isinstance(exc, OSError) and exc.errno == errno.ENOENT:
                    self._give_up("devlink events: the kernel has no devlink family; devlink is polled")
                else:
                    self._give_up(f"devlink events: {getattr(exc, 'strerror', None) or exc}")
                return
            self.subscribed = True
            self._ready.set()
            self._loop(sock, family)
        finally:
            sock.close()

    def _give_up(self, reason: str) -> None:
        self.error = reason
        log.info("devlink watcher not started", extra={"reason": reason})
        self._ready.set()

    def _loop(self, sock: socket.socket, family: int) -> None:
        buf = bytearray(_RECV)
        while not self._stop.is_set():
            try:
                n = sock.recv_into(buf)
            except (TimeoutError, InterruptedError):
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    # Notifications were lost; the read they ask for is the same.
                    self._notify()
                    continue
                self.error = f"devlink events: {exc.strerror or exc}"
                self.subscribed = False
                log.warning("devlink watcher stopped", extra={"reason": self.error})
                return
            if any(mtype == family for mtype, *_ in iter_messages(buf, n)):
                self._notify()

    def _notify(self) -> None:
        self.events += 1
        try:
            self._on_event()
        except Exception:  # a closed event loop at shutdown must not kill the thread noisily
            log.debug("devlink event callback failed", exc_info=True)
