"""lldp: each rail's LLDP neighbour, the switch port it is cabled to (docs/design.md §3).

Two ways to hear the switch (``--lldp``):

- ``lldpd``: lldpd runs on the node and ``lldpcli -f json show neighbors details`` says what it heard
  (``details``: the plain form leaves out the maximum frame size and the TLVs lldpd does not decode,
  which it lists under ``unknown-tlvs`` as comma-separated hex: PFC, ETS and application priority);
- ``listen``: the agent's own passive listener (``agent.host.lldp``: AF_PACKET on the rail netdevs,
  ethertype 0x88cc, the 01:80:c2:00:00:0e group only, never promiscuous, never transmitting) keeps the
  last frame of each rail, decoded here. A node image records those frames (``lldp/frames.json``, the
  raw bytes in hex with their time), so ``doctor --from`` decodes the same neighbours.

Unset, ``lldpd`` when lldpcli answers, else nothing (``off``). A frame is untrusted input: every TLV
length is checked against the frame and against its type's own size, counts are bounded, and every
string is kept printable (anything else escaped, ``\\xNN``) and cut, so nothing from the wire reaches a
terminal, a label or a key as sent. No frame on a rail is a state ("no LLDP neighbour seen since T",
under "not available"), never a fault.

TLVs decoded (IEEE 802.1AB-2016 §8, IEEE 802.3-2018 Annex 79, IEEE 802.1Q-2018 Annex D): chassis ID
(1), port ID (2), TTL (3), port description (4), system name (5), management address (8); organisation
specific (127): 00-12-0F subtype 4 maximum frame size; 00-80-C2 subtype 9 ETS configuration, 10 ETS
recommendation, 11 PFC configuration, 12 application priority.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import LldpNeighbor
from agent.readers.common import Notes, parse_json
from agent.readers.source import Context, Part, Source, part
from agent.safejson import JSONError, load_json

__all__ = ["FRAMES_FILE", "LLDPCLI_ARGV", "MODES", "SOURCE", "LldpError", "decode_frame", "encode_frames",
           "parse_frames_file", "parse_lldpcli", "read_lldp", "text"]

LLDPCLI_ARGV = ("lldpcli", "-f", "json", "show", "neighbors", "details")
#: the listener's frames in a node image
FRAMES_FILE = "lldp/frames.json"
FRAMES_SCHEMA = "railscope.lldp-frames/v1"
MODES = ("off", "lldpd", "listen")

ETH_P_LLDP = 0x88CC
_VLAN_TPIDS = (0x8100, 0x88A8)
#: a frame longer than this is refused (a jumbo LLDPDU is legal, more is not LLDP)
MAX_FRAME = 9216
#: at most this many TLVs, management addresses, application entries per frame
MAX_TLVS = 256
MAX_MGMT = 4
MAX_APP = 32
#: strings from the wire are cut to this many characters (a TLV value is at most 511 bytes)
MAX_TEXT = 128
#: at most this many rails, and this much of lldp/frames.json, are read from an image
MAX_RAILS = 64
MAX_FRAMES_FILE = 1 << 20

_CHASSIS_SUBTYPES = {1: "chassis-component", 2: "ifalias", 3: "port-component", 4: "mac", 5: "ip",
                     6: "ifname", 7: "local"}
_PORT_SUBTYPES = {1: "ifalias", 2: "port-component", 3: "mac", 4: "ip", 5: "ifname", 6: "circuit-id",
                  7: "local"}
_OUI_8023 = b"\x00\x12\x0f"
_OUI_8021 = b"\x00\x80\xc2"

# C0, DEL, C1, the bidirectional controls and the line separators (as agent.report.terminal.safe), and
# the backslash itself so that an escape in the text cannot pass for one of ours
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\\\\\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufffd]")


_LOG_PREFIX = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \[[A-Z ]{3,5}/[a-z]+\] ")


class LldpError(ValueError):
    """A frame that is not a well-formed LLDPDU: one line, why."""


def text(raw: Any, limit: int = MAX_TEXT) -> str | None:
    """A string from the wire made safe: UTF-8 (what is not is escaped), controls escaped as ``\\xNN``,
    cut to ``limit`` characters; None when nothing is left.

    >>> text(b"leaf\\x1b[2J-01")
    'leaf\\\\x1b[2J-01'
    """
    if not isinstance(raw, bytes | str):
        return None  # a JSON value of another type (lldpcli's output is parsed, not trusted)
    s = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    s = _UNSAFE.sub(_escape, s).strip()
    if len(s) > limit:
        s = s[:limit - 3] + "..."
    return s or None


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    if c == 0x5C:
        return "\\\\"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _address(b: bytes) -> str | None:
    """An IANA address-family-prefixed address (1 IPv4, 2 IPv6, 6 802 MAC) -> text."""
    if not b:
        return None
    fam, addr = b[0], b[1:]
    if fam == 1 and len(addr) == 4:
        return str(ipaddress.IPv4Address(addr))
    if fam == 2 and len(addr) == 16:
        return str(ipaddress.IPv6Address(addr))
    if fam == 6 and len(addr) == 6:
        return _mac(addr)
    return None


def _id(b: bytes, names: dict[int, str], mac_sub: int, ip_sub: int, what: str) -> tuple[str, str]:
    if not 2 <= len(b) <= 256:
        raise LldpError(f"{what} ID TLV of {len(b)} bytes (IEEE 802.1AB: 2-256)")
    sub, val = b[0], b[1:]
    kind = names.get(sub, f"reserved-{sub}")
    if sub == mac_sub and len(val) == 6:
        return kind, _mac(val)
    if sub == ip_sub:
        addr = _address(val)
        if addr:
            return kind, addr
    return kind, text(val) or val.hex()[:MAX_TEXT]


def _tlvs(body: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    off = 0
    while True:
        if off + 2 > len(body):
            if off == len(body) and out:
                return out  # some senders leave the End TLV out
            raise LldpError(f"TLV header cut at byte {off} of {len(body)}")
        head = int.from_bytes(body[off:off + 2], "big")
        kind, n = head >> 9, head & 0x1FF
        off += 2
        if off + n > len(body):
            raise LldpError(f"TLV type {kind} says {n} bytes, {len(body) - off} left in the frame")
        if kind == 0:
            if n:
                raise LldpError(f"End TLV of length {n}")
            return out
        out.append((kind, body[off:off + n]))
        off += n
        if len(out) > MAX_TLVS:
            raise LldpError(f"more than {MAX_TLVS} TLVs")


def _ets(v: bytes) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """ETS configuration / recommendation body after the first byte: 4 bytes of priority -> traffic class
    (two 4-bit fields a byte, priority 0 high), 8 bytes of bandwidth %, 8 bytes of TSA."""
    if len(v) != 20:
        return None
    prio_tc = tuple(x for b in v[:4] for x in (b >> 4, b & 0x0F))
    bw = tuple(v[4:12])
    # a traffic class of 8-15 is reserved (802.1Q-2018 D.2.9.6) but a 4-bit field: kept as sent
    if any(p > 100 for p in bw):
        return None
    return prio_tc, bw


def decode_frame(frame: bytes, netdev: str, seen: float | None = None, via: str = "listen") -> LldpNeighbor:
    """An Ethernet frame carrying an LLDPDU -> the neighbour it describes; ``LldpError`` for anything that
    is not a well-formed LLDPDU (a length past the frame, a mandatory TLV missing or out of order).

    Sample (hex, a Spectrum leaf's port swp12 advertising MFS 9236 and PFC on priority 3)::

        0180c200000e 020000aabb01 88cc  0207 04 020000aabb01  0406 05 73777031 32  0602 0078 ...
    """
    if len(frame) > MAX_FRAME:
        raise LldpError(f"frame of {len(frame)} bytes (more than {MAX_FRAME})")
    if len(frame) < 14:
        raise LldpError(f"frame of {len(frame)} bytes: no Ethernet header")
    off = 12
    etype = int.from_bytes(frame[off:off + 2], "big")
    for _ in range(2):  # at most two VLAN tags (802.1ad)
        if etype not in _VLAN_TPIDS:
            break
        off += 4
        if off + 2 > len(frame):
            raise LldpError("VLAN tag cut")
        etype = int.from_bytes(frame[off:off + 2], "big")
    if etype != ETH_P_LLDP:
        raise LldpError(f"ethertype 0x{etype:04x}, not LLDP")
    tlvs = _tlvs(frame[off + 2:])
    if len(tlvs) < 3 or [k for k, _ in tlvs[:3]] != [1, 2, 3]:
        raise LldpError("an LLDPDU starts with the chassis ID, port ID and TTL TLVs")
    chassis_type, chassis = _id(tlvs[0][1], _CHASSIS_SUBTYPES, 4, 5, "chassis")
    port_type, port = _id(tlvs[1][1], _PORT_SUBTYPES, 3, 4, "port")
    if len(tlvs[2][1]) < 2:
        raise LldpError(f"TTL TLV of {len(tlvs[2][1])} bytes")
    f: dict[str, Any] = {"ttl": int.from_bytes(tlvs[2][1][:2], "big")}
    mgmt: list[str] = []
    app: list[tuple[int, int, int]] = []
    ets_rec = None
    for kind, v in tlvs[3:]:
        if kind in (1, 2, 3):
            raise LldpError(f"a second TLV of type {kind}")
        if kind == 4 and "port_descr" not in f:
            f["port_descr"] = text(v)
        elif kind == 5 and "system" not in f:
            f["system"] = text(v)
        elif kind == 8 and len(mgmt) < MAX_MGMT:
            # address string length (1), subtype + address, then the interface numbering and OID
            n = v[0] if v else 0
            if 2 <= n <= 32 and len(v) >= 1 + n:
                addr = _address(v[1:1 + n])
                if addr and addr not in mgmt:
                    mgmt.append(addr)
        elif kind == 127 and len(v) >= 4:
            oui, sub, body = v[:3], v[3], v[4:]
            if oui == _OUI_8023 and sub == 4 and len(body) == 2:
                f["mfs"] = int.from_bytes(body, "big")
            elif oui == _OUI_8021 and sub == 0x0B and len(body) == 2:
                f["pfc_willing"] = bool(body[0] & 0x80)
                f["pfc_cap"] = body[0] & 0x0F
                f["pfc"] = tuple(p for p in range(8) if body[1] & (1 << p))
            elif oui == _OUI_8021 and sub == 0x09 and len(body) == 21:
                got = _ets(body[1:])
                if got:
                    f["ets_prio_tc"], f["ets_bw"] = got
            elif oui == _OUI_8021 and sub == 0x0A and len(body) == 21:
                ets_rec = _ets(body[1:])
            elif oui == _OUI_8021 and sub == 0x0C and len(body) >= 1 and (len(body) - 1) % 3 == 0:
                for i in range(1, len(body), 3):
                    if len(app) >= MAX_APP:
                        break
                    b = body[i]
                    entry = (b >> 5, b & 0x07, int.from_bytes(body[i + 1:i + 3], "big"))
                    if entry not in app:
                        app.append(entry)
    if ets_rec and "ets_prio_tc" not in f:
        f["ets_prio_tc"], f["ets_bw"] = ets_rec
    return LldpNeighbor(netdev=netdev, via=via, seen=seen, chassis_id=chassis, chassis_id_type=chassis_type,
                        port_id=port, port_id_type=port_type, mgmt=tuple(mgmt), app=tuple(app), **f)


# -- lldpcli -------------------------------------------------------------------------------------


def _age(value: Any) -> float | None:
    """lldpd's ``age``: ``"0 day, 00:00:10"`` -> 10.0."""
    m = re.fullmatch(r"\s*(\d{1,6}) days?, (\d{1,2}):(\d{2}):(\d{2})\s*", value) if isinstance(value, str) else None
    if not m:
        return None
    d, h, mi, s = (int(x) for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + s)


def _num(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, dict):
        value = value.get("value", value.get("ttl"))
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 6:
        value = int(value)
    return value if isinstance(value, int) and low <= value <= high else None


def _value(obj: Any) -> Any:
    """lldpd's json forms: ``"x"``, ``{"value": "x"}``, ``[{"value": "x"}]``."""
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if isinstance(obj, dict):
        return obj.get("value")
    return obj


def _hex_list(value: Any) -> bytes | None:
    """lldpd's unknown TLV value, ``"88,08"`` -> b"\\x88\\x08" (at most 511 bytes)."""
    if not isinstance(value, str) or len(value) > 3 * 511:
        return None
    try:
        return bytes(int(x, 16) for x in value.split(",")) if value else b""
    except ValueError:
        return None


def _entries(obj: Any, limit: int = 64) -> list[dict[str, Any]]:
    if isinstance(obj, dict):
        return [obj]
    if isinstance(obj, list):
        return [x for x in obj[:limit] if isinstance(x, dict)]
    return []


def _interfaces(doc: Any) -> list[tuple[str, dict[str, Any]]]:
    """(interface name, neighbour object) of ``lldpcli -f json``: ``interface`` is one object keyed by
    name when there is one neighbour, a list of such objects when there are more (lldpd 1.0)."""
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    if isinstance(lldp, list):
        lldp = lldp[0] if lldp and isinstance(lldp[0], dict) else None
    if not isinstance(lldp, dict):
        raise ValueError('expected {"lldp": {"interface": ...}}')
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in _entries(lldp.get("interface"), 4 * MAX_RAILS):
        if isinstance(entry.get("name"), str) and "chassis" in entry:  # the json0 form
            out.append((entry["name"], entry))
            continue
        for name, obj in list(entry.items())[:4 * MAX_RAILS]:
            if isinstance(name, str) and isinstance(obj, dict):
                out.append((name, obj))
    return out


def _from_lldpcli(netdev: str, obj: dict[str, Any], ref: float | None) -> LldpNeighbor | None:
    chassis = obj.get("chassis")
    system: str | None = None
    if isinstance(chassis, list):
        chassis = chassis[0] if chassis and isinstance(chassis[0], dict) else None
    if isinstance(chassis, dict) and not isinstance(chassis.get("id"), dict | list) and len(chassis) == 1:
        system, chassis = next(iter(chassis.items()))  # keyed by the system name
    if not isinstance(chassis, dict):
        return None
    system = system if system is not None else _value(chassis.get("name"))
    cid = chassis.get("id")
    cid = cid[0] if isinstance(cid, list) and cid else cid
    port = obj.get("port")
    port = port[0] if isinstance(port, list) and port else port
    port = port if isinstance(port, dict) else {}
    pid = port.get("id")
    pid = pid[0] if isinstance(pid, list) and pid else pid
    mgmt_raw = chassis.get("mgmt-ip")
    mgmt_list = mgmt_raw if isinstance(mgmt_raw, list) else [mgmt_raw]
    mgmt: list[str] = []
    for m in mgmt_list[:MAX_MGMT]:
        m = _value(m)
        try:
            addr = str(ipaddress.ip_address(m)) if isinstance(m, str) and len(m) <= 64 else None
        except ValueError:
            addr = None
        if addr and addr not in mgmt:
            mgmt.append(addr)
    f: dict[str, Any] = {}
    age = _age(_value(obj.get("age")))
    ttl = _num(port.get("ttl"), 0, 65535)
    ttl = ttl if ttl is not None else _num(chassis.get("ttl"), 0, 65535)
    # Org TLVs lldpd does not decode come back as hex: the same decoder as a frame's reads them
    for tlv in _entries((obj.get("unknown-tlvs") or {}).get("unknown-tlv") if isinstance(obj.get("unknown-tlvs"),
                                                                                          dict) else None, MAX_TLVS):
        oui, sub, body = _hex_list(tlv.get("oui")), _num(tlv.get("subtype"), 0, 255), _hex_list(tlv.get("value"))
        if oui is None or len(oui) != 3 or sub is None or body is None:
            continue
        value = oui + bytes([sub]) + body
        f.setdefault("org", []).append(bytes([(127 << 1) | (len(value) >> 8), len(value) & 0xFF]) + value)
    org = _decode_org(f.pop("org", []))
    kind = lambda x: text(_value(x.get("type")), 32) if isinstance(x, dict) else None  # noqa: E731
    return LldpNeighbor(
        netdev=netdev, via="lldpd", seen=(ref - age) if ref is not None and age is not None else None,
        chassis_id=text(_value(cid)), chassis_id_type=kind(cid), port_id=text(_value(pid)), port_id_type=kind(pid),
        system=text(system), port_descr=text(_value(port.get("descr"))), mgmt=tuple(mgmt), ttl=ttl,
        mfs=_num(port.get("mfs"), 0, 65535), **org)


def _decode_org(tlvs: list[bytes]) -> dict[str, Any]:
    """The 802.1Qaz / 802.3 fields of raw org TLVs, through the frame decoder (one parser of the wire)."""
    if not tlvs:
        return {}
    body = b"".join(tlvs[:MAX_TLVS - 4])
    frame = (b"\x01\x80\xc2\x00\x00\x0e" + b"\x00" * 6 + b"\x88\xcc" + b"\x02\x02\x07x" + b"\x04\x02\x07x"
             + b"\x06\x02\x00\x00" + body + b"\x00\x00")
    try:
        n = decode_frame(frame, "-")
    except LldpError:
        return {}
    return {k: getattr(n, k) for k in ("pfc", "pfc_willing", "pfc_cap", "ets_prio_tc", "ets_bw", "app")
            if getattr(n, k) not in (None, ())}


def parse_lldpcli(doc: Any, rails: Iterable[str], ref: float | None = None) -> tuple[LldpNeighbor, ...]:
    """``lldpcli -f json show neighbors details`` -> the rails' neighbours (the most recent one of a rail
    that lists several); ``ref`` is the time of the answer (lldpd gives ages).

    Sample (lldpd 1.0.16, one neighbour; with more, ``interface`` is a list of such objects)::

        {"lldp": {"interface": {"net_rail0": {"via": "LLDP", "age": "0 day, 00:00:10",
          "chassis": {"leaf-07": {"id": {"type": "mac", "value": "02:00:00:aa:bb:01"}, "mgmt-ip": "10.0.0.7"}},
          "port": {"id": {"type": "ifname", "value": "swp12"}, "descr": "Eth1/12", "ttl": "120", "mfs": "9236"},
          "unknown-tlvs": {"unknown-tlv": [{"oui": "00,80,C2", "subtype": "11", "len": "2", "value": "88,08"}]}}}}}
    """
    want = set(rails)
    best: dict[str, LldpNeighbor] = {}
    for name, obj in _interfaces(doc):
        if name not in want:
            continue
        n = _from_lldpcli(name, obj, ref)
        if n is None:
            continue
        old = best.get(name)
        if old is None or (n.seen or 0) >= (old.seen or 0):
            best[name] = n
    return tuple(best[k] for k in sorted(best))


# -- the listener's frames in an image -----------------------------------------------------------


def encode_frames(frames: dict[str, tuple[float, bytes]], since: dict[str, float]) -> bytes:
    """``lldp/frames.json``: the listener's last frame per rail (hex) with its time, and since when it
    listened on each rail."""
    doc = {"schema": FRAMES_SCHEMA,
           "since": {k: since[k] for k in sorted(since)},
           "frames": [{"netdev": k, "ts": frames[k][0], "hex": frames[k][1].hex()} for k in sorted(frames)]}
    return (json.dumps(doc, indent=1) + "\n").encode()


def parse_frames_file(raw: bytes) -> tuple[dict[str, tuple[float, bytes]], dict[str, float]]:
    """``lldp/frames.json`` -> (netdev -> (ts, frame bytes), netdev -> since); ValueError when it is not
    one. A bad entry costs that entry."""
    if len(raw) > MAX_FRAMES_FILE:
        raise ValueError(f"{FRAMES_FILE}: more than {MAX_FRAMES_FILE} bytes")
    try:
        doc = load_json(raw, FRAMES_FILE)
    except JSONError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("schema") != FRAMES_SCHEMA or not isinstance(doc.get("frames"), list):
        raise ValueError(f'{FRAMES_FILE}: expected {{"schema": "{FRAMES_SCHEMA}", "frames": [...]}}')
    frames: dict[str, tuple[float, bytes]] = {}
    for e in doc["frames"][:MAX_RAILS]:
        if not isinstance(e, dict):
            continue
        name, ts, hx = e.get("netdev"), e.get("ts"), e.get("hex")
        if (isinstance(name, str) and 0 < len(name) <= 15 and isinstance(ts, int | float) and not isinstance(ts, bool)
                and isinstance(hx, str) and len(hx) <= 2 * MAX_FRAME):
            try:
                frames[name] = (float(ts), bytes.fromhex(hx))
            except ValueError:
                continue
    since: dict[str, float] = {}
    raw_since = doc.get("since")
    for k, v in (list(raw_since.items())[:MAX_RAILS] if isinstance(raw_since, dict) else []):
        if isinstance(k, str) and 0 < len(k) <= 15 and isinstance(v, int | float) and not isinstance(v, bool):
            since[k] = float(v)
    return frames, since


# -- the read ------------------------------------------------------------------------------------


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decoded(frames: dict[str, tuple[float, bytes]], rails: list[str], notes: Notes) -> list[LldpNeighbor]:
    out = []
    for name in rails:
        if name not in frames:
            continue
        ts, data = frames[name]
        try:
            out.append(decode_frame(data, name, ts, "listen"))
        except LldpError as exc:
            notes.missing("lldp", f"{name}: the last LLDP frame ({_iso(ts)}) is not a well-formed LLDPDU: {exc}")
    return out


#: a one-shot read looks at what the listener heard this often while it waits
_POLL_S = 0.2


def _wait(lis: Any, rails: list[str], wait_s: float, progress: Callable[[int, int, float], None] | None) -> None:
    """Listen up to ``wait_s`` seconds, ending once every rail has a well-formed frame or cannot be listened
    on (a one-shot process starts the listener with its read: without a wait it has heard nothing; lldpd
    sends every 30 s by default, so the doctor's default window is one interval and a second)."""
    deadline = time.monotonic() + wait_s
    good: dict[str, float] = {}  # rail -> the time of its last frame that decoded
    while True:
        frames, failed = lis.frames(), lis.errors()
        for name in rails:
            f = frames.get(name)
            if f is not None and good.get(name) != f.ts:
                try:
                    decode_frame(f.data, name, f.ts)
                    good[name] = f.ts
                except LldpError:
                    good.pop(name, None)  # a refused frame: the next one may be well-formed
        left = [n for n in rails if n not in good and n not in failed]
        remaining = deadline - time.monotonic()
        if progress is not None:
            progress(len(good), len(rails), max(0.0, remaining))
        if not left or remaining <= 0:
            return
        time.sleep(min(_POLL_S, remaining))


def _listen(host: Host, rails: list[str], notes: Notes, wait_s: float = 0.0,
            progress: Callable[[int, int, float], None] | None = None) -> list[LldpNeighbor]:
    from agent.host.lldp import listener

    lis = listener()
    lis.watch(rails)
    if wait_s > 0 and rails:
        _wait(lis, rails, wait_s, progress)
    for name, why in sorted(lis.errors().items()):
        notes.missing("lldp", f"{name}: cannot listen for LLDP: {why}")
    frames = {k: (f.ts, f.data) for k, f in lis.frames().items() if k in rails}
    since = {k: v for k, v in lis.since().items() if k in rails}
    put = getattr(host, "put_file", None)
    if put is not None:  # a capture records the frames: a replay decodes the same neighbours
        put(FRAMES_FILE, encode_frames(frames, since))
    got = _decoded(frames, rails, notes)
    _none_seen(rails, frames, since, notes)
    return got


def _none_seen(rails: list[str], heard: Iterable[str], since: dict[str, float], notes: Notes,
               via: str | None = None) -> None:
    """A note per rail that heard nothing (a refused frame is named where it is refused, not here)."""
    heard = set(heard)
    for name in rails:
        if name in heard:
            continue
        if via:
            notes.missing("lldp", f"{name}: no LLDP neighbour ({via})")
        elif name in since:
            notes.missing("lldp", f"{name}: no LLDP neighbour seen since {_iso(since[name])}")


def _lldpd(host: Host, rails: list[str], timeout_s: float, notes: Notes, asked: bool) -> list[LldpNeighbor]:
    res = host.run(list(LLDPCLI_ARGV), timeout_s=timeout_s)
    if not res.ok:
        if res.available and res.rc:
            # lldpcli logs like lldpd, "2026-12-04T19:16:38 [WARN/control] unable to connect to socket ...": the
            # time would make two reads of one node differ (a replay against the live run)
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()
            last = _LOG_PREFIX.sub("", err[-1]) if err else ""
            notes.missing("lldp", f"{' '.join(LLDPCLI_ARGV)}: exit {res.rc}" + (f": {text(last)}" if last else ""))
        elif asked or res.available or not host.live:
            notes.command("lldp", res)  # an image that predates the source: "not recorded in this image"
        else:
            notes.missing("lldp", f"{res.why()}: lldpd is not on the node (--lldp listen reads the rails' frames itself)")
        return []
    doc, err = parse_json(res.text, "lldpcli show neighbors", res.truncated)
    if err:
        notes.missing("lldp", err)
        return []
    ref: float | None = time.time()
    if not host.live:
        manifest = host.image.manifest if host.image is not None else None
        ref = (manifest.time_of("ended_at") or manifest.time_of("started_at")) if manifest is not None else None
    try:
        got = list(parse_lldpcli(doc, rails, ref))
    except ValueError as exc:
        notes.missing("lldp", f"lldpcli show neighbors: {exc}")
        return []
    _none_seen(rails, (n.netdev for n in got), {}, notes, via="lldpd heard none")
    return got


def read_lldp(host: Host, rails: Iterable[str], mode: str | None = None, timeout_s: float = 10.0,
              notes: Notes | None = None, wait_s: float = 0.0,
              progress: Callable[[int, int, float], None] | None = None) -> tuple[LldpNeighbor, ...]:
    """The rails' neighbours by ``mode`` (``MODES``; None: lldpd when lldpcli answers, else none). A node
    image answers with the frames it recorded when it has them, else with its ``lldpcli`` record. A live
    listen waits up to ``wait_s`` for every rail's frame (``ReadConfig.lldp_wait_s``), calling ``progress``
    with (rails heard, rails, seconds left) as it does."""
    notes = notes if notes is not None else Notes()
    names = sorted(set(rails))[:MAX_RAILS]
    if mode == "off":
        return ()
    if not host.live:
        raw = host.image.file(FRAMES_FILE) if host.image is not None else None
        if raw is not None:
            try:
                frames, since = parse_frames_file(raw)
            except ValueError as exc:
                notes.missing("lldp", str(exc))
                return ()
            got = _decoded(frames, names, notes)
            _none_seen(names, frames, since, notes)
            return tuple(got)
        if mode == "listen":
            notes.missing("lldp", f"{FRAMES_FILE}: not in this image")
            return ()
    if mode == "listen":
        return tuple(_listen(host, names, notes, wait_s, progress))
    return tuple(_lldpd(host, names, timeout_s, notes, asked=mode == "lldpd"))


def read_lldp_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rails' LLDP neighbours (lldpcli, or the passive listener)."""
    mode = getattr(cfg, "lldp", None)
    got = read_lldp(host, ctx.rails, mode, cfg.command_timeout_s, notes, wait_s=cfg.lldp_wait_s,
                    progress=cfg.lldp_progress)
    return part("lldp", notes, fields={"lldp": got})


SOURCE = Source("lldp", "the rails' LLDP neighbours: the leaf and port each rail is cabled to, its maximum frame size "
                "and PFC (lldpcli, or the passive listener of --lldp listen)",
                (("lldpcli",),), 30.0, 1.0, ("lldp",), read_lldp_part, order=130, needs=("rails",), optional=True)
