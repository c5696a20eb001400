"""build_topology, rule by rule (DESIGN §4): each test states one rule of the module doc of
agent/analysis/topology.py, on the smallest snapshot that tells the rule from its near misses."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checks"))

import nodes

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.model import Link, RailRule, RdmaDevice, RdmaLink, RdmaPort, Snapshot

EXP = Expectations()
PF0, PF1 = nodes.PCIS[0], nodes.PCIS[1]


def one_netdev(name: str, **kw: object) -> Snapshot:
    """A node with one netdev on PF0 and no udev rules: the rail comes from the netdev's name."""
    return Snapshot(taken_at=0.0, links=(Link(2, name, "UP", 1, parent_bus="pci", parent_dev=PF0, **kw),))


# -- a rail's netdev is the uplink of its function


def test_a_function_with_no_netdev_at_all_is_a_rail_without_netdev():
    snap = nodes.drop_link(nodes.drop_link(nodes.node(), "net_rail1"), "net_rail1_0")
    topo = build_topology(snap, EXP)
    assert topo.rails[1].netdev is None and topo.pf(PF1).netdev is None


def test_a_representor_without_switch_id_is_never_the_uplink():
    # the uplink is gone; the representor left on the function reports no switch id
    snap = nodes.replace_link(nodes.drop_link(nodes.node(), "net_rail0"), "net_rail0_0", phys_switch_id=None)
    assert build_topology(snap, EXP).rails[0].netdev is None


def test_a_netdev_with_a_switch_id_but_no_port_name_is_never_the_uplink():
    snap = nodes.replace_link(nodes.drop_link(nodes.node(), "net_rail0"), "net_rail0_0", phys_port_name=None)
    assert build_topology(snap, EXP).rails[0].netdev is None


def two_uplinks(first: tuple[int, str], second: tuple[int, str]) -> Snapshot:
    """PF0 with two uplink ports (netdevsim, other vendors), listed in this order."""
    snap = nodes.node(rails=1, numvfs=0)
    up = snap.link("net_rail0")
    links = [ln for ln in snap.links if ln.ifname != "net_rail0"]
    links += [replace(up, ifindex=first[0], ifname=first[1], phys_port_name="p0"),
              replace(up, ifindex=second[0], ifname=second[1], phys_port_name="p1")]
    return replace(snap, links=tuple(links))


def test_of_several_uplinks_the_one_with_the_expected_name_is_the_rails():
    topo = build_topology(two_uplinks((5, "eth0"), (9, "net_rail0")), EXP)
    assert topo.rails[0].netdev_name == "net_rail0" and not topo.rails[0].renamed
    assert topo.pf(PF0).netdev == "net_rail0"


def test_of_several_uplinks_none_named_the_lowest_ifindex_is_the_rails():
    # listed last and sorting last by name: only the ifindex makes it the rail's
    topo = build_topology(two_uplinks((9, "eth0"), (5, "eth9")), EXP)
    assert topo.rails[0].netdev_name == "eth9" and topo.rails[0].renamed


# -- a rail's RDMA port


def test_without_rdma_sysfs_the_rdma_link_on_the_rail_netdev_is_the_rails_port():
    snap = replace(nodes.node(), rdma_devices=())
    r0 = build_topology(snap, EXP).rails[0]
    assert (r0.rdma.dev, r0.rdma.netdev) == ("rdma_rail0", "net_rail0") and r0.rdma_device is None


def test_the_device_of_the_rails_port_is_the_one_its_rdma_link_names():
    # sysfs shows only an SMI device on the function; the rail's port is on rdma_rail0 (rdma link)
    smi = RdmaDevice("smi1", PF0, ports=(RdmaPort(1, "ACTIVE", "LINK_UP", "infiniband"),))
    snap = replace(nodes.node(), rdma_devices=(smi,))
    r0 = build_topology(snap, EXP).rails[0]
    assert r0.rdma.dev == "rdma_rail0" and r0.rdma_device is None and r0.other_rdma == ("smi1",)


def test_the_only_ethernet_device_is_the_rails_even_renamed_beside_an_smi_device():
    snap = nodes.node()
    smi = RdmaDevice("smi1", PF0, ports=(RdmaPort(1, "ACTIVE", "LINK_UP", "infiniband"),))
    devs = tuple(replace(d, name="mlx5_0") if d.name == "rdma_rail0" else d for d in snap.rdma_devices)
    # no rdma link names the rail netdev: only sysfs tells the devices apart
    snap = replace(snap, rdma_devices=(*devs, smi), rdma_links=tuple(
        RdmaLink("mlx5_0" if rl.dev == "rdma_rail0" else rl.dev, rl.port, rl.state, rl.physical_state, None)
        for rl in snap.rdma_links))
    r0 = build_topology(snap, EXP).rails[0]
    assert (r0.rdma_device.name, r0.rdma.dev, r0.other_rdma) == ("mlx5_0", "mlx5_0", ("smi1",))


def test_a_rail_not_found_has_no_rdma_device_even_with_devices_of_unknown_function():
    snap = replace(nodes.node(rules=False), rdma_devices=(
        *nodes.node().rdma_devices, RdmaDevice("mlx5_9", None, ports=(RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),))))
    r2 = build_topology(snap, Expectations(rails=3)).rails[2]
    assert r2.pci is None and r2.rdma is None and r2.rdma_device is None and r2.other_rdma == ()


# -- the expected RDMA name of a rail: the twin of its net template, or the --rdma-template paired with it


@pytest.mark.parametrize(("netdev", "net_templates", "rdma_templates", "expected"), [
    # the net_ -> rdma_ twin with no --rdma-template
    ("net_rail1", ("net_rail%rail_id%",), (), "rdma_rail1"),
    # the twin is among the given RDMA templates: it wins whatever its position
    ("net_rail1", ("net_rail%rail_id%",), ("mlx5_%rail_id%", "rdma_rail%rail_id%"), "rdma_rail1"),
    # the twin is not among them: the RDMA template paired with the net template wins
    ("eth_rail1", ("eth_rail%rail_id%",), ("mlx5_ib%rail_id%",), "mlx5_ib1"),
    # no twin: the RDMA template at the net template's position
    ("nic1", ("gpu%rail_id%", "nic%rail_id%"), ("rdma_gpu%rail_id%", "rdma_nic%rail_id%"), "rdma_nic1"),
    # no twin and no template at that position: a lone RDMA template serves every net template
    ("nic1", ("gpu%rail_id%", "nic%rail_id%"), ("rdma_gpu%rail_id%",), "rdma_gpu1"),
    # no twin, several RDMA templates, none at that position: nothing is expected
    ("x2", ("gpu%rail_id%", "nic%rail_id%", "x%rail_id%"), ("a%rail_id%", "b%rail_id%"), None),
    ("nic1", ("nic%rail_id%",), (), None),
])
def test_expected_rdma_name_of_a_netdev_rail(netdev, net_templates, rdma_templates, expected):
    exp = Expectations(net_templates=net_templates, rdma_templates=rdma_templates)
    (rail,) = build_topology(one_netdev(netdev), exp).rails
    assert rail.expected_rdma == expected


def test_a_rule_named_by_a_template_not_given_expects_that_templates_twin():
    # net_rail%rail_id% is a default template, not the given one: its twin, never --rdma-template's
    snap = replace(one_netdev("net_rail0"), rules=(RailRule(PF0, "net_rail0", "net", nodes.NET_RULES, 1),))
    exp = Expectations(net_templates=("gpu%rail_id%",), rdma_templates=("mlx5_gpu%rail_id%",))
    assert build_topology(snap, exp).rails[0].expected_rdma == "rdma_rail0"


def test_nic_and_plane_numbers_of_a_netdev_rail_are_parsed_and_rendered():
    (rail,) = build_topology(one_netdev("net_1_0_2"), EXP).rails
    assert (rail.rail, rail.plane, rail.nic, rail.expected_rdma) == (2, 0, 1, "rdma_1_0_2")
    (rail,) = build_topology(one_netdev("net_rail0_plane1"), EXP).rails
    assert (rail.rail, rail.plane, rail.expected_rdma) == (0, 1, "rdma_rail0_plane1")


@pytest.mark.parametrize("kw", [{"kind": "veth"}, {"phys_port_name": "pf0vf0", "phys_switch_id": "cc"}])
def test_a_virtual_netdev_or_a_representor_with_a_rail_name_is_no_rail(kw):
    assert build_topology(one_netdev("net_rail0", **kw), EXP).rails == ()


def test_a_vf_netdev_with_a_rail_name_is_no_rail():
    snap = nodes.node(rules=False)
    vf = nodes.vf_of(PF0)
    snap = nodes.add_link(snap, Link(50, "net_rail7", "UP", 1, parent_bus="pci", parent_dev=vf))
    assert [r.rail for r in build_topology(snap, EXP).rails] == [0, 1]


# -- an RDMA rule alone: the expected netdev name is the twin of the RDMA name's template


def rdma_rule_only(name: str) -> Snapshot:
    """PF0's uplink is gone and only an RDMA rule names the function."""
    snap = nodes.drop_link(nodes.node(rails=1, numvfs=0), "net_rail0")
    return replace(snap, rules=(RailRule(PF0, name, "rdma", nodes.RDMA_RULES, 1),))


@pytest.mark.parametrize(("rdma", "net_templates", "rdma_templates", "expected"), [
    ("rdma_rail0", EXP.net_templates, EXP.rdma_templates, "net_rail0"),
    ("roce_rail0", EXP.net_templates, EXP.rdma_templates, "eth_rail0"),
    # no twin: the net template at the RDMA template's position
    ("mlx5_gpu0", ("gpu%rail_id%",), ("mlx5_gpu%rail_id%",), "gpu0"),
    ("mlx5_gpu0", ("nic%rail_id%", "gpu%rail_id%"), ("mlx5_nic%rail_id%", "mlx5_gpu%rail_id%"), "gpu0"),
    # none there: nothing names the netdev but the RDMA rule itself
    ("mlx5_gpu0", ("gpu%rail_id%",), ("x%rail_id%", "mlx5_gpu%rail_id%"), "mlx5_gpu0"),
])
def test_an_rdma_rule_alone_expects_the_twin_netdev_name(rdma, net_templates, rdma_templates, expected):
    exp = Expectations(net_templates=net_templates, rdma_templates=rdma_templates)
    (rail,) = build_topology(rdma_rule_only(rdma), exp).rails
    assert (rail.expected_netdev, rail.expected_rdma, rail.netdev) == (expected, rdma, None)
