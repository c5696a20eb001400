"""The rtnetlink link-event listener: one thread that creates AND reads its own socket.

It subscribes to ``RTMGRP_LINK`` and turns every RTM_NEWLINK / RTM_DELLINK into a small
``LinkNote`` put into a sink keyed by ifindex (the daemon's bounded, coalescing queue, which its event
loop drains into the detectors). Carrier losses are cumulative counters in each message
(``IFLA_CARRIER_DOWN_COUNT``), so coalescing several messages of one link into the newest loses no
flap.

Why a plain ``AF_NETLINK`` socket and not pyroute2's ``IPRoute.bind()``: the socket must be created
and read in the same thread (a pyroute2 socket made in one thread and read in another gets no
events, pyroute2 #1342), and pyroute2 decodes every attribute of every message in pure Python,
which under a storm of thousands of representor creations costs far more than the few attributes
the detectors need. The decoding is the link dump's own codec (``codec.parse_link``, the
``links.json`` schema).

When the kernel drops notifications because the socket buffer overflowed (``ENOBUFS``), the
watcher counts an overrun and calls ``on_overrun`` so the agent resamples the links in full.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from agent.host.netlink.codec import (
    IFF_UP,
    NETLINK_ROUTE,
    RTM_DELLINK,
    RTM_NEWLINK,
    RTMGRP_LINK,
    ifinfo_flags,
    iter_messages,
    parse_link,
)
from agent.host.netlink.listener import ListenerThread

__all__ = ["LinkNote", "LinkWatcher", "NoteSink"]

log = logging.getLogger("railscope.agent.watcher")

#: 4 MiB: a few thousand link messages (about 1-1.5 KiB each with IFLA_STATS64) fit before overrun.
_RCVBUF = 4 << 20
_RECV = 1 << 16


@dataclass(frozen=True, slots=True)
class LinkNote:
    """What one link message said, in the ``links.json`` vocabulary."""

    ts: float  # unix seconds, when the watcher read it
    ifindex: int
    ifname: str | None
    deleted: bool
    #: IFF_UP: an administratively downed link losing carrier is not a flap
    admin_up: bool | None = None
    operstate: str | None = None
    carrier: int | None = None
    carrier_down_count: int | None = None
    #: the other carrier counters of the message, so that the daemon's record of a known link follows
    #: it with no read of its own (``IFLA_CARRIER_CHANGES`` / ``IFLA_CARRIER_UP_COUNT``)
    carrier_changes: int | None = None
    carrier_up_count: int | None = None
    phys_port_name: str | None = None
    phys_switch_id: str | None = None
    parent_dev: str | None = None


class NoteSink(Protocol):
    def put(self, key: Hashable, item: LinkNote) -> bool:
        """Queue ``item``; True when the reader must be woken."""


class LinkWatcher(ListenerThread):
    """Owns one daemon thread; ``start()`` returns once the socket is subscribed."""

    thread_name = "railscope-link-watcher"

    def __init__(self, queue: NoteSink, wake: Callable[[], None],
                 on_overrun: Callable[[], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.queue = queue
        self._wake = wake
        self._on_overrun = on_overrun
        self._clock = clock
        self.messages = 0
        self.overruns = 0

    def _open(self) -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE: root may exceed rmem_max
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.bind((0, RTMGRP_LINK))
        sock.settimeout(0.5)  # how soon stop() is noticed
        return sock

    def _run(self) -> None:
        try:
            sock = self._open()
        except OSError as exc:
            self.error = f"netlink link events: {exc.strerror or exc}"
            log.warning("link watcher not started", extra={"reason": self.error})
            self._ready.set()
            return
        self._ready.set()
        buf = bytearray(_RECV)
        try:
            while not self._stop.is_set():
                try:
                    n = sock.recv_into(buf)
                except TimeoutError:
                    continue
                except InterruptedError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.ENOBUFS:
                        self.overruns += 1
                        if self._on_overrun is not None:
                            self._on_overrun()
                        continue
                    self.error = f"netlink link events: {exc.strerror or exc}"
                    log.warning("link watcher stopped", extra={"reason": self.error})
                    return
                self._feed(buf, n)
        finally:
            sock.close()

    def _feed(self, buf: bytearray, n: int) -> None:
        now = self._clock()
        wake = False
        for mtype, _flags, _seq, start, end in iter_messages(buf, n):
            if mtype != RTM_NEWLINK and mtype != RTM_DELLINK:
                continue
            link = parse_link(buf, start, end)
            if link is None:
                continue
            self.messages += 1
            flags = ifinfo_flags(buf, start)
            note = LinkNote(
                ts=now, ifindex=link["ifindex"], ifname=link["ifname"], deleted=mtype == RTM_DELLINK,
                admin_up=bool(flags & IFF_UP),
                operstate=link["operstate"], carrier=link["carrier"],
                carrier_down_count=link["carrier_down_count"], carrier_changes=link["carrier_changes"],
                carrier_up_count=link["carrier_up_count"], phys_port_name=link["phys_port_name"],
                phys_switch_id=link["phys_switch_id"], parent_dev=link["parent_dev"],
            )
            wake = self.queue.put(note.ifindex, note) or wake
        if wake:
            self._wake()
