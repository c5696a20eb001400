"""The devlink event listener: pyroute2's generic netlink on this kernel (no devlink family here: it
ends cleanly), and, over a stand-in socket, event -> callback and event -> devlink read.

The real subscription and a real notification are the kernel lab's (tests/klab/test_klab_daemon.py:
a devlink param change read within the re-read gap). The stand-in socket has pyroute2's shape
(``bind``, ``mcast_groups``, ``add_membership``, ``fileno``, ``get``) and a socketpair behind its
``fileno`` so that the listener's ``select`` wakes exactly as on a netlink socket.
"""

from __future__ import annotations

import asyncio
import errno
import queue
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentSettings
from agent.host.netlink.devlink_events import DEVLINK_FAMILY, DEVLINK_GROUP, DevlinkWatcher
from agent.service import link_events as runtime
from agent.service.daemon import _RESAMPLE_GAP_S, Agent

DEVLINK_ID = 0x1B
CONFIG_GROUP = 7
GENL_ID_CTRL = 0x10


def _kernel_has_devlink() -> bool:
    from pyroute2.netlink.devlink import devlinkcmd
    from pyroute2.netlink.generic import GenericNetlinkSocket

    sock = GenericNetlinkSocket()
    try:
        sock.bind(DEVLINK_FAMILY, devlinkcmd)
        return True
    except Exception as exc:
        if getattr(exc, "code", None) == errno.ENOENT:
            return False
        raise
    finally:
        sock.close()


def test_this_kernel_either_subscribes_or_ends_cleanly() -> None:
    events: list[int] = []
    watcher = DevlinkWatcher(lambda: events.append(1))
    watcher.start()
    try:
        if _kernel_has_devlink():
            assert watcher.subscribed and watcher.error is None and watcher.alive
        else:
            watcher._thread.join(2.0)  # type: ignore[union-attr]
            assert not watcher.alive
            assert not watcher.subscribed
            assert watcher.error is not None and "no devlink family" in watcher.error
            assert events == []
    finally:
        watcher.stop()
    assert not watcher.alive


class _FakeGenl:
    """pyroute2's GenericNetlinkSocket as the listener uses it; ``push`` queues one batch of messages."""

    def __init__(self, groups: dict[str, int] | None = None, bind_error: BaseException | None = None) -> None:
        self.groups = {DEVLINK_GROUP: CONFIG_GROUP} if groups is None else groups
        self.bind_error = bind_error
        self.bound: tuple[str, Any] | None = None
        self.joined: list[str] = []
        self.batches: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self._r, self._w = socket.socketpair()
        self.closed = threading.Event()
        self.prid = 0
        self.mcast_groups: dict[str, int] = {}

    def bind(self, proto: str, msg_class: Any) -> None:
        if self.bind_error is not None:
            raise self.bind_error
        self.bound = (proto, msg_class)
        self.prid, self.mcast_groups = DEVLINK_ID, dict(self.groups)

    def add_membership(self, group: str) -> None:
        assert group in self.mcast_groups  # pyroute2 looks the name up in what bind resolved
        self.joined.append(group)

    def fileno(self) -> int:
        return self._r.fileno()

    def push(self, *types: int) -> None:
        self.batches.put([{"header": {"type": t}} for t in types])
        self._w.send(b"x")

    def get(self) -> list[dict[str, Any]]:
        self._r.recv(1)
        return self.batches.get_nowait()

    def close(self) -> None:
        self._r.close()
        self._w.close()
        self.closed.set()


class _NoFamily(Exception):
    """pyroute2's NetlinkError shape: the kernel's errno as ``code``."""

    code = errno.ENOENT


def _until(cond: Any, timeout_s: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("condition never held")


def test_devlink_messages_call_back_and_others_do_not() -> None:
    sock = _FakeGenl()
    events: list[int] = []
    watcher = DevlinkWatcher(lambda: events.append(1), socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
    watcher.start()
    assert watcher.subscribed
    assert sock.bound is not None and sock.bound[0] == "devlink" and sock.joined == [DEVLINK_GROUP]
    sock.push(GENL_ID_CTRL)  # the controller's own message: not devlink's
    sock.push(DEVLINK_ID)
    _until(lambda: watcher.events == 1)
    sock.push(DEVLINK_ID, DEVLINK_ID)  # one batch: one read asked for
    _until(lambda: watcher.events == 2)
    watcher.stop()
    assert sock.closed.is_set()
    assert events == [1, 1]


def test_no_devlink_family_ends_the_watcher_with_one_reason() -> None:
    sock = _FakeGenl(bind_error=_NoFamily())
    watcher = DevlinkWatcher(lambda: None, socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
    watcher.start()
    _until(lambda: not watcher.alive)
    assert not watcher.subscribed and "no devlink family" in (watcher.error or "")
    assert sock.closed.is_set()


def test_a_family_without_the_config_group_ends_the_watcher_and_closes_its_socket() -> None:
    sock = _FakeGenl(groups={"other": 9})
    watcher = DevlinkWatcher(lambda: None, socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
    watcher.start()
    _until(lambda: not watcher.alive)
    assert not watcher.subscribed and "config" in (watcher.error or "")
    assert sock.closed.is_set()


@pytest.mark.slow
def test_a_devlink_event_reads_devlink_once_per_gap_without_waiting_for_the_poll(
        example_image: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.host.recorded import open_image

    sock = _FakeGenl()
    made: list[DevlinkWatcher] = []

    class _Watcher(DevlinkWatcher):
        def __init__(self, on_event: Any) -> None:
            super().__init__(on_event, socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
            made.append(self)

    monkeypatch.setattr(runtime, "DevlinkWatcher", _Watcher)
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("devlink", 3600.0),), watch_links=True,
                             recorder_window_s=0, node="gpu-node-7")
    agent = Agent(settings, host_factory=lambda: open_image(str(example_image)))
    devlink = agent.source_states["devlink"]

    async def main() -> None:
        await agent.start()
        try:
            for _ in range(500):
                if devlink.runs >= 1:
                    break
                await asyncio.sleep(0.01)
            assert devlink.runs == 1  # the boot read; the next periodic one is an hour away
            assert made and made[0].subscribed
            for _ in range(3):  # a burst inside one gap
                sock.push(DEVLINK_ID)
            for _ in range(500):
                if devlink.runs >= 2:
                    break
                await asyncio.sleep(0.01)
            assert devlink.runs == 2
            for _ in range(300):
                if made[0].events == 3:
                    break
                await asyncio.sleep(0.01)
            assert made[0].events == 3
            # the burst's later events fell in the gap: one deferred read at its end, not three
            await asyncio.sleep(_RESAMPLE_GAP_S + 1.0)
            assert devlink.runs == 3
        finally:
            await agent.stop()
        assert sock.closed.is_set()

    asyncio.run(main())
