"""The feed on hand-built snapshots (tests/support/nodes.py): which links are watched and under
which subject, and every observation one sample gives, driver first."""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.detectors import ConfigObs, CountersObs, DriverObs, HealthObs, LinkObs, RepresentorObs
from agent.detectors.feed import (
    link_keys_by_ifindex,
    link_obs,
    link_subjects,
    observations_from_snapshot,
    rail_counters,
)
from agent.model import HealthReporter, Link
from tests.support import nodes

PF0, PF1 = nodes.PCIS[:2]
RAIL0, RAIL1 = (PF0, "p0"), (PF1, "p0")


def topo(snap):
    return build_topology(snap, Expectations())


def test_rails_are_watched_under_their_expected_names_whatever_their_netdev_is_called():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0")
    assert link_subjects(topo(snap)) == {RAIL0: "net_rail0", RAIL1: "net_rail1"}
    assert link_keys_by_ifindex(topo(snap)) == {2: RAIL0, 4: RAIL1}


def test_the_other_uplink_of_a_rail_nic_is_watched_under_its_own_name_and_other_nics_not_at_all():
    snap = nodes.node(rails=3)
    # rail 1's function becomes the second port of rail 0's NIC, without a rule; rail 2 loses its rule
    snap = replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[0]) if ln.parent_dev == PF1 else ln
                                     for ln in snap.links),
                   rules=tuple(r for r in snap.rules if r.pci == PF0))
    snap = nodes.replace_link(nodes.replace_link(snap, "net_rail1", ifname="ens9f1np1"), "net_rail2", ifname="ens10f0")
    assert link_subjects(topo(snap)) == {RAIL0: "net_rail0", RAIL1: "ens9f1np1"}


def test_a_rail_without_a_netdev_is_not_watched():
    assert link_subjects(topo(nodes.drop_link(nodes.node(), "net_rail1"))) == {RAIL0: "net_rail0"}


def test_link_obs_keys_by_parent_else_by_ifindex_and_drops_unwatched_links():
    subjects = {RAIL0: "net_rail0"}
    up = Link(2, "eth2", "UP", 1, 2, 1, 1, parent_dev=PF0, phys_port_name="p0")
    assert link_obs(up, subjects, admin_up=True) == LinkObs(
        key=RAIL0, netdev="eth2", ifindex=2, carrier_down_count=1, carrier=1, operstate="UP", admin_up=True,
        subject="net_rail0")
    # kernels before 5.17 send no parent: the ifindex the topology saw says which rail it is
    bare = Link(2, "net_rail0", "DOWN", 0, 3, 1, 2)
    assert link_obs(bare, subjects) is None
    assert link_obs(bare, subjects, keys_by_ifindex={2: RAIL0}) == LinkObs(
        key=RAIL0, netdev="net_rail0", ifindex=2, carrier_down_count=2, carrier=0, operstate="DOWN", subject="net_rail0")
    assert link_obs(bare, subjects, keys_by_ifindex={9: RAIL0}) is None
    assert link_obs(replace(up, phys_port_name="pf0vf0"), subjects) is None
    assert link_obs(replace(up, ifname=None), subjects) is None
    assert link_obs(replace(up, phys_port_name=None), {(PF0, ""): "net_rail0"}).key == (PF0, "")


def test_rail_counters_are_ethtool_rdma_port_counters_and_carrier_losses():
    snap = nodes.replace_link(nodes.node(), "net_rail0", carrier_down_count=3)
    snap = replace(snap, rdma_devices=tuple(
        replace(d, counters=((1, "out_of_buffer", 5), (2, "out_of_buffer", 99))) if d.name == "rdma_rail0" else d
        for d in snap.rdma_devices))
    (n0, s0, c0), (n1, s1, c1) = rail_counters(snap, topo(snap))
    assert (n0, s0, n1, s1) == ("net_rail0", "net_rail0", "net_rail1", "net_rail1")
    assert c0 == {"out_of_buffer": 5, **nodes.PFC3, "carrier_down_count": 3}
    assert c1 == {**nodes.PFC3, "carrier_down_count": 1}


def test_rail_counters_of_a_renamed_rail_keep_the_netdev_and_the_expected_subject():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="eth3")
    snap = replace(snap, ethtool=tuple(replace(st, netdev="eth3") if st.netdev == "net_rail1" else st
                                       for st in snap.ethtool))
    got = [(n, s, bool(c)) for n, s, c in rail_counters(snap, topo(snap))]
    assert got == [("net_rail0", "net_rail0", True), ("eth3", "net_rail1", True)]
    gone = nodes.drop_link(nodes.node(), "net_rail0")
    assert [n for n, _, _ in rail_counters(gone, topo(gone))] == ["net_rail1"]


def test_one_sample_gives_the_driver_first_then_links_config_representors_counters_and_health():
    snap = nodes.node(rails=1)
    snap = replace(snap, versions=replace(snap.versions, mlx5_srcversion="A1B2C3"),
                   health=(HealthReporter(f"pci/{PF0}", f"pci/{PF0}", None, "fw", "healthy", 2, 2),
                           HealthReporter("auxiliary/mlx5_core.eth.0/65535", "auxiliary/mlx5_core.eth.0", 65535, "tx",
                                          "error", 1, 0),
                           HealthReporter(f"pci/{nodes.vf_of(PF0)}", f"pci/{nodes.vf_of(PF0)}", None, "vnic", "error", 5)))
    handle = f"pci/{PF0}"
    assert observations_from_snapshot(snap, topo(snap)) == [
        DriverObs("A1B2C3", "25.10-1.7.1"),
        LinkObs(key=RAIL0, netdev="net_rail0", ifindex=2, carrier_down_count=1, carrier=1, operstate="UP",
                subject="net_rail0"),
        ConfigObs(handle, "sriov_numvfs", 1),
        ConfigObs(handle, "eswitch_mode", "switchdev"),
        ConfigObs(handle, "param:esw_multiport", False),
        ConfigObs(handle, "param:flow_steering_mode", "smfs"),
        RepresentorObs(handle, 1, (0,), ("net_rail0_0",)),
        CountersObs("net_rail0", dict(nodes.PFC3) | {"carrier_down_count": 1}, subject="net_rail0"),
        HealthObs(handle, "fw", handle, "healthy", 2),
        HealthObs(handle, "tx", "auxiliary/mlx5_core.eth.0/65535", "error", 1),
    ]


def test_the_other_uplink_of_a_rail_nic_is_watched_whatever_nics_come_before_it():
    snap = nodes.node(rails=3)
    # only rail 2 (0000:1a) keeps its rule; rail 1's function becomes the second port of its NIC, and
    # rail 0's NIC, first by PCI address, carries no rail
    snap = replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[2]) if ln.parent_dev == PF1 else ln
                                     for ln in snap.links),
                   rules=tuple(r for r in snap.rules if r.pci == nodes.PCIS[2]))
    snap = nodes.replace_link(snap, "net_rail1", ifname="ens9f1np1")
    assert link_subjects(topo(snap)) == {(nodes.PCIS[2], "p0"): "net_rail2", RAIL1: "ens9f1np1"}


def test_a_netdev_without_a_port_name_is_watched_under_an_empty_one():
    # no switch id (legacy mode, or a driver without one): the function's own netdev is its uplink
    snap = nodes.replace_link(nodes.node(), "net_rail0", phys_port_name=None, phys_switch_id=None)
    subjects = link_subjects(topo(snap))
    assert subjects == {(PF0, ""): "net_rail0", RAIL1: "net_rail1"}
    assert link_obs(snap.link("net_rail0"), subjects).key == (PF0, "")


def test_rail_counters_without_the_rdma_device_are_ethtool_and_carrier_losses():
    # the rdma links name the rails' ports, but no RDMA device was read (no sysfs): no port counters
    snap = replace(nodes.node(), rdma_devices=())
    assert all(rail.rdma is not None and rail.rdma_device is None for rail in topo(snap).rails)
    assert [c for _, _, c in rail_counters(snap, topo(snap))] == [{**nodes.PFC3, "carrier_down_count": 1}] * 2
