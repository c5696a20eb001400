"""The link dump parser on raw rtnetlink messages built here byte by byte (include/uapi/linux/if_link.h)."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from agent.host.netlink import codec as nl
from agent.host.netlink.codec import NetlinkError, build_getlink, parse_link
from agent.host.netlink.dump import LinkReader, _Dump, parse_dump

SEQ = 77


def rta(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def nested(kind: int, *attrs: bytes) -> bytes:
    return rta(kind | 0x8000, b"".join(attrs))  # NLA_F_NESTED, as newer kernels set it


def u32(v: int) -> bytes:
    return struct.pack("=I", v)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def ifinfo(ifindex: int) -> bytes:
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 1, ifindex, 0x11043, 0)


def msg(mtype: int, payload: bytes, seq: int = SEQ, flags: int = nl.NLM_F_MULTI) -> bytes:
    n = 16 + len(payload)
    return struct.pack("=IHHII", n, mtype, flags, seq, 0) + payload + b"\0" * ((4 - n % 4) % 4)


def newlink(ifindex: int, *attrs: bytes, **kw: int) -> bytes:
    return msg(nl.RTM_NEWLINK, ifinfo(ifindex) + b"".join(attrs), **kw)


def done(status: int = 0, seq: int = SEQ) -> bytes:
    return msg(nl.NLMSG_DONE, struct.pack("=i", status), seq=seq)


def vf(num: int, mac: bytes, link_state: int, spoofchk: int, trust: int) -> bytes:
    return nested(
        nl.IFLA_VF_INFO,
        rta(nl.IFLA_VF_MAC, u32(num) + mac.ljust(32, b"\0")),
        rta(2, u32(num) + u32(0) + u32(0)),  # IFLA_VF_VLAN: not in the schema, must be skipped
        rta(nl.IFLA_VF_LINK_STATE, u32(num) + u32(link_state)),
        rta(nl.IFLA_VF_SPOOFCHK, u32(num) + u32(spoofchk)),
        rta(nl.IFLA_VF_TRUST, u32(num) + u32(trust)),
    )


STATS64 = struct.pack("=8Q", 11, 12, 1100, 1200, 1, 2, 3, 4) + struct.pack("=16Q", *range(16))

PF = newlink(
    7,
    rta(nl.IFLA_IFNAME, cstr("net_rail0")),
    rta(13, u32(1000)),  # IFLA_TXQLEN: skipped
    rta(nl.IFLA_OPERSTATE, b"\x06"),
    rta(nl.IFLA_MTU, u32(9000)),
    rta(nl.IFLA_ADDRESS, bytes.fromhex("b83fd2aa0010")),
    rta(nl.IFLA_CARRIER, b"\x01"),
    rta(nl.IFLA_CARRIER_CHANGES, u32(4)),
    rta(nl.IFLA_CARRIER_UP_COUNT, u32(2)),
    rta(nl.IFLA_CARRIER_DOWN_COUNT, u32(2)),
    rta(nl.IFLA_PHYS_PORT_NAME, cstr("p0")),
    rta(nl.IFLA_PHYS_SWITCH_ID, bytes.fromhex("9A3F21C0FFEE0001")),
    rta(nl.IFLA_PARENT_DEV_NAME, cstr("0000:1a:00.0")),
    rta(nl.IFLA_PARENT_DEV_BUS_NAME, cstr("pci")),
    rta(nl.IFLA_STATS64, STATS64),
    rta(21, u32(2)),  # IFLA_NUM_VF
    nested(nl.IFLA_VFINFO_LIST,
           vf(0, bytes.fromhex("020000000001"), 0, 0, 0),
           vf(1, bytes.fromhex("020000000002"), 2, 1, 0xFFFFFFFF)),
)

VETH = newlink(
    9,
    rta(nl.IFLA_IFNAME, cstr("veth0")),
    rta(nl.IFLA_OPERSTATE, b"\x03"),
    rta(nl.IFLA_MTU, u32(1500)),
    rta(nl.IFLA_MASTER, u32(8)),
    rta(nl.IFLA_CARRIER, b"\x00"),
    nested(nl.IFLA_LINKINFO, rta(nl.IFLA_INFO_KIND, cstr("veth")), nested(2, rta(1, u32(5)))),
)

BRIDGE = newlink(8, rta(nl.IFLA_IFNAME, cstr("br0")), nested(nl.IFLA_LINKINFO, rta(nl.IFLA_INFO_KIND, cstr("bridge"))))


def test_pf_with_vf_info_list() -> None:
    links = parse_dump([PF + done()], SEQ)
    assert links == [{
        "ifindex": 7, "ifname": "net_rail0", "operstate": "UP", "carrier": 1, "carrier_changes": 4,
        "carrier_up_count": 2, "carrier_down_count": 2, "mtu": 9000, "address": "b8:3f:d2:aa:00:10",
        "phys_port_name": "p0", "phys_switch_id": "9a3f21c0ffee0001", "parent_bus": "pci",
        "parent_dev": "0000:1a:00.0", "master": None, "kind": None, "stats64": None,
        "vfinfo": [
            {"vf": 0, "mac": "02:00:00:00:00:01", "link_state": "auto", "spoofchk": False, "trust": False},
            {"vf": 1, "mac": "02:00:00:00:00:02", "link_state": "disable", "spoofchk": True, "trust": None},
        ],
    }]
    assert list(links[0]) == ["ifindex", "ifname", "operstate", "carrier", "carrier_changes",
                              "carrier_up_count", "carrier_down_count", "mtu", "address", "phys_port_name",
                              "phys_switch_id", "parent_bus", "parent_dev", "master", "kind", "stats64",
                              "vfinfo"]


def test_a_reused_receive_buffer_parses_the_same() -> None:
    # The agent's event watcher hands over its bytearray receive buffer with offsets into it.
    buf = bytearray(4096)
    buf[64:64 + len(PF)] = PF
    cache: nl.LayoutCache = {}
    for _ in range(2):
        got = parse_link(buf, 64 + 16, 64 + len(PF), cache=cache)
        assert got == parse_dump([PF + done()], SEQ)[0]
    assert parse_link(memoryview(bytes(buf)), 64 + 16, 64 + len(PF)) == got


def test_stats64_only_when_asked() -> None:
    payload = PF[16:]
    assert parse_link(payload, 0, len(payload))["stats64"] is None
    stats = parse_link(payload, 0, len(payload), with_stats=True)["stats64"]
    assert stats == {"rx_bytes": 1100, "tx_bytes": 1200, "rx_packets": 11, "tx_packets": 12,
                     "rx_errors": 1, "tx_errors": 2, "rx_dropped": 3, "tx_dropped": 4}


def test_multipart_dump_resolves_master_and_kind_and_skips_foreign_seq() -> None:
    foreign = newlink(99, rta(nl.IFLA_IFNAME, cstr("stale")), seq=SEQ - 1)
    links = parse_dump([foreign + VETH, BRIDGE + PF, done()], SEQ)
    assert [x["ifname"] for x in links] == ["veth0", "br0", "net_rail0"]
    veth = links[0]
    assert veth["master"] == "br0"
    assert veth["kind"] == "veth"
    assert veth["operstate"] == "LOWERLAYERDOWN"
    assert veth["carrier"] == 0
    assert veth["vfinfo"] is None and veth["carrier_changes"] is None
    assert links[1]["kind"] == "bridge"


def test_bare_done_ends_the_dump() -> None:
    bare = struct.pack("=IHHII", 16, nl.NLMSG_DONE, nl.NLM_F_MULTI, SEQ, 0)
    assert [x["ifname"] for x in parse_dump([BRIDGE + bare, VETH], SEQ)] == ["br0"]


def test_layout_cache_gives_what_a_full_walk_gives() -> None:
    def veth(ifindex: int, name: str, mtu: int, oper: bytes, first: int = nl.IFLA_MTU) -> bytes:
        return newlink(ifindex, rta(nl.IFLA_IFNAME, cstr(name)), rta(first, u32(mtu)),
                       rta(nl.IFLA_OPERSTATE, oper), rta(nl.IFLA_STATS64, STATS64),
                       nested(nl.IFLA_LINKINFO, rta(nl.IFLA_INFO_KIND, cstr("veth"))))

    same_shape = [veth(10 + i, f"eth{i:03d}", 1500 + i, b"\x06" if i % 2 else b"\x02") for i in range(6)]
    # Same length and offsets, but IFLA_TXQLEN where IFLA_MTU was: the header types differ, so the
    # cached layout must not be taken for it (its value is no MTU).
    decoy = veth(30, "eth999", 4242, b"\x06", first=13)
    chunks = [b"".join(same_shape[:3]), decoy + b"".join(same_shape[3:]) + PF + done()]
    cache: nl.LayoutCache = {}
    dump = _Dump(SEQ, cache)
    for c in chunks:
        dump.feed(c, len(c))
    cached = dump.links
    walked = [parse_link(m[16:], 0, len(m) - 16) for m in [*same_shape[:3], decoy, *same_shape[3:], PF]]
    assert cached == walked
    assert [x["mtu"] for x in cached[:3]] == [1500, 1501, 1502]
    assert cached[3]["mtu"] is None and cached[3]["ifname"] == "eth999"
    assert [x["operstate"] for x in cached[4:7]] == ["UP", "DOWN", "UP"]
    assert sum(len(v) for v in cache.values()) == 3  # veth, decoy and PF layouts; the rest reused


def test_every_number_lands_in_its_own_field_and_a_repeated_one_keeps_the_last() -> None:
    # the numbers of a link are read in one unpack: each must land in its field whatever the
    # attributes' order, with a short (1-byte) attribute among them and a repeated one
    msg = newlink(11, rta(nl.IFLA_CARRIER_DOWN_COUNT, u32(7)), rta(nl.IFLA_IFNAME, cstr("net_rail5")),
                  rta(nl.IFLA_CARRIER, b"\x01"), rta(nl.IFLA_MTU, u32(1500)), rta(nl.IFLA_MASTER, u32(3)),
                  rta(nl.IFLA_CARRIER_CHANGES, u32(9)), rta(nl.IFLA_CARRIER_UP_COUNT, u32(2)),
                  rta(nl.IFLA_MTU, u32(9000)))
    got = parse_link(msg[16:], 0, len(msg) - 16)
    assert got is not None
    assert (got["ifindex"], got["ifname"], got["carrier"], got["mtu"], got["master"]) == (11, "net_rail5", 1, 9000, 3)
    assert (got["carrier_changes"], got["carrier_up_count"], got["carrier_down_count"]) == (9, 2, 7)


def test_truncated_link_is_not_cached() -> None:
    good = ifinfo(5) + rta(nl.IFLA_IFNAME, cstr("net_rail1")) + rta(nl.IFLA_MTU, u32(4200))
    cut = good + struct.pack("=HH", 64, nl.IFLA_OPERSTATE) + b"\x06\0\0\0"
    cache: nl.LayoutCache = {}
    assert parse_link(cut, 0, len(cut), cache=cache)["mtu"] == 4200
    assert cache == {}


def test_master_that_vanished_is_null() -> None:
    assert parse_dump([VETH + done()], SEQ)[0]["master"] is None


def test_truncated_attribute_keeps_what_came_before() -> None:
    good = ifinfo(5) + rta(nl.IFLA_IFNAME, cstr("net_rail1")) + rta(nl.IFLA_MTU, u32(4200))
    # An attribute that claims 64 bytes where 8 remain: the walk stops there, nothing is invented.
    cut = struct.pack("=HH", 64, nl.IFLA_OPERSTATE) + b"\x06\0\0\0"
    link = parse_link(good + cut, 0, len(good + cut))
    assert link["ifname"] == "net_rail1" and link["mtu"] == 4200
    assert link["operstate"] is None


def test_truncated_vf_entry_keeps_earlier_vfs() -> None:
    vfs = vf(0, bytes.fromhex("020000000001"), 1, 0, 1)
    bad = struct.pack("=HH", 200, nl.IFLA_VF_INFO | 0x8000) + b"\0" * 8
    payload = ifinfo(3) + rta(nl.IFLA_ADDRESS, bytes(6)) + nested(nl.IFLA_VFINFO_LIST, vfs + bad)
    link = parse_link(payload, 0, len(payload))
    assert link["vfinfo"] == [{"vf": 0, "mac": "02:00:00:00:00:01", "link_state": "enable",
                               "spoofchk": False, "trust": True}]


def test_truncated_message_and_short_payload() -> None:
    whole = VETH + done()
    assert parse_dump([whole[: len(VETH) - 6]], SEQ) == []  # nlmsghdr longer than the data: dropped
    assert parse_link(b"\0" * 8, 0, 8) is None


def test_error_answer_raises() -> None:
    err = msg(nl.NLMSG_ERROR, struct.pack("=i", -errno.EPERM) + b"\0" * 16, flags=0)
    with pytest.raises(NetlinkError) as exc:
        parse_dump([err], SEQ)
    assert exc.value.errno == errno.EPERM


def test_request_asks_for_vfs_and_no_stats() -> None:
    req = build_getlink(5, nl.RTEXT_FILTER_VF | nl.RTEXT_FILTER_SKIP_STATS)
    length, mtype, flags, seq, _pid = struct.unpack_from("=IHHII", req)
    assert (length, mtype, seq) == (len(req), nl.RTM_GETLINK, 5)
    assert flags & nl.NLM_F_DUMP == nl.NLM_F_DUMP and flags & nl.NLM_F_REQUEST
    alen, atype, mask = struct.unpack_from("=HHI", req, 32)
    assert (alen, atype, mask) == (8, nl.IFLA_EXT_MASK, 0b1001)
    get = build_getlink(6, 0, "net_rail0")
    assert not struct.unpack_from("=IHHII", get)[2] & nl.NLM_F_DUMP
    assert cstr("net_rail0") in get


def _reseq(chunk: bytes, seq: int) -> bytes:
    """The same messages, answering request ``seq`` (the reader numbers its requests itself)."""
    out = bytearray(chunk)
    off = 0
    while off + 16 <= len(out):
        struct.pack_into("=I", out, off + 8, seq)
        off += (struct.unpack_from("=I", out, off)[0] + 3) & ~3
    return bytes(out)


class ScriptedSocket:
    """Answers each dump request with the next scripted answer (chunks for the request's seq)."""

    def __init__(self, answers: list[list[bytes] | OSError]) -> None:
        self.answers = answers
        self.pending: list[bytes] = []
        self.sent = 0
        self.closed = False

    def send(self, data: bytes) -> int:
        seq = struct.unpack_from("=IHHII", data)[3]
        answer = self.answers[self.sent]
        self.sent += 1
        if isinstance(answer, OSError):
            self.pending = [answer]  # type: ignore[list-item]
        else:
            self.pending = [_reseq(c, seq) for c in answer]
        return len(data)

    def recv_into(self, buf: bytearray, n: int, flags: int) -> int:
        chunk = self.pending.pop(0)
        if isinstance(chunk, OSError):
            raise chunk
        if len(chunk) > n:
            buf[:n] = chunk[:n]  # MSG_TRUNC: the kernel cuts the datagram and says how long it was
            return len(chunk)
        buf[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        self.closed = True


def reader_with(monkeypatch: pytest.MonkeyPatch, answers: list[list[bytes] | OSError]) -> LinkReader:
    sock = ScriptedSocket(answers)
    reader = LinkReader()
    monkeypatch.setattr(reader, "_socket", lambda: sock)
    reader.sock = sock  # type: ignore[attr-defined]
    return reader


def test_interrupted_dump_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    intr = newlink(9, rta(nl.IFLA_IFNAME, cstr("half")), flags=nl.NLM_F_MULTI | nl.NLM_F_DUMP_INTR)
    reader = reader_with(monkeypatch, [[intr + done()], [VETH, BRIDGE + done()]])
    links = reader.dump()
    assert [x["ifname"] for x in links] == ["veth0", "br0"]
    assert reader.sock.sent == 2 and not reader.last_dump_interrupted


def test_dump_still_interrupted_returns_last_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    eintr = [BRIDGE + done(-errno.EINTR)]
    reader = reader_with(monkeypatch, [eintr, eintr, eintr])
    assert [x["ifname"] for x in reader.dump()] == ["br0"]
    assert reader.last_dump_interrupted


def test_enobufs_is_retried_then_fatal_error_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = reader_with(monkeypatch, [OSError(errno.ENOBUFS, "No buffer space"), [PF + done()]])
    assert [x["ifname"] for x in reader.dump()] == ["net_rail0"]
    reader = reader_with(monkeypatch, [OSError(errno.EPERM, "Operation not permitted")])
    with pytest.raises(NetlinkError):
        reader.dump()


def test_real_kernel_dump_of_this_namespace() -> None:
    try:
        with LinkReader() as reader:
            links = reader.dump()
    except OSError as exc:
        pytest.skip(f"no rtnetlink here: {exc}")
    lo = next(x for x in links if x["ifname"] == "lo")
    assert lo["mtu"] == 65536 and lo["address"] == "00:00:00:00:00:00" and lo["stats64"] is None


def test_live_host_says_not_available_when_netlink_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.host.live import LiveHost

    def refuse(self: LinkReader) -> list:
        raise NetlinkError(errno.EPERM, "RTM_GETLINK dump: Operation not permitted")

    monkeypatch.setattr(LinkReader, "dump", refuse)
    monkeypatch.setattr(LinkReader, "stats", lambda self, names: refuse(self))
    with LiveHost() as host:
        assert host.links() is None
        assert host.links_error == "netlink: RTM_GETLINK dump: Operation not permitted"
        assert host.link_stats(["net_rail0"]) == {}


def test_an_answer_larger_than_the_buffer_grows_it_and_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    big = [PF * 40 + done()]
    reader = reader_with(monkeypatch, [big, big])
    reader._buf = bytearray(1024)
    assert [x["ifname"] for x in reader.dump()] == ["net_rail0"]
    assert reader.sock.sent == 2 and len(reader._buf) >= len(big[0])
