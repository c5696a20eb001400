"""The live host's netlink and ethtool doors against a real kernel, inside a network namespace."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from agent.host.ethtool import format_drvinfo, format_gstats
from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

DUMP = """
import json
from agent.host.live import LiveHost
with LiveHost() as host:
    print(json.dumps({"links": host.links(), "stats": host.link_stats(["net_rail0", "net_rail1", "gone0"])}))
"""

ETHTOOL = """
import json
from agent.host.ethtool import drvinfo, gstats
print(json.dumps({"stats": gstats("net_rail0"), "info": drvinfo("net_rail0"),
                  "lo": gstats("lo"), "none": [gstats("nosuchdev0"), drvinfo("nosuchdev0")]}))
"""


def by_name(links: list[dict]) -> dict[str, dict]:
    return {lk["ifname"]: lk for lk in links}


def test_links_match_ip_and_follow_the_peer(rails: RailNetns) -> None:
    rails.set_peer(1, "down")
    got = rails.python(DUMP)
    links = by_name(got["links"])
    r0, r1 = links["net_rail0"], links["net_rail1"]
    assert (r0["operstate"], r0["carrier"], r0["mtu"], r0["kind"]) == ("UP", 1, 9000, "veth")
    # The peer is down: the rail is admin up but has no carrier, as with a pulled cable.
    assert (r1["carrier"], r1["mtu"], r1["kind"]) == (0, 9000, "veth")
    assert r1["operstate"] in ("DOWN", "LOWERLAYERDOWN")
    assert r1["carrier_down_count"] >= 1 and r1["carrier_changes"] >= 2
    assert all(lk["stats64"] is None for lk in got["links"])  # the bulk dump carries no statistics
    assert r0["vfinfo"] is None and r0["phys_switch_id"] is None and r0["master"] is None

    # Every link and every field iproute2 also shows agrees with `ip -j -d link show`.
    ip = json.loads(rails.exec(["ip", "-j", "-d", "link", "show"], check=True).stdout)
    assert sorted(lk["ifname"] for lk in ip) == sorted(links)
    for ref in ip:
        lk = links[ref["ifname"]]
        assert lk["ifindex"] == ref["ifindex"]
        assert lk["operstate"] == ref["operstate"]
        assert lk["mtu"] == ref["mtu"]
        assert lk["address"] == ref["address"]
        assert lk["kind"] == ref.get("linkinfo", {}).get("info_kind")
        assert lk["carrier"] == (1 if "LOWER_UP" in ref["flags"] else 0)

    stats = got["stats"]
    assert set(stats) == {"net_rail0", "net_rail1"}  # a name that does not exist is left out
    assert set(stats["net_rail0"]) == {"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors",
                                       "tx_errors", "rx_dropped", "tx_dropped"}


def test_link_stats_count_real_packets(rails: RailNetns) -> None:
    before = rails.python(DUMP)["stats"]["net_rail0"]
    rails.send_udp(0, 40)
    after = rails.python(DUMP)["stats"]["net_rail0"]
    assert after["rx_packets"] - before["rx_packets"] >= 40
    assert after["rx_bytes"] - before["rx_bytes"] >= 40 * 64
    ref = json.loads(rails.exec(["ip", "-j", "-s", "link", "show", "net_rail0"], check=True).stdout)[0]
    assert ref["stats64"]["rx"]["packets"] >= after["rx_packets"]


def test_ethtool_ioctls_read_real_veth_counters(rails: RailNetns) -> None:
    # veth counts received packets per queue only on its NAPI path: GRO on the receiver, and no TSO
    # on the sender (drivers/net/veth.c, veth_skb_is_eligible_for_gro).
    rails.exec(["ethtool", "-K", "net_rail0", "gro", "on"], check=True)
    rails.exec(["ethtool", "-K", "peer0", "tso", "off"], ns=rails.switch, check=True)
    first = rails.python(ETHTOOL)
    stats = dict(first["stats"])
    peer_index = json.loads(rails.exec(["ip", "-j", "link", "show", "peer0"], ns=rails.switch,
                                       check=True).stdout)[0]["ifindex"]
    assert stats["peer_ifindex"] == peer_index
    assert "rx_queue_0_xdp_packets" in stats
    assert first["info"]["driver"] == "veth" and first["info"]["supports_statistics"] == "yes"
    assert first["lo"] is None and first["none"] == [None, None]

    # A recorded host replays these as ethtool(8) text: what the recorder writes must be what
    # ethtool prints, byte for byte but the values (IPv6 neighbour discovery may move a counter).
    def shape(text: str) -> str:
        return re.sub(r": [0-9]+$", ": N", text, flags=re.M)

    assert shape(format_gstats([tuple(p) for p in first["stats"]])) == \
        shape(rails.exec(["ethtool", "-S", "net_rail0"], check=True).stdout)
    assert format_drvinfo(first["info"]) == rails.exec(["ethtool", "-i", "net_rail0"], check=True).stdout

    rails.send_udp(0, 50)
    later = dict(rails.python(ETHTOOL)["stats"])
    assert later["rx_queue_0_xdp_packets"] - stats["rx_queue_0_xdp_packets"] >= 50
    assert later["rx_queue_0_xdp_bytes"] > stats["rx_queue_0_xdp_bytes"]


CHURN_DUMPS = """
import json
from agent.host.netlink.dump import LinkReader
seen, interrupted = [], 0
with LinkReader() as reader:
    for _ in range(25):
        links = reader.dump()
        interrupted += reader.last_dump_interrupted
        idx = [lk["ifindex"] for lk in links]
        assert len(idx) == len(set(idx)), "an ifindex listed twice"
        seen.append(sorted(lk["ifname"] for lk in links if lk["ifname"].startswith("net_rail")))
        assert reader.stats(["net_rail0"])["net_rail0"]["rx_errors"] == 0
print(json.dumps({"rails": seen, "interrupted": interrupted}))
"""


def test_dump_while_links_come_and_go(rails: RailNetns) -> None:
    # Another process adds and deletes veth pairs as fast as it can while the dumps run (the
    # SR-IOV daemon creating VFs does the same): every dump must still be whole and consistent.
    batch = "".join(f"link add churn{i} type veth peer name churnp{i}\nlink del churn{i}\n" for i in range(400))
    churn = subprocess.Popen(["ip", "-n", rails.node, "-force", "-batch", "-"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        assert churn.stdin is not None
        churn.stdin.write(batch * 2)
        churn.stdin.close()
        got = rails.python(CHURN_DUMPS)
    finally:
        churn.kill()
        churn.wait()
    assert all(names == ["net_rail0", "net_rail1"] for names in got["rails"]), got


AGAINST_PYROUTE2 = """
import json
from pyroute2 import IPRoute
from agent.host.netlink.dump import LinkReader
with LinkReader() as reader:
    ours = reader.dump()
with IPRoute() as ipr:
    ref = ipr.get_links()
def info_kind(msg):
    info = msg.get_attr("IFLA_LINKINFO")
    return info.get_attr("IFLA_INFO_KIND") if info is not None else None
names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ref}
theirs = [{
    "ifindex": m["index"], "ifname": m.get_attr("IFLA_IFNAME"), "operstate": m.get_attr("IFLA_OPERSTATE"),
    "carrier": m.get_attr("IFLA_CARRIER"), "carrier_changes": m.get_attr("IFLA_CARRIER_CHANGES"),
    "carrier_up_count": m.get_attr("IFLA_CARRIER_UP_COUNT"),
    "carrier_down_count": m.get_attr("IFLA_CARRIER_DOWN_COUNT"), "mtu": m.get_attr("IFLA_MTU"),
    "address": m.get_attr("IFLA_ADDRESS"), "phys_port_name": m.get_attr("IFLA_PHYS_PORT_NAME"),
    "parent_bus": m.get_attr("IFLA_PARENT_DEV_BUS_NAME"), "parent_dev": m.get_attr("IFLA_PARENT_DEV_NAME"),
    "master": names.get(m.get_attr("IFLA_MASTER")), "kind": info_kind(m),
} for m in ref]
print(json.dumps({"ours": ours, "theirs": theirs}))
"""


def test_links_agree_with_pyroute2(rails: RailNetns) -> None:
    # A bridge with a veth enslaved, so that master and kinds other than veth are compared too.
    rails.exec(["ip", "link", "add", "br-test", "type", "bridge"], check=True)
    rails.exec(["ip", "link", "add", "vx0", "type", "veth", "peer", "name", "vx1"], check=True)
    rails.exec(["ip", "link", "set", "vx0", "master", "br-test"], check=True)
    rails.set_peer(1, "down")
    got = rails.python(AGAINST_PYROUTE2)
    theirs = {lk["ifname"]: lk for lk in got["theirs"]}
    assert {lk["ifname"] for lk in got["ours"]} == set(theirs)
    for lk in got["ours"]:
        assert {k: v for k, v in lk.items() if k in theirs[lk["ifname"]]} == theirs[lk["ifname"]]
    ours = {lk["ifname"]: lk for lk in got["ours"]}
    assert (ours["vx0"]["master"], ours["br-test"]["kind"], ours["vx1"]["master"]) == ("br-test", "bridge", None)


EVENTS_AGAINST_PYROUTE2 = """
import json, socket, subprocess
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from agent.host.netlink.codec import RTM_DELLINK, RTM_NEWLINK, RTMGRP_LINK, iter_messages
from agent.host.netlink.link_events import LinkWatcher
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
sock.bind((0, RTMGRP_LINK))
for argv in (["ip", "link", "add", "ev0", "type", "veth", "peer", "name", "ev1"], ["ip", "link", "set", "ev0", "up"],
             ["ip", "link", "set", "ev1", "up"], ["ip", "link", "set", "ev1", "down"], ["ip", "link", "del", "ev0"]):
    subprocess.run(argv, check=True)
sock.settimeout(0.5)
grams = []
try:
    while True:
        grams.append(sock.recv(1 << 16))
except TimeoutError:
    pass
notes = []
class Sink:
    def put(self, key, item):
        notes.append(item)
        return False
watcher = LinkWatcher(Sink(), lambda: None)
theirs = []
for g in grams:
    watcher._feed(bytearray(g), len(g))  # the listener's own decoding of each datagram
    for mtype, _f, _s, start, end in iter_messages(g, len(g)):
        if mtype not in (RTM_NEWLINK, RTM_DELLINK):
            continue
        m = ifinfmsg(g[start - 16:end])
        m.decode()
        theirs.append({"deleted": mtype == RTM_DELLINK, "ifindex": m["index"], "ifname": m.get_attr("IFLA_IFNAME"),
                       "operstate": m.get_attr("IFLA_OPERSTATE"), "carrier": m.get_attr("IFLA_CARRIER"),
                       "carrier_down_count": m.get_attr("IFLA_CARRIER_DOWN_COUNT"),
                       "phys_port_name": m.get_attr("IFLA_PHYS_PORT_NAME"),
                       "phys_switch_id": m.get_attr("IFLA_PHYS_SWITCH_ID"),
                       "parent_dev": m.get_attr("IFLA_PARENT_DEV_NAME"), "admin_up": bool(m["flags"] & 1)})
keys = ("deleted", "ifindex", "ifname", "operstate", "carrier", "carrier_down_count", "phys_port_name",
        "phys_switch_id", "parent_dev", "admin_up")
print(json.dumps({"ours": [{k: getattr(n, k) for k in keys} for n in notes], "theirs": theirs}))
"""


def test_link_event_messages_agree_with_pyroute2(rails: RailNetns) -> None:
    # The real kernel's multicast link messages (a veth pair created, brought up, its carrier lost,
    # deleted), each datagram decoded by the link-event listener and by pyroute2's ifinfmsg.
    got = rails.python(EVENTS_AGAINST_PYROUTE2)
    assert len(got["ours"]) >= 6 and any(n["deleted"] for n in got["ours"])
    assert {n["ifname"] for n in got["ours"]} >= {"ev0", "ev1"}
    assert got["ours"] == got["theirs"]


GENL_EVENTS = """
import json, subprocess, threading
from pyroute2.netlink import genlmsg
from agent.host.netlink.devlink_events import DevlinkWatcher
got = threading.Event()
watcher = DevlinkWatcher(got.set, msg_class=lambda: genlmsg, family="ethtool", group="monitor")
watcher.start()
subscribed = watcher.subscribed
subprocess.run(["ip", "link", "add", "gen0", "type", "veth", "peer", "name", "gen1"], check=True)
subprocess.run(["ethtool", "-K", "gen0", "tso", "off"], check=True)
event = got.wait(5)
watcher.stop()
print(json.dumps({"subscribed": subscribed, "event": event, "events": watcher.events, "error": watcher.error,
                  "alive": watcher.alive}))
"""


def test_the_genl_listener_hears_a_real_kernel_notification(rails: RailNetns) -> None:
    # The devlink listener's machinery (pyroute2 family and group resolution, the membership, the
    # select/get loop in its own thread) on a generic-netlink family this kernel has: ethtool's
    # "monitor" group announces a feature change. devlink's own is the kernel lab's (netdevsim).
    got = rails.python(GENL_EVENTS)
    assert got["subscribed"] and got["error"] is None, got
    assert got["event"] and got["events"] >= 1, got
    assert not got["alive"]
