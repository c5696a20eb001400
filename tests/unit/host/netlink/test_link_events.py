"""The link watcher's decoding of rtnetlink notifications, on messages built byte by byte.

Layouts from include/uapi/linux/netlink.h (nlmsghdr), rtnetlink.h (ifinfomsg) and if_link.h (IFLA_*).
"""

from __future__ import annotations

import struct

from agent.host.netlink.link_events import LinkNote, LinkWatcher
from agent.service.coalesce import CoalescingQueue

RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_CARRIER, IFLA_CARRIER_DOWN_COUNT, IFLA_PHYS_PORT_NAME = 3, 16, 33, 48, 38
IFF_UP = 1


def rta(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def link_msg(mtype: int, ifindex: int, name: str, *, up: bool, carrier: int, downs: int,
             operstate: int, port: str | None = None) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, ifindex, IFF_UP if up else 0, 0)
    body += rta(IFLA_IFNAME, name.encode() + b"\0")
    body += rta(IFLA_OPERSTATE, bytes([operstate]))
    body += rta(IFLA_CARRIER, bytes([carrier]))
    body += rta(IFLA_CARRIER_DOWN_COUNT, struct.pack("=I", downs))
    if port:
        body += rta(IFLA_PHYS_PORT_NAME, port.encode() + b"\0")
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, 0, 0) + body


def test_notes_carry_carrier_losses_admin_state_and_coalesce_per_link() -> None:
    q: CoalescingQueue[LinkNote] = CoalescingQueue(16)
    wakes = []
    w = LinkWatcher(q, lambda: wakes.append(1), clock=lambda: 1000.0)
    buf = bytearray(
        link_msg(RTM_NEWLINK, 7, "net_rail0", up=True, carrier=0, downs=4, operstate=2)
        + link_msg(RTM_NEWLINK, 7, "net_rail0", up=True, carrier=1, downs=4, operstate=6)
        + link_msg(RTM_NEWLINK, 9, "eth3", up=False, carrier=0, downs=0, operstate=2, port="pf0vf3")
        + link_msg(RTM_DELLINK, 11, "gone0", up=False, carrier=0, downs=1, operstate=2)
        + struct.pack("=IHHII", 16, 3, 0, 0, 0)  # NLMSG_DONE: not a link message
    )
    w._feed(buf, len(buf))
    notes = {n.ifindex: n for n in q.drain()}
    assert w.messages == 4 and q.coalesced == 1 and len(wakes) == 1
    rail = notes[7]
    assert (rail.ifname, rail.carrier, rail.carrier_down_count, rail.operstate, rail.admin_up, rail.ts) == \
        ("net_rail0", 1, 4, "UP", True, 1000.0)
    assert (notes[9].admin_up, notes[9].phys_port_name) == (False, "pf0vf3")
    assert notes[11].deleted and notes[11].ifname == "gone0"


def test_a_truncated_message_is_skipped_not_fatal() -> None:
    q: CoalescingQueue[LinkNote] = CoalescingQueue(4)
    w = LinkWatcher(q, lambda: None)
    whole = link_msg(RTM_NEWLINK, 3, "net_rail1", up=True, carrier=1, downs=0, operstate=6)
    buf = bytearray(whole[:-6])
    w._feed(buf, len(buf))
    assert q.drain() == []


def test_a_note_carries_every_carrier_counter_of_its_message() -> None:
    """The daemon updates a known link's record from its message alone: all three counters."""
    IFLA_CARRIER_CHANGES, IFLA_CARRIER_UP_COUNT = 35, 47  # include/uapi/linux/if_link.h
    q: CoalescingQueue[LinkNote] = CoalescingQueue(4)
    w = LinkWatcher(q, lambda: None, clock=lambda: 5.0)
    msg = link_msg(RTM_NEWLINK, 4, "net_rail0", up=True, carrier=0, downs=5, operstate=3)
    extra = rta(IFLA_CARRIER_CHANGES, struct.pack("=I", 9)) + rta(IFLA_CARRIER_UP_COUNT, struct.pack("=I", 4))
    length = struct.unpack_from("=I", msg)[0] + len(extra)
    buf = bytearray(struct.pack("=I", length) + msg[4:] + extra)
    w._feed(buf, len(buf))
    (note,) = q.drain()
    assert (note.carrier, note.operstate, note.carrier_changes, note.carrier_up_count, note.carrier_down_count) == \
        (0, "LOWERLAYERDOWN", 9, 4, 5)
