"""The devlink event listener: one thread that creates AND reads its own generic-netlink socket.

devlink announces its objects (devices, ports, params, eswitch mode, health reporters, reloads) on
the ``config`` multicast group of the ``devlink`` generic-netlink family (``devlink_notify`` and
friends in net/devlink/). The listener uses pyroute2's generic netlink: ``bind`` resolves the family
and its groups (CTRL_CMD_GETFAMILY), the socket joins ``config``, and pyroute2 decodes what arrives;
``on_event`` is called once per batch holding a devlink message, and the daemon turns that into a
devlink read, rate-limited by its re-read gap. The bodies are not looked into: any of them means
the devlink state the agent holds may be stale, and the read itself is the one source of truth.

pyroute2 here, unlike the link dump and the link-event listener (``codec.py``): its import (about a
second on a small node) is paid once, in this thread, and devlink messages are rare, so decoding
them in pure Python costs nothing that matters. The socket is made and read in this thread only (a
pyroute2 socket made in one thread and read in another gets no events, pyroute2 #1342).

Where the kernel has no devlink family (no devlink-capable driver built in or loaded, resolve fails
with ENOENT) the listener logs one line and ends: the periodic devlink read stays the only one.

Kernel references: include/uapi/linux/genetlink.h, include/uapi/linux/devlink.h
(DEVLINK_GENL_MCGRP_CONFIG_NAME); https://docs.kernel.org/userspace-api/netlink/intro.html
"""

from __future__ import annotations

import errno
import logging
import select
from collections.abc import Callable
from typing import Any, Protocol

from agent.host.netlink.listener import ListenerThread

__all__ = ["DEVLINK_FAMILY", "DEVLINK_GROUP", "DevlinkWatcher", "GenlSocket"]

log = logging.getLogger("railscope.agent.devlink_watch")

DEVLINK_FAMILY = "devlink"
DEVLINK_GROUP = "config"


class GenlSocket(Protocol):
    """What the listener uses of pyroute2's ``GenericNetlinkSocket``."""

    prid: int
    mcast_groups: dict[str, int]

    def bind(self, proto: str, msg_class: Any) -> Any: ...
    def add_membership(self, group: str) -> Any: ...
    def fileno(self) -> int: ...
    def get(self) -> list[Any]: ...
    def close(self) -> Any: ...


def _open_socket() -> GenlSocket:
    from pyroute2.netlink.generic import GenericNetlinkSocket

    return GenericNetlinkSocket()


def _msg_class() -> Any:
    from pyroute2.netlink.devlink import devlinkcmd

    return devlinkcmd


def _errno_of(exc: BaseException) -> int | None:
    # pyroute2's NetlinkError carries the kernel's errno as ``code``; an OSError as ``errno``.
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else getattr(exc, "errno", None)


class DevlinkWatcher(ListenerThread):
    """Owns one daemon thread; ``start()`` returns once the socket is subscribed or given up."""

    thread_name = "railscope-devlink-watcher"

    def __init__(self, on_event: Callable[[], None], *,
                 socket_factory: Callable[[], GenlSocket] = _open_socket,
                 msg_class: Callable[[], Any] = _msg_class,
                 family: str = DEVLINK_FAMILY, group: str = DEVLINK_GROUP) -> None:
        """``family`` / ``group`` / ``msg_class`` are devlink's; a test may listen to another family."""
        super().__init__()
        self._on_event = on_event
        self._family = family
        self._group = group
        self._socket_factory = socket_factory
        self._msg_class = msg_class
        self.subscribed = False
        self.events = 0

    def _subscribe(self, sock: GenlSocket) -> int:
        """Resolves the family, joins devlink's config group; returns the devlink family id."""
        sock.bind(self._family, self._msg_class())
        if self._group not in (sock.mcast_groups or {}):
            raise ValueError(f"{self._family} family has no {self._group!r} multicast group")
        sock.add_membership(self._group)  # by name: pyroute2 maps it to the group id it resolved
        return int(sock.prid)

    def _run(self) -> None:
        try:
            sock = self._socket_factory()
        except Exception as exc:  # no AF_NETLINK, or pyroute2 missing: polling stays
            self._give_up(f"devlink events: {getattr(exc, 'strerror', None) or exc}")
            return
        try:
            try:
                family = self._subscribe(sock)
            except Exception as exc:  # pyroute2 raises its NetlinkError (not an OSError) for ENOENT
                if _errno_of(exc) == errno.ENOENT:
                    self._give_up(f"{self._family} events: the kernel has no {self._family} family; it is polled")
                else:
                    self._give_up(f"{self._family} events: {getattr(exc, 'strerror', None) or exc}")
                return
            self.subscribed = True
            self._ready.set()
            self._loop(sock, family)
        finally:
            try:
                sock.close()
            except Exception:  # closing at shutdown must not raise out of the thread
                log.debug("closing the devlink socket failed", exc_info=True)

    def _give_up(self, reason: str) -> None:
        self.error = reason
        log.info("devlink watcher not started", extra={"reason": reason})
        self._ready.set()

    def _loop(self, sock: GenlSocket, family: int) -> None:
        fd = sock.fileno()
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.5)  # how soon stop() is noticed
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                msgs = sock.get()
            except Exception as exc:
                if _errno_of(exc) == errno.ENOBUFS:
                    # Notifications were lost; the read they ask for is the same.
                    self._notify()
                    continue
                self.error = f"devlink events: {getattr(exc, 'strerror', None) or exc}"
                self.subscribed = False
                log.warning("devlink watcher stopped", extra={"reason": self.error})
                return
            if any(_type_of(m) == family for m in msgs):
                self._notify()

    def _notify(self) -> None:
        self.events += 1
        try:
            self._on_event()
        except Exception:  # a closed event loop at shutdown must not kill the thread noisily
            log.debug("devlink event callback failed", exc_info=True)


def _type_of(msg: Any) -> int | None:
    try:
        return int(msg["header"]["type"])
    except (KeyError, TypeError, ValueError):
        return None
