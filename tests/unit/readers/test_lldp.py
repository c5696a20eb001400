"""lldp: the frame decoder on real captures (tcpdump's test suite: a Big Cloud Fabric leaf, lldpad DCB hosts,
Cisco switches, the fuzzed frames of four tcpdump CVEs), fuzzed with hypothesis; lldpcli's JSON; the listener's
frames in a node image."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.host.recorded import RecordedHost
from agent.readers.common import Notes
from agent.readers.lldp import (
    FRAMES_FILE,
    MAX_TEXT,
    LldpError,
    decode_frame,
    encode_frames,
    parse_frames_file,
    parse_lldpcli,
    read_lldp,
    text,
)

PUBLIC = Path(__file__).resolve().parents[2] / "fixtures/public/lldp"
IMAGES = Path(__file__).resolve().parents[2] / "images"
#: nothing from a frame may hold a control character, a bidirectional control or a line separator
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def pcap_frames(name: str) -> list[bytes]:
    """The frames of a classic pcap file (either byte order)."""
    data = (PUBLIC / name).read_bytes()
    end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def lldp_frames(name: str) -> list[bytes]:
    return [f for f in pcap_frames(name) if f[12:14] == b"\x88\xcc"]


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", (kind << 9) | len(value)) + value


def frame(*tlvs: bytes, end: bool = True) -> bytes:
    return bytes.fromhex("0180c200000e020000aabb01") + b"\x88\xcc" + b"".join(tlvs) + (tlv(0, b"") if end else b"")


MANDATORY = (tlv(1, b"\x04\x02\x00\x00\xaa\xbb\x01"), tlv(2, b"\x05swp12"), tlv(3, b"\x00\x78"))


def _safe(n: object) -> None:
    for name in ("chassis_id", "port_id", "system", "port_descr", "chassis_id_type", "port_id_type"):
        v = getattr(n, name)
        assert v is None or (isinstance(v, str) and len(v) <= MAX_TEXT and not UNSAFE.search(v)), (name, v)


# -- real frames -----------------------------------------------------------------------------


def test_a_real_leafs_frame_with_pfc_and_application_priority() -> None:
    (f,) = lldp_frames("tcpdump-lldp-app-priority.pcap")
    n = decode_frame(f, "net_rail1", 1.0)
    # tcpdump-lldp-app-priority.out: "Subtype Interface Name (5): leaf0b-eth10", "System Name TLV (5), length 6: leaf0b",
    # "PFC cap:1", "Value : 0 0 0 0 1 0 0 0", "Priority: 4, RES: 0, Sel: 4, Protocol ID: 3260"
    assert (n.system, n.port_id, n.port_id_type, n.port, n.ttl) == ("leaf0b", "leaf0b-eth10", "ifname", "leaf0b-eth10", 120)
    assert (n.chassis_id, n.chassis_id_type) == ("00:00:00:02:00:02", "mac")
    assert n.port_descr == "Big Cloud Fabric Switch Port leaf0b-eth10"
    assert (n.pfc, n.pfc_cap, n.pfc_willing, n.app) == ((4,), 1, False, ((4, 4, 3260),))
    assert n.mfs is None and n.leaf == "leaf0b"


def test_real_pfc_and_ets_tlvs_of_dcb_hosts() -> None:
    for f in lldp_frames("tcpdump-dcb_pfc.pcap"):
        n = decode_frame(f, "r")
        # dcb_pfc.out: "Willing: 0, MBC: 0, RES: 0, PFC cap:4", "Value : 0 0 1 0 1 1 0 0"
        assert (n.pfc, n.pfc_cap, n.pfc_willing) == ((2, 4, 5), 4, False)
        assert n.port_id_type == "mac" and n.system is None and n.port == n.port_id
    first = decode_frame(lldp_frames("tcpdump-dcb_ets.pcap")[0], "r")
    # dcb_ets.out: "Value : 15 4 1 1 15 4 1 4" and "Value : 0 50 0 0 50 0 0 0"
    assert first.ets_prio_tc == (15, 4, 1, 1, 15, 4, 1, 4) and first.ets_bw == (0, 50, 0, 0, 50, 0, 0, 0)
    assert first.pfc is None  # no PFC TLV: not "PFC off"


def test_cisco_switches_frames_among_cdp() -> None:
    got = {(n.system, n.port) for n in (decode_frame(f, "r") for f in lldp_frames("tcpdump-LLDP_and_CDP.pcap"))}
    assert ("S1.cisco.com", "Fa0/13") in got


@pytest.mark.parametrize("name", ["tcpdump-lldp-infinite-loop-2.pcap", "tcpdump-lldp_asan.pcap",
                                  "tcpdump-lldp_8023_mtu-oobr.pcap", "tcpdump-lldp_mgmt_addr_tlv_asan.pcap"])
def test_the_fuzzed_frames_of_tcpdumps_cves_are_refused_with_one_line(name: str) -> None:
    for f in lldp_frames(name):
        with pytest.raises(LldpError) as exc:
            decode_frame(f, "r")
        assert "\n" not in str(exc.value)


def test_an_application_priority_tlv_of_many_entries_is_bounded() -> None:
    (f,) = lldp_frames("tcpdump-lldp-infinite-loop-1.pcap")  # CVE-2017-12997's frame
    n = decode_frame(f, "r")
    assert len(n.app) <= 32


# -- hostile frames built byte by byte ---------------------------------------------------------


def test_every_length_is_checked() -> None:
    with pytest.raises(LldpError, match="says 400 bytes"):
        decode_frame(frame(*MANDATORY, struct.pack("!H", (5 << 9) | 400) + b"leaf", end=False), "r")
    with pytest.raises(LldpError, match="header cut"):
        decode_frame(frame(*MANDATORY, end=False) + b"\x0a", "r")
    with pytest.raises(LldpError, match="chassis ID, port ID and TTL"):
        decode_frame(frame(tlv(2, b"\x05p"), tlv(1, b"\x04" + b"\x00" * 6), tlv(3, b"\x00\x01")), "r")
    with pytest.raises(LldpError, match="a second TLV of type 1"):
        decode_frame(frame(*MANDATORY, MANDATORY[0]), "r")
    with pytest.raises(LldpError, match="not LLDP"):
        decode_frame(bytes(12) + b"\x08\x00" + bytes(40), "r")
    with pytest.raises(LldpError, match="more than"):
        decode_frame(frame(*MANDATORY) + bytes(10_000), "r")
    # an org TLV of the wrong size for its subtype is ignored, not misread
    n = decode_frame(frame(*MANDATORY, tlv(127, b"\x00\x80\xc2\x0b\x08"), tlv(127, b"\x00\x12\x0f\x04\x23")), "r")
    assert n.pfc is None and n.mfs is None


def test_a_vlan_tagged_frame_and_no_end_tlv() -> None:
    body = b"".join(MANDATORY)
    tagged = bytes.fromhex("0180c200000e020000aabb01") + b"\x81\x00\x00\x05" + b"\x88\xcc" + body
    assert decode_frame(tagged, "r").port == "swp12"


def test_strings_from_the_wire_are_escaped_and_cut() -> None:
    n = decode_frame(frame(*MANDATORY, tlv(5, "leaf\x1b[2J\u202e-\\x41".encode()), tlv(4, b"\xff\xfe" + b"9" * 400)),
                     "r")
    assert n.system == "leaf\\x1b[2J\\u202e-\\\\x41"  # a backslash is doubled: no escape of the wire passes for ours
    assert n.port_descr is not None and len(n.port_descr) == MAX_TEXT and n.port_descr.startswith("\\ufffd")
    _safe(n)
    assert text(b"\x00\x00") == "\\x00\\x00" and text(b"  ") is None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes_decode_or_refuse(data: bytes) -> None:
    for raw in (data, frame(*MANDATORY) [:14] + data, frame(*MANDATORY, end=False) + data):
        try:
            n = decode_frame(raw, "r")
        except LldpError:
            continue
        _safe(n)
        assert len(n.mgmt) <= 4 and len(n.app) <= 32


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_real_frames(data: st.DataObject) -> None:
    base = bytearray(data.draw(st.sampled_from(lldp_frames("tcpdump-lldp-app-priority.pcap")
                                              + lldp_frames("tcpdump-dcb_ets.pcap")[:1])))
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(base) - 1))
        base[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(base)))
    try:
        n = decode_frame(bytes(base[:cut]), "r")
    except LldpError:
        return
    _safe(n)


# -- lldpcli -----------------------------------------------------------------------------------


def test_lldpcli_with_two_neighbours_on_one_interface_keeps_the_latest() -> None:
    doc = json.loads((PUBLIC / "RECONSTRUCTED-lldpcli-1.0.16-details-two-neighbours.json").read_text())
    (n,) = parse_lldpcli(doc, ["r0"], ref=1000.0)
    assert (n.system, n.port, n.port_descr, n.mfs, n.ttl, n.mgmt) == ("leaf-07", "swp12", "Eth1/12", 9236, 120,
                                                                      ("10.0.0.7",))
    # the TLVs lldpd does not decode, from its hex: PFC on 3 (willing, cap 8), application priority 3 / UDP 4791
    assert (n.pfc, n.pfc_willing, n.pfc_cap, n.app) == ((3,), True, 8, ((3, 2, 4791),))
    assert n.via == "lldpd" and n.seen is not None and n.seen <= 1000.0
    assert parse_lldpcli(doc, ["net_rail0"]) == ()


def test_lldpcli_shapes_and_junk() -> None:
    one = {"lldp": {"interface": {"net_rail0": {"chassis": {"id": {"type": "mac", "value": "aa:bb:cc:dd:ee:ff"}},
                                                "port": {"id": {"type": "local", "value": "Ethernet1/12"},
                                                         "ttl": "120"}}}}}
    (n,) = parse_lldpcli(one, ["net_rail0"])
    assert (n.system, n.leaf, n.port) == (None, "aa:bb:cc:dd:ee:ff", "Ethernet1/12")
    json0 = {"lldp": [{"interface": [{"name": "net_rail0", "chassis": [{"id": [{"type": "mac", "value": "x"}],
                                                                          "name": [{"value": "leaf-9"}]}],
                                      "port": [{"id": [{"type": "ifname", "value": "swp9"}]}]}]}]}
    assert [(x.system, x.port) for x in parse_lldpcli(json0, ["net_rail0"])] == [("leaf-9", "swp9")]
    with pytest.raises(ValueError):
        parse_lldpcli({"nope": 1}, ["r"])
    odd = {"lldp": {"interface": {"net_rail0": {"chassis": {"l\x1bx": {"id": {"value": 7}, "mgmt-ip": "not an ip"}},
                                                "port": {"mfs": "99999999", "ttl": True},
                                                "unknown-tlvs": {"unknown-tlv": {"oui": "zz", "value": "1,2"}}}}}}
    (n,) = parse_lldpcli(odd, ["net_rail0"])
    assert (n.system, n.mgmt, n.mfs, n.ttl, n.pfc) == ("l\\x1bx", (), None, None, None)


# -- the listener's frames in an image ----------------------------------------------------------


def test_frames_file_round_trip_and_bounds() -> None:
    raw = encode_frames({"net_rail0": (10.0, b"\x01\x02")}, {"net_rail0": 5.0})
    assert parse_frames_file(raw) == ({"net_rail0": (10.0, b"\x01\x02")}, {"net_rail0": 5.0})
    bad = json.dumps({"schema": "railscope.lldp-frames/v1", "frames": [
        {"netdev": "x" * 40, "ts": 1, "hex": "00"}, {"netdev": "r", "ts": True, "hex": "00"},
        {"netdev": "q", "ts": 1, "hex": "zz"}, 7]}).encode()
    assert parse_frames_file(bad) == ({}, {})
    with pytest.raises(ValueError):
        parse_frames_file(b'{"schema": "other"}')


def test_an_image_replays_the_listeners_frames() -> None:
    host = RecordedHost(IMAGES / "lldp-peer-pfc-mismatch")
    assert host.file(FRAMES_FILE) is not None
    notes = Notes()
    got = read_lldp(host, ["net_rail0", "net_rail1"], None, notes=notes)
    assert [(n.netdev, n.leaf, n.port, n.pfc, n.via) for n in got] == [
        ("net_rail0", "leaf-02", "swp1", (3,), "listen"), ("net_rail1", "leaf0b", "leaf0b-eth10", (4,), "listen")]
    assert not notes.unavailable
    assert read_lldp(host, ["net_rail0"], "off") == ()


def test_no_lldp_on_an_image_is_a_state_never_a_fault() -> None:
    notes = Notes()
    assert read_lldp(RecordedHost(IMAGES / "spectrumx-2rail-healthy"), ["net_rail0"], None, notes=notes) == ()
    assert notes.unavailable and all(s == "lldp" for s, _ in notes.unavailable)
    notes = Notes()
    assert read_lldp(RecordedHost(IMAGES / "spectrumx-2rail-healthy"), ["net_rail0"], "listen", notes=notes) == ()
    assert notes.unavailable == [("lldp", "lldp/frames.json: not in this image")]


class _Lldpcli:
    """A live host whose lldpcli fails as lldpcli does without lldpd (its log line carries the time)."""

    live = True
    image = None

    def run(self, argv, timeout_s=10.0, max_bytes=8 << 20, keep="head"):
        from agent.host import CmdResult

        return CmdResult(tuple(argv), 1, b"", b"2026-12-04T19:16:38 [WARN/control] unable to connect to socket "
                                             b"/run/lldpd.socket: No such file or directory\n")


def test_lldpclis_failure_reads_the_same_at_any_time() -> None:
    notes = Notes()
    assert read_lldp(_Lldpcli(), ["net_rail0"], None, notes=notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("lldp", "lldpcli -f json show neighbors details: exit 1: unable to connect to "
                                          "socket /run/lldpd.socket: No such file or directory")]


def test_a_capture_runs_lldpclis_query_and_nothing_else_of_it() -> None:
    from agent.capture.plugin import not_allowed

    assert not_allowed(["lldpcli", "-f", "json", "show", "neighbors", "details"]) is None
    for argv in (["lldpcli", "configure", "system", "hostname", "x"], ["lldpcli", "-f", "json", "update"],
                 ["lldpcli", "-f", "json", "show", "neighbors", "details", "ports", "x"]):
        assert not_allowed(argv)
