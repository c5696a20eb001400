"""fabric: the rail against its LLDP peer (PfcPeerMismatch, RailPeerMismatch, MtuMismatch from the peer's MFS)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

from agent.analysis.checks.fabric import check
from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.host.recorded import RecordedHost
from agent.model import Link, LldpNeighbor, Snapshot
from agent.readers.snapshot import take_snapshot

IMAGES = Path(__file__).resolve().parents[3] / "images"


@cache
def _base() -> Snapshot:
    return take_snapshot(RecordedHost(IMAGES / "spectrumx-2rail-healthy"))


def _peer(netdev: str = "net_rail1", **kw: object) -> LldpNeighbor:
    base = dict(netdev=netdev, via="listen", system="leaf-02", port_id="swp2", port_id_type="ifname", mfs=9216,
                pfc=(3,), chassis_id="1c:34:da:5a:10:00")
    base.update(kw)
    return LldpNeighbor(**base)  # type: ignore[arg-type]


def _run(*peers: LldpNeighbor, exp: Expectations | None = None, snap: Snapshot | None = None) -> list[tuple[str, str]]:
    s = replace(snap or _base(), lldp=peers)
    e = exp or Expectations()
    return [(f.code, f.subject) for f in check(s, build_topology(s, e).rails, e)]


def _no_pfc_counters(netdev: str) -> Snapshot:
    snap = _base()
    st = [replace(x, counters=tuple((k, v) for k, v in x.counters if "prio3_pause" not in k))
          if x.netdev == netdev else x for x in snap.ethtool]
    return replace(snap, ethtool=tuple(st))


def test_pfc_on_the_lossless_priority_on_both_ends_is_quiet() -> None:
    assert _run(_peer()) == []
    assert _run(_peer(pfc=None)) == []  # the peer sends no PFC TLV: not judged


def test_pfc_on_another_priority_or_off_at_the_leaf() -> None:
    assert _run(_peer(pfc=(4,))) == [("PfcPeerMismatch", "net_rail1")]
    assert _run(_peer(pfc=(3, 4))) == [("PfcPeerMismatch", "net_rail1")]
    assert _run(_peer(pfc=())) == [("PfcPeerMismatch", "net_rail1")]
    # --lossless-prio 4 against a leaf with PFC on 4 and a rail without prio 4 counters: the rail is off
    assert _run(_peer(pfc=(4,)), exp=Expectations(lossless_prio=4)) == [("PfcPeerMismatch", "net_rail1")]


def test_the_reverse_the_leaf_has_pfc_the_rail_has_none() -> None:
    snap = _no_pfc_counters("net_rail1")
    assert _run(_peer(), snap=snap) == [("PfcPeerMismatch", "net_rail1")]
    assert _run(_peer(pfc=()), snap=snap) == []  # both off: PfcDisabled says the rail's part


def test_mtu_above_the_peers_maximum_frame_size() -> None:
    assert _run(_peer(mfs=9018)) == []  # 9000 + 18
    assert _run(_peer(mfs=9017)) == [("MtuMismatch", "net_rail1")]
    # a VLAN netdev on the rail: its frames carry a tag, 22 bytes
    snap = _base()
    vlan = Link(ifindex=999, ifname="net_rail1.100", kind="vlan", mtu=9000)
    snap = replace(snap, links=(*snap.links, vlan))
    assert _run(_peer(mfs=9018), snap=snap) == [("MtuMismatch", "net_rail1")]
    assert _run(_peer(mfs=9022), snap=snap) == []


def test_cabling_map_against_the_neighbour() -> None:
    rows = (("gpu-node-017", "1", "leaf-02", "swp2"),)
    assert _run(_peer(), exp=Expectations(cabling=rows)) == []
    assert _run(_peer(system="leaf-03"), exp=Expectations(cabling=rows)) == [("RailPeerMismatch", "net_rail1")]
    assert _run(_peer(port_id="swp9"), exp=Expectations(cabling=rows)) == [("RailPeerMismatch", "net_rail1")]
    # by netdev name, the node's FQDN, the chassis ID or the port description; another node's rows do not count
    by_name = (("gpu-node-017.example.net", "net_rail1", "1C:34:DA:5A:10:00", "Eth1/2"),)
    assert _run(_peer(port_descr="Eth1/2"), exp=Expectations(cabling=by_name)) == []
    other = (("gpu-node-018", "1", "leaf-09", "swp1"),)
    assert _run(_peer(), exp=Expectations(cabling=other)) == []


def test_no_neighbour_is_never_a_finding() -> None:
    rows = (("gpu-node-017", "1", "leaf-02", "swp2"),)
    assert _run(exp=Expectations(cabling=rows)) == []
    assert _run(_peer(netdev="net_rail7", pfc=(5,))) == []
