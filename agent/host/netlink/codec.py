"""The rtnetlink wire codec: requests, message walking and the decoding of one link message into the
``netlink/links.json`` schema (docs/design.md §2). The bulk dump (``dump.py``) and the link-event listener
(``link_events.py``) both decode with ``parse_link``.

Why not pyroute2 here: pyroute2 decodes every attribute of every link into Python objects, which
costs tens of times what ``ip link`` costs on a big node, and importing it costs more than a whole
``railscope doctor`` run. Measured with ``bench/bench_doctor.py`` on 2,051 veth links (2 shared
vCPUs), against ``ip -j -s -d link show`` in the same run: ``IPRoute().get_links()`` 27–62x, this
codec 0.6–2.6x; ``python -c "import pyroute2"`` alone takes ~1 s there. Only the attributes the
schema names are decoded. Messages of look-alike links (representors, veths) share one layout: after
the first, a single ``struct`` unpack checks every header of the next one at once (``_Layout``), so
the Python loop over ~40 rtattr headers per link runs only for a new shape. The differential test
(tests/unit/host/netlink/test_netlink_parse.py) holds it to pyroute2's decoding of the same bytes.

Kernel references: include/uapi/linux/if_link.h (IFLA_*), include/uapi/linux/rtnetlink.h,
include/uapi/linux/netlink.h; https://docs.kernel.org/userspace-api/netlink/intro.html
"""

from __future__ import annotations

import errno
import socket
import struct
from array import array
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["NetlinkError", "build_getlink", "error_code", "ifinfo_flags", "iter_messages", "parse_link"]

NETLINK_ROUTE = 0

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18

NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH

#: rtnetlink multicast group of link messages (RTMGRP_LINK, as a bind() group mask)
RTMGRP_LINK = 1
IFF_UP = 0x1

RTEXT_FILTER_VF = 1 << 0
RTEXT_FILTER_SKIP_STATS = 1 << 3

# include/uapi/linux/if_link.h
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_MASTER = 10
IFLA_OPERSTATE = 16
IFLA_LINKINFO = 18
IFLA_VFINFO_LIST = 22
IFLA_STATS64 = 23
IFLA_EXT_MASK = 29
IFLA_CARRIER = 33
IFLA_CARRIER_CHANGES = 35
IFLA_PHYS_SWITCH_ID = 36
IFLA_PHYS_PORT_NAME = 38
IFLA_CARRIER_UP_COUNT = 47
IFLA_CARRIER_DOWN_COUNT = 48
IFLA_PARENT_DEV_NAME = 56
IFLA_PARENT_DEV_BUS_NAME = 57

IFLA_INFO_KIND = 1

IFLA_VF_INFO = 1
IFLA_VF_MAC = 1
IFLA_VF_SPOOFCHK = 4
IFLA_VF_LINK_STATE = 5
IFLA_VF_TRUST = 9

#: IF_OPER_* (RFC 2863) as ``ip link`` prints them.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
#: IFLA_VF_LINK_STATE_{AUTO,ENABLE,DISABLE} as ``ip link`` prints them (``link-state auto``).
VF_LINK_STATES = ("auto", "enable", "disable")

#: rtnl_link_stats64 starts with these eight u64, in this order.
STATS_KEYS_ORDER = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes",
                    "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
STATS_KEYS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
              "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_RTA = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_VF_U32X2 = struct.Struct("=II")
_STATS8 = struct.Struct("=8Q")
_NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED / NLA_F_NET_BYTEORDER

class NetlinkError(OSError):
    """The kernel refused a request, or the socket failed in a way a retry did not fix."""


def build_getlink(seq: int, ext_mask: int, ifname: str | None = None) -> bytes:
    """One RTM_GETLINK request: a dump when ``ifname`` is None, else a get of that link."""
    attrs = _rta(IFLA_EXT_MASK, _U32.pack(ext_mask))
    flags = NLM_F_REQUEST
    if ifname is None:
        flags |= NLM_F_DUMP
    else:
        attrs += _rta(IFLA_IFNAME, ifname.encode() + b"\0")
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + attrs
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETLINK, flags, seq, 0) + body


def _rta(kind: int, payload: bytes) -> bytes:
    n = _RTA.size + len(payload)
    return _RTA.pack(n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def _cstr(buf: Any, start: int, end: int) -> str:
    raw = bytes(buf[start:end])
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw.decode("utf-8", "replace")


def _mac(raw: bytes) -> str:
    return raw.hex(":")


def _attrs(buf: Any, off: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, payload start, payload end) of each rtattr in ``buf[off:end]``.

    A truncated or malformed attribute ends the walk: what came before it is kept.
    """
    while off + 4 <= end:
        alen, atype = _RTA.unpack_from(buf, off)
        if alen < 4 or off + alen > end:
            return
        yield atype & _NLA_TYPE_MASK, off + 4, off + alen
        off += (alen + 3) & ~3


def _vfinfo(buf: Any, start: int, end: int, addr_len: int) -> list[dict[str, Any]]:
    vfs: list[dict[str, Any]] = []
    for kind, s, e in _attrs(buf, start, end):
        if kind != IFLA_VF_INFO:
            continue
        vf: dict[str, Any] = {"vf": None, "mac": None, "link_state": None, "spoofchk": None, "trust": None}
        for vk, vs, ve in _attrs(buf, s, e):
            if ve - vs < 8:
                continue
            if vk == IFLA_VF_MAC:
                # struct ifla_vf_mac {u32 vf; u8 mac[32];}: only the PF's address length is meaningful.
                vf["vf"] = _U32.unpack_from(buf, vs)[0]
                vf["mac"] = _mac(bytes(buf[vs + 4:min(ve, vs + 4 + addr_len)]))
            elif vk in (IFLA_VF_LINK_STATE, IFLA_VF_SPOOFCHK, IFLA_VF_TRUST):
                num, setting = _VF_U32X2.unpack_from(buf, vs)
                vf["vf"] = num
                if vk == IFLA_VF_LINK_STATE:
                    vf["link_state"] = VF_LINK_STATES[setting] if setting < len(VF_LINK_STATES) else str(setting)
                elif vk == IFLA_VF_SPOOFCHK:
                    # (u32)-1 means the driver cannot report it (rtnl_fill_vfinfo).
                    vf["spoofchk"] = None if setting == 0xFFFFFFFF else bool(setting)
                else:
                    vf["trust"] = None if setting == 0xFFFFFFFF else bool(setting)
        vfs.append(vf)
    return vfs


def _stats64(buf: Any, start: int, end: int) -> dict[str, int] | None:
    if end - start < _STATS8.size:
        return None
    vals = dict(zip(STATS_KEYS_ORDER, _STATS8.unpack_from(buf, start), strict=True))
    return {k: vals[k] for k in STATS_KEYS}


_WANTED = frozenset(
    k | flag
    for k in (IFLA_IFNAME, IFLA_OPERSTATE, IFLA_CARRIER, IFLA_MTU, IFLA_CARRIER_CHANGES, IFLA_CARRIER_UP_COUNT,
              IFLA_CARRIER_DOWN_COUNT, IFLA_ADDRESS, IFLA_PHYS_PORT_NAME, IFLA_PHYS_SWITCH_ID,
              IFLA_PARENT_DEV_NAME, IFLA_PARENT_DEV_BUS_NAME, IFLA_MASTER, IFLA_LINKINFO, IFLA_VFINFO_LIST,
              IFLA_STATS64)
    for flag in (0, 0x4000, 0x8000, 0xC000)
)


def _halfwords(buf: Any) -> array[int]:
    """``buf`` as native u16: rtattr headers are two u16 at 4-byte aligned offsets."""
    raw = bytes(buf)
    return array("H", raw if len(raw) % 2 == 0 else raw + b"\0")


def _u8(buf: Any, s: int, e: int) -> int:
    return buf[s]


def _u32(buf: Any, s: int, e: int) -> int:
    return _U32.unpack_from(buf, s)[0]


def _operstate(buf: Any, s: int, e: int) -> str:
    st = buf[s]
    return OPERSTATES[st] if st < len(OPERSTATES) else str(st)


def _address(buf: Any, s: int, e: int) -> str:
    return _mac(bytes(buf[s:e]))


def _hex(buf: Any, s: int, e: int) -> str:
    return bytes(buf[s:e]).hex()


def _info_kind(buf: Any, s: int, e: int) -> str | None:
    if e - s >= 4:
        # The kernel puts IFLA_INFO_KIND first (rtnl_link_info_fill): read it without a walk.
        alen, atype = _RTA.unpack_from(buf, s)
        if atype & _NLA_TYPE_MASK == IFLA_INFO_KIND and 4 <= alen <= e - s:
            return _cstr(buf, s + 4, s + alen)
    kind = None
    for ik, iis, iie in _attrs(buf, s, e):
        if ik == IFLA_INFO_KIND:
            kind = _cstr(buf, iis, iie)
    return kind


#: attribute -> (record key, decoder, smallest payload it needs)
_DECODERS: dict[int, tuple[str, Callable[[Any, int, int], Any], int]] = {
    IFLA_IFNAME: ("ifname", _cstr, 0),
    IFLA_OPERSTATE: ("operstate", _operstate, 1),
    IFLA_CARRIER: ("carrier", _u8, 1),
    IFLA_MTU: ("mtu", _u32, 4),
    IFLA_CARRIER_CHANGES: ("carrier_changes", _u32, 4),
    IFLA_CARRIER_UP_COUNT: ("carrier_up_count", _u32, 4),
    IFLA_CARRIER_DOWN_COUNT: ("carrier_down_count", _u32, 4),
    IFLA_ADDRESS: ("address", _address, 1),
    IFLA_PHYS_PORT_NAME: ("phys_port_name", _cstr, 0),
    IFLA_PHYS_SWITCH_ID: ("phys_switch_id", _hex, 1),
    IFLA_PARENT_DEV_NAME: ("parent_dev", _cstr, 0),
    IFLA_PARENT_DEV_BUS_NAME: ("parent_bus", _cstr, 0),
    IFLA_MASTER: ("master", _u32, 4),
    IFLA_LINKINFO: ("kind", _info_kind, 0),
}

_EMPTY_LINK: dict[str, Any] = {
    "ifindex": None, "ifname": None, "operstate": None, "carrier": None, "carrier_changes": None,
    "carrier_up_count": None, "carrier_down_count": None, "mtu": None, "address": None,
    "phys_port_name": None, "phys_switch_id": None, "parent_bus": None, "parent_dev": None,
    "master": None, "kind": None, "stats64": None, "vfinfo": None,
}


class _Layout:
    """Where the rtattr headers of one message sat, to recognise the next message shaped the same.

    On a big node most links are representors (or veths) whose messages differ only in payload
    bytes: the same attributes, with the same lengths, in the same order. ``headers`` unpacks every
    (len, type) header of such a message in one C call; when it returns ``expect``, a walk over this
    message would visit exactly these headers (the walk is a function of the header values and the
    message length alone), so the wanted attributes sit where ``slots`` says and no loop over the
    headers runs in Python.
    """

    __slots__ = ("expect", "headers", "slots", "stats", "vfs")

    def __init__(self, walked: list[tuple[int, int, int]]) -> None:
        fmt, cur, expect = ["="], 0, []
        slots = []
        self.stats: tuple[int, int] | None = None
        self.vfs: tuple[int, int] | None = None
        for rel, alen, raw in walked:
            if rel > cur:
                fmt.append(f"{rel - cur}x")
            fmt.append("HH")
            cur = rel + 4
            expect += (alen, raw)
            if raw not in _WANTED:
                continue
            kind, s, e = raw & _NLA_TYPE_MASK, rel + 4, rel + alen
            if kind == IFLA_VFINFO_LIST:
                self.vfs = (s, e)
            elif kind == IFLA_STATS64:
                self.stats = (s, e)
            else:
                key, fn, need = _DECODERS[kind]
                if e - s >= need:
                    slots.append((key, fn, s, e))
        self.headers = struct.Struct("".join(fmt))
        self.expect = tuple(expect)
        self.slots = tuple(slots)


#: payload length -> layouts seen with that length (a few kinds of link on any one node).
LayoutCache = dict[int, list[_Layout]]
_MAX_LAYOUTS = 256
_MAX_LAYOUTS_PER_LENGTH = 4


def _walk(h: array[int], start: int, end: int) -> tuple[list[tuple[int, int, int]], bool]:
    """Every rtattr header after the ifinfomsg: (offset from ``start``, len, raw type).

    The flag is False when a malformed or truncated attribute ended the walk early (a wanted
    attribute running past the end; a length under 4). The walk hops over the u16 view only: it
    runs ~40 times per link, 2,000+ links on a big node.
    """
    out: list[tuple[int, int, int]] = []
    wanted = _WANTED
    p = (start + _IFINFOMSG.size) >> 1
    last = (end >> 1) - 2
    base = start >> 1
    while p <= last:
        alen = h[p]
        if alen < 4:
            return out, False
        raw = h[p + 1]
        if raw in wanted and 2 * p + alen > end:
            return out, False
        out.append((2 * (p - base), alen, raw))
        p += (alen + 3) >> 2 << 1
    return out, True


def parse_link(buf: Any, start: int, end: int, with_stats: bool = False,
               cache: LayoutCache | None = None) -> dict[str, Any] | None:
    """One RTM_NEWLINK payload (``struct ifinfomsg`` + rtattrs) -> a link record.

    ``master`` holds the master's *ifindex* here; ``parse_dump`` turns it into the name.
    ``stats64`` stays None unless ``with_stats``. None when the payload cannot hold an ifinfomsg.
    A truncated or malformed attribute ends the walk: what came before it is kept.
    ``cache`` keeps the layouts seen so far (see ``_Layout``) across the messages of a dump.
    """
    size = end - start
    if size < _IFINFOMSG.size or start % 4:
        return None
    layout: _Layout | None = None
    if cache is not None:
        for lay in cache.get(size, ()):
            if lay.headers.unpack_from(buf, start) == lay.expect:
                layout = lay
                break
    if layout is None:
        walked, complete = _walk(_halfwords(buf[start:end]), 0, size)
        layout = _Layout(walked)
        if cache is not None and complete and len(cache) < _MAX_LAYOUTS:
            known = cache.setdefault(size, [])
            if len(known) < _MAX_LAYOUTS_PER_LENGTH:
                known.append(layout)
    link = _EMPTY_LINK.copy()
    link["ifindex"] = _IFINFOMSG.unpack_from(buf, start)[2]
    for key, fn, rs, re_ in layout.slots:
        link[key] = fn(buf, start + rs, start + re_)
    if with_stats and layout.stats is not None:
        link["stats64"] = _stats64(buf, start + layout.stats[0], start + layout.stats[1])
    if layout.vfs is not None:
        # A VF MAC is as long as the PF's own address (IFLA_ADDRESS), whatever the struct holds.
        addr_len = len(link["address"]) // 3 + 1 if link["address"] else 6
        link["vfinfo"] = _vfinfo(buf, start + layout.vfs[0], start + layout.vfs[1], addr_len)
    return link


def iter_messages(buf: Any, n: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(type, flags, seq, payload start, payload end) of each nlmsghdr in ``buf[:n]``."""
    off = 0
    while off + _NLMSGHDR.size <= n:
        mlen, mtype, mflags, mseq, _pid = _NLMSGHDR.unpack_from(buf, off)
        if mlen < _NLMSGHDR.size or off + mlen > n:
            return
        yield mtype, mflags, mseq, off + _NLMSGHDR.size, off + mlen
        off += (mlen + 3) & ~3


def error_code(buf: Any, s: int, e: int) -> int:
    """NLMSG_ERROR's ``error`` (a negative errno, 0 for an ACK)."""
    return struct.unpack_from("=i", buf, s)[0] if e - s >= 4 else -errno.EPROTO


def ifinfo_flags(buf: Any, start: int) -> int:
    """``ifi_flags`` of the ``struct ifinfomsg`` at ``start`` (IFF_UP ...)."""
    return _IFINFOMSG.unpack_from(buf, start)[3]
