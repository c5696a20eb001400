"""The rail against the switch port it is cabled to (its LLDP neighbour): PfcPeerMismatch, RailPeerMismatch,
and MtuMismatch where the rail's MTU exceeds the peer's maximum frame size (docs/design.md §4).

A rail with no LLDP neighbour is not judged here: no frame is a state ("not available"), never a fault.
The peer's PFC is what its IEEE 802.1Qaz PFC TLV says; a peer that sends none is not judged (not "PFC
off"). The rail's PFC on the lossless priority is as ``PfcDisabled`` reads it: its per-priority pause
counters exist (mlx5 ``counters.rst``); a rail whose counters were not read is compared on the peer's side
alone.
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, Inputs, finding, rail_label
from agent.analysis.topology import Rail
from agent.config import Expectations, node_named
from agent.findings import Finding
from agent.model import LldpNeighbor, Snapshot

__all__ = ["CHECKS", "ETH_OVERHEAD", "VLAN_OVERHEAD", "cabled_to", "check"]

#: IEEE 802.3 maximum frame size counts the Ethernet header (14) and FCS (4); an 802.1Q tag adds 4
ETH_OVERHEAD = 18
VLAN_OVERHEAD = 22


def _prios(p: tuple[int, ...]) -> str:
    return ",".join(str(x) for x in p) if p else "none"


def _peer(n: LldpNeighbor) -> str:
    return f"{n.leaf or '?'}:{n.port or '?'}"


def _rail_pfc(snap: Snapshot, netdev: str, prio: int) -> bool | None:
    stats = snap.ethtool_of(netdev)
    if stats is None:
        return None
    c = stats.as_dict()
    return f"rx_prio{prio}_pause" in c or f"tx_prio{prio}_pause" in c


def _pfc(snap: Snapshot, r: Rail, n: LldpNeighbor, exp: Expectations) -> list[Finding]:
    if n.pfc is None or r.netdev is None:
        return []
    p = exp.lossless_prio
    rail_on = _rail_pfc(snap, r.netdev.ifname, p)
    peer_on = p in n.pfc
    others = tuple(x for x in n.pfc if x != p)
    if not others and (peer_on if rail_on is None else rail_on == peer_on):
        return []
    name = r.netdev.ifname
    if others:
        why = f"the leaf {_peer(n)} has PFC on priority {_prios(n.pfc)}, the rail's lossless priority is {p}"
    elif rail_on is False:
        why = f"the leaf {_peer(n)} has PFC on priority {p}, the rail has no PFC on it"
    else:
        why = f"the leaf {_peer(n)} has PFC off on priority {p} (PFC on {_prios(n.pfc)})" + (
            ", the rail has it on" if rail_on else "")
    return [finding("PfcPeerMismatch", r.expected_netdev, f"rail {rail_label(r.rail, r.plane)}: {name}: {why}",
                    netdev=name, prio=p, peer_pfc=list(n.pfc), rail_pfc=rail_on, peer_system=n.leaf,
                    peer_port=n.port, peer_willing=n.pfc_willing)]


def _vlan_tagged(snap: Snapshot, netdev: str) -> bool:
    """A VLAN netdev on the rail (``<rail>.<id>``): its frames carry an 802.1Q tag."""
    return any(ln.kind == "vlan" and ln.ifname.startswith(netdev + ".") for ln in snap.links)


def _mtu(snap: Snapshot, r: Rail, n: LldpNeighbor) -> list[Finding]:
    if n.mfs is None or r.netdev is None or r.netdev.mtu is None:
        return []
    overhead = VLAN_OVERHEAD if _vlan_tagged(snap, r.netdev.ifname) else ETH_OVERHEAD
    most = n.mfs - overhead
    if r.netdev.mtu <= most:
        return []
    return [finding("MtuMismatch", r.expected_netdev,
                    f"rail {rail_label(r.rail, r.plane)}: {r.netdev.ifname} has MTU {r.netdev.mtu}, more than its "
                    f"peer {_peer(n)} takes (maximum frame size {n.mfs} less {overhead} bytes: {most})",
                    netdev=r.netdev.ifname, mtu=r.netdev.mtu, peer_mfs=n.mfs, expected=most,
                    by="LLDP peer maximum frame size", peer_system=n.leaf, peer_port=n.port)]


def _same(a: str | None, b: str) -> bool:
    return a is not None and a.strip().lower() == b.strip().lower()


def cabled_to(exp: Expectations, node: str | None, r: Rail) -> tuple[str, str] | None:
    """The (leaf, port) ``--cabling`` names for the rail of this node, or None. A row's node is the node name
    or its short name; its rail the rail number (``3``, ``3/1`` with a plane) or the expected netdev name."""
    if not exp.cabling or node is None:
        return None
    rail_words = {str(r.rail), r.expected_netdev} if r.plane is None else {f"{r.rail}/{r.plane}", r.expected_netdev}
    for row_node, rail, leaf, port in exp.cabling:
        if node_named(row_node, (node,)) and rail in rail_words:
            return leaf, port
    return None


def _cabling(snap: Snapshot, r: Rail, n: LldpNeighbor, exp: Expectations) -> list[Finding]:
    want = cabled_to(exp, snap.node, r)
    if want is None:
        return []
    leaf, port = want
    leaf_ok = _same(n.system, leaf) or _same(n.chassis_id, leaf)
    port_ok = _same(n.port_id, port) or _same(n.port_descr, port)
    if leaf_ok and port_ok:
        return []
    name = r.netdev.ifname if r.netdev else r.expected_netdev
    return [finding("RailPeerMismatch", r.expected_netdev,
                    f"rail {rail_label(r.rail, r.plane)}: {name} is cabled to {_peer(n)}, the cabling map says "
                    f"{leaf}:{port}", netdev=name, peer_system=n.leaf, peer_port=n.port, cabling_leaf=leaf,
                    cabling_port=port)]


def check(snap: Snapshot, rails: tuple[Rail, ...], exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    for r in rails:
        n = snap.neighbor_of(r.netdev_name)
        if n is None:
            continue
        out += _pfc(snap, r, n, exp) + _mtu(snap, r, n) + _cabling(snap, r, n, exp)
    return out


def _run(i: Inputs) -> list[Finding]:
    return check(i.snap, i.topo.rails, i.exp)


CHECKS = (Check(85, ("PfcPeerMismatch", "RailPeerMismatch", "MtuMismatch"), _run),)
