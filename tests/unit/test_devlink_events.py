"""The devlink watcher: family lookup parsing, the kernel without devlink, and event -> devlink read.

The kernel answers are built by hand in the layout of include/uapi/linux/genetlink.h, so the parser
is checked against bytes the test controls; the wiring test drives a whole agent (over the example
node image) whose devlink watcher reads a fake socket, and counts the devlink reads it causes.
"""

from __future__ import annotations

import asyncio
import errno
import queue
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentSettings
from agent.host.netlink.devlink_events import (
    CTRL_ATTR_FAMILY_ID,
    CTRL_ATTR_FAMILY_NAME,
    CTRL_ATTR_MCAST_GROUPS,
    CTRL_ATTR_MCAST_GRP_ID,
    CTRL_ATTR_MCAST_GRP_NAME,
    CTRL_CMD_GETFAMILY,
    CTRL_CMD_NEWFAMILY,
    GENL_ID_CTRL,
    NETLINK_ADD_MEMBERSHIP,
    NETLINK_GENERIC,
    SOL_NETLINK,
    DevlinkWatcher,
    build_getfamily,
    parse_family,
)
from agent.service import daemon as runtime
from agent.service.daemon import _RESAMPLE_GAP_S, Agent

DEVLINK_ID = 0x1B
CONFIG_GROUP = 7
DEVLINK_CMD_PARAM_NEW = 40  # include/uapi/linux/devlink.h


def _nla(kind: int, payload: bytes, nested: bool = False) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind | (0x8000 if nested else 0)) + payload + b"\0" * ((4 - n % 4) % 4)


def _msg(mtype: int, body: bytes, seq: int = 1) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, seq, 0) + body


def _newfamily(family_id: int = DEVLINK_ID, groups: tuple[tuple[str, int], ...] = (("config", CONFIG_GROUP),)) -> bytes:
    grps = b"".join(
        _nla(i + 1, _nla(CTRL_ATTR_MCAST_GRP_ID, struct.pack("=I", gid))
             + _nla(CTRL_ATTR_MCAST_GRP_NAME, name.encode() + b"\0"), nested=True)
        for i, (name, gid) in enumerate(groups))
    body = (struct.pack("=BBH", CTRL_CMD_NEWFAMILY, 2, 0)
            + _nla(CTRL_ATTR_FAMILY_NAME, b"devlink\0")
            + _nla(CTRL_ATTR_FAMILY_ID, struct.pack("=H", family_id))
            + _nla(CTRL_ATTR_MCAST_GROUPS, grps, nested=True))
    return _msg(GENL_ID_CTRL, body)


def _error(code: int) -> bytes:
    return _msg(2, struct.pack("=i", code) + b"\0" * 16)


def _devlink_note() -> bytes:
    return _msg(DEVLINK_ID, struct.pack("=BBH", DEVLINK_CMD_PARAM_NEW, 1, 0), seq=0)


def test_the_family_answer_gives_the_id_and_every_group() -> None:
    info = parse_family(_newfamily(groups=(("config", CONFIG_GROUP), ("other", 9))) + _error(0))
    assert info.family_id == DEVLINK_ID
    assert info.groups == {"config": CONFIG_GROUP, "other": 9}


def test_a_family_the_kernel_does_not_know_raises_its_errno() -> None:
    with pytest.raises(OSError) as exc:
        parse_family(_error(-errno.ENOENT))
    assert exc.value.errno == errno.ENOENT


def test_an_answer_without_a_family_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_family(b"\x01\x02")


def test_the_request_names_the_family_to_the_controller() -> None:
    req = build_getfamily(5, "devlink")
    length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", req)
    assert (length, mtype, seq) == (len(req), GENL_ID_CTRL, 5)
    assert req[16] == CTRL_CMD_GETFAMILY
    alen, atype = struct.unpack_from("=HH", req, 20)
    assert atype == CTRL_ATTR_FAMILY_NAME
    assert req[24:20 + alen] == b"devlink\0"


def _kernel_has_devlink() -> bool:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    try:
        sock.settimeout(2.0)
        sock.send(build_getfamily(1, "devlink"))
        parse_family(sock.recv(1 << 16))
        return True
    except OSError as exc:
        if exc.errno == errno.ENOENT:
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


class _FakeSocket:
    """Answers the family lookup, then hands out the queued datagrams; records what was asked."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.datagrams: queue.Queue[bytes] = queue.Queue()
        self.sent: list[bytes] = []
        self.options: list[tuple[int, int, int]] = []
        self.closed = threading.Event()

    def settimeout(self, _t: float) -> None:
        pass

    def bind(self, _addr: tuple[int, int]) -> None:
        pass

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, _n: int) -> bytes:
        return self.answer

    def setsockopt(self, level: int, opt: int, value: int) -> None:
        self.options.append((level, opt, value))

    def recv_into(self, buf: bytearray) -> int:
        try:
            data = self.datagrams.get(timeout=0.05)
        except queue.Empty:
            raise TimeoutError from None
        buf[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.closed.set()


def _until(cond: Any, timeout_s: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("condition never held")


def test_devlink_messages_call_back_and_others_do_not() -> None:
    sock = _FakeSocket(_newfamily())
    events: list[int] = []
    watcher = DevlinkWatcher(lambda: events.append(1), socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
    watcher.start()
    assert watcher.subscribed
    assert (SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, CONFIG_GROUP) in sock.options
    sock.datagrams.put(_msg(GENL_ID_CTRL, struct.pack("=BBH", CTRL_CMD_NEWFAMILY, 2, 0), seq=0))
    sock.datagrams.put(_devlink_note())
    _until(lambda: watcher.events == 1)
    sock.datagrams.put(_devlink_note() + _devlink_note())  # one datagram: one read asked for
    _until(lambda: watcher.events == 2)
    watcher.stop()
    assert sock.closed.is_set()
    assert events == [1, 1]


def test_a_family_without_the_config_group_ends_the_watcher_and_closes_its_socket() -> None:
    sock = _FakeSocket(_newfamily(groups=(("other", 9),)))
    watcher = DevlinkWatcher(lambda: None, socket_factory=lambda: sock)  # type: ignore[arg-type,return-value]
    watcher.start()
    _until(lambda: not watcher.alive)
    assert not watcher.subscribed and "config" in (watcher.error or "")
    assert sock.closed.is_set()


def test_a_devlink_event_reads_devlink_once_per_gap_without_waiting_for_the_poll(
        example_image: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.host.recorded import open_image

    sock = _FakeSocket(_newfamily())
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
                sock.datagrams.put(_devlink_note())
            for _ in range(500):
                if devlink.runs >= 2:
                    break
                await asyncio.sleep(0.01)
            assert devlink.runs == 2
            assert made[0].events == 3
            # the burst's later events fell in the gap: one deferred read at its end, not three
            await asyncio.sleep(_RESAMPLE_GAP_S + 1.0)
            assert devlink.runs == 3
        finally:
            await agent.stop()
        assert sock.closed.is_set()

    asyncio.run(main())
