"""build_topology, rule by rule (docs/design.md §4): each test states one rule of the module doc of
agent/analysis/topology.py, on the smallest snapshot that tells the rule from its near misses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.model import (
    DevlinkDev,
    DevlinkParam,
    Eswitch,
    Link,
    OvsInterface,
    PciFunction,
    RailRule,
    RdmaDevice,
    RdmaLink,
    RdmaPort,
    Snapshot,
)
from tests.support import nodes

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
    # the netdev names itself: it is the expected name, never a rename
    assert rail.expected_netdev == "net_1_0_2" and not rail.renamed
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


# -- which functions are PFs


def test_pfs_are_sriov_capable_devlink_managed_or_switch_functions_never_vfs():
    snap = nodes.node(rails=1, numvfs=1)
    sriov, plain, dl, sw, vf = nodes.PCIS[2], nodes.PCIS[3], nodes.PCIS[4], nodes.PCIS[5], nodes.vf_of(PF0)
    # a function able to carry a single VF is SR-IOV capable; one with none (or unreadable) is not
    snap = replace(snap, pci=(*snap.pci, PciFunction(sriov, 0, 1), PciFunction(plain, 0, 0),
                              PciFunction(nodes.PCIS[6])),
                   devlink_devs=(*snap.devlink_devs, DevlinkDev(f"pci/{dl}"), DevlinkDev(f"pci/{vf}")))
    snap = nodes.add_link(snap, Link(40, "enp1", phys_port_name="p0", phys_switch_id="aa", parent_bus="pci",
                                     parent_dev=sw))
    # an SF netdev reports its PF's switch id, on the auxiliary bus: never a PF
    snap = nodes.add_link(snap, Link(41, "enp1s2", phys_switch_id="aa", parent_bus="auxiliary",
                                     parent_dev="mlx5_core.sf.2"))
    assert [p.bdf for p in build_topology(snap, EXP).pfs] == [PF0, sriov, dl, sw]


def test_a_device_on_another_bus_is_a_pf_when_devlink_lists_it():
    link = Link(2, "eth0", phys_port_name="p0", phys_switch_id="bb", parent_bus="netdevsim", parent_dev="netdevsim3")
    snap = Snapshot(taken_at=0.0, links=(link,), devlink_devs=(DevlinkDev("netdevsim/netdevsim3"),))
    assert [(p.bdf, p.handle) for p in build_topology(snap, EXP).pfs] == [("netdevsim3", "netdevsim/netdevsim3")]
    assert build_topology(replace(snap, devlink_devs=()), EXP).pfs == ()


def test_a_pf_reads_its_mode_and_params_through_its_nested_instance():
    snap = nodes.node(rails=1)
    aux = "auxiliary/mlx5_core.eth.0"
    snap = replace(snap, eswitch=(Eswitch(aux, "legacy"),), params=(
        DevlinkParam(f"pci/{PF0}", "esw_multiport", (("runtime", True),)),
        DevlinkParam(aux, "esw_multiport", (("runtime", False),)),
        DevlinkParam(aux, "enable_roce", (("driverinit", True),)),
    ))
    pf = build_topology(snap, EXP).pf(PF0)
    assert pf.nested == (aux,) and pf.eswitch_mode == "legacy"
    # the PF's own value wins over its nested instance's
    assert pf.params == (("enable_roce", True), ("esw_multiport", True)) and pf.esw_multiport is True


def test_a_pf_keeps_its_sriov_counts_driver_and_switch_id():
    pf = build_topology(nodes.node(rails=1), EXP).pf(PF0)
    assert (pf.numvfs, pf.totalvfs, pf.driver, pf.switch_id) == (1, 8, "mlx5_core", nodes.SWITCH_IDS[0])


def test_a_pf_without_uplink_takes_its_switch_id_from_its_representors():
    topo = build_topology(nodes.drop_link(nodes.node(), "net_rail0"), EXP)
    assert topo.pf(PF0).switch_id == nodes.SWITCH_IDS[0] and topo.nics[0].switch_id == nodes.SWITCH_IDS[0]


# -- representors


def test_representors_are_vfs_by_number_then_sfs_and_only_vfs_count_as_down():
    snap = nodes.node(rails=1, numvfs=0)
    sw = nodes.SWITCH_IDS[0]
    for ifindex, name, port in ((30, "rep_sf", "pf0sf88"), (31, "rep10", "pf0vf10"), (32, "rep2", "pf0vf2")):
        snap = nodes.add_link(snap, Link(ifindex, name, "DOWN", 0, phys_port_name=port, phys_switch_id=sw,
                                         parent_bus="pci", parent_dev=PF0))
    snap = nodes.set_numvfs(snap, PF0, 4)
    pf = build_topology(snap, EXP).pf(PF0)
    assert [(r.netdev, r.kind, r.index, r.pfnum) for r in pf.representors] == [
        ("rep2", "vf", 2, 0), ("rep10", "vf", 10, 0), ("rep_sf", "sf", 88, 0)]
    assert [r.netdev for r in pf.vf_representors] == ["rep2", "rep10"]
    assert pf.sfs == ("rep_sf",) and pf.representors_down == ("rep2", "rep10")
    assert pf.stale_representors == ("rep10",)


def test_a_host_pf_port_name_is_no_representor_of_this_host():
    # "pf0": the host PF as a DPU's eswitch shows it
    snap = nodes.add_link(nodes.node(rails=1, numvfs=0), Link(30, "pf0hpf", phys_port_name="pf0",
                                                                phys_switch_id="cc", parent_bus="pci",
                                                                parent_dev=PF0))
    topo = build_topology(snap, EXP)
    assert topo.pf(PF0).representors == () and "pf0hpf" in topo.representor_names
    assert "net_rail0" not in topo.representor_names


def test_a_representor_without_parent_is_owned_through_the_nested_devlink_instance():
    snap = nodes.replace_link(nodes.node(), "net_rail1_0", parent_dev=None, parent_bus=None)
    snap = replace(snap, ports=tuple(replace(p, dev="auxiliary/mlx5_core.eth.1") if p.netdev == "net_rail1_0" else p
                                     for p in snap.ports))
    assert [r.netdev for r in build_topology(snap, EXP).pf(PF1).representors] == ["net_rail1_0"]


def test_a_representor_whose_devlink_instance_is_a_vf_has_no_owner():
    vf = nodes.vf_of(PF1)
    snap = nodes.replace_link(nodes.node(), "net_rail1_0", parent_dev=None, parent_bus=None)
    snap = replace(snap, ports=tuple(replace(p, dev=f"pci/{vf}") if p.netdev == "net_rail1_0" else p
                                     for p in snap.ports))
    topo = build_topology(snap, EXP)
    assert topo.pf(PF1).representors == () and topo.pf(vf) is None


def test_a_devlink_pfnum_that_disagrees_with_the_name_is_kept_as_evidence():
    snap = replace(nodes.node(), ports=tuple(replace(p, pfnum=1) if p.netdev == "net_rail0_0" else p
                                             for p in nodes.node().ports))
    topo = build_topology(snap, EXP)
    (rep0,), (rep1,) = topo.pf(PF0).representors, topo.pf(PF1).representors
    assert (rep0.pfnum, rep0.devlink_pfnum) == (0, 1) and rep1.devlink_pfnum is None


# -- NICs


def test_nics_are_sorted_by_their_lowest_pf_in_pci_order():
    topo = build_topology(nodes.node(rails=3), EXP)  # functions 0c, 8d, 1a
    assert [n.lowest_pf for n in topo.nics] == [nodes.PCIS[0], nodes.PCIS[2], nodes.PCIS[1]]
    assert [p.bdf for p in topo.pfs] == [nodes.PCIS[0], nodes.PCIS[2], nodes.PCIS[1]]


def one_nic(snap: Snapshot) -> Snapshot:
    return replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[0]) if ln.phys_switch_id else ln
                                     for ln in snap.links))


def test_a_nics_esw_multiport_is_its_lowest_pf_with_a_value():
    snap = one_nic(nodes.node(rails=3))
    snap = replace(snap, params=tuple(p for p in snap.params if p.handle != f"pci/{PF0}"))
    snap = nodes.set_param(snap, f"pci/{nodes.PCIS[2]}", "esw_multiport", True)
    snap = nodes.set_param(snap, f"pci/{PF1}", "esw_multiport", True)
    (nic,) = build_topology(snap, EXP).nics
    assert nic.pfs == (PF0, nodes.PCIS[2], PF1) and nic.esw_multiport is True
    assert nic.esw_multiport_by_pf == ((nodes.PCIS[2], True), (PF1, True)) and not nic.torn


def test_a_nic_with_no_readable_esw_multiport_has_none_and_is_not_torn():
    snap = replace(one_nic(nodes.node()), params=())
    (nic,) = build_topology(snap, EXP).nics
    assert (nic.esw_multiport, nic.esw_multiport_by_pf, nic.torn_pfs) == (None, (), ())


def test_pfs_without_switch_id_are_nics_of_their_own_and_carry_no_rail_unless_one_is_theirs():
    snap = nodes.node(rails=1, numvfs=0)
    snap = nodes.replace_link(snap, "net_rail0", phys_port_name=None, phys_switch_id=None)
    snap = replace(snap, pci=(*snap.pci, PciFunction(nodes.PCIS[2], 0, 8), PciFunction(nodes.PCIS[3], 0, 8)))
    nics = build_topology(snap, EXP).nics
    assert [(n.pfs, n.switch_id, n.carries_rails) for n in nics] == [
        ((PF0,), None, True), ((nodes.PCIS[2],), None, False), ((nodes.PCIS[3],), None, False)]


# -- rails: order, names udev cannot apply


def test_rails_are_sorted_by_rail_then_plane_whatever_the_rule_order():
    snap = replace(nodes.node(rails=3, rules=False), rules=(
        RailRule(nodes.PCIS[2], "net_rail1_plane1", "net", nodes.NET_RULES, 1),
        RailRule(PF1, "net_rail1_plane0", "net", nodes.NET_RULES, 2),
        RailRule(PF0, "net_rail0", "net", nodes.NET_RULES, 3),
    ))
    assert [(r.rail, r.plane, r.pci) for r in build_topology(snap, EXP).rails] == [
        (0, None, PF0), (1, 0, PF1), (1, 1, nodes.PCIS[2])]


def test_two_functions_named_one_rail_are_sorted_by_pci():
    snap = replace(nodes.node(rules=False), rules=(
        RailRule(PF1, "net_rail0", "net", nodes.NET_RULES, 1), RailRule(PF0, "net_rail0", "net", nodes.NET_RULES, 2)))
    assert [r.pci for r in build_topology(snap, EXP).rails] == [PF0, PF1]


def test_only_a_net_name_longer_than_ifnamsiz_is_too_long():
    other = "/etc/udev/rules.d/05-a.rules"
    snap = replace(nodes.node(rails=3, rules=False), rules=(
        RailRule(PF0, f"net_rail{10**6}", "net", nodes.NET_RULES, 1),  # 15 characters: fits
        RailRule(PF1, f"net_rail{10**7}", "net", nodes.NET_RULES, 2),  # 16: never applied
        RailRule(nodes.PCIS[2], f"rdma_rail{10**8}", "rdma", nodes.RDMA_RULES, 3),  # RDMA names may be 64
        RailRule(nodes.PCIS[3], f"net_rail{10**8}", "net", other, 1),
    ))
    topo = build_topology(snap, EXP)
    assert [r.name_too_long for r in topo.rails] == [False, True, False, True]
    assert [(p.file, p.names) for p in topo.template_problems] == [
        (other, (f"net_rail{10**8}",)), (nodes.NET_RULES, (f"net_rail{10**7}",))]


def test_rule_names_no_template_parses_are_rails_by_rule_order():
    snap = replace(nodes.node(rules=False), rules=(
        RailRule(PF1, "gpu_a", "net", nodes.NET_RULES, 1), RailRule(PF0, "gpu_b", "net", nodes.NET_RULES, 2)))
    rails = build_topology(snap, EXP).rails
    assert [(r.rail, r.pci, r.expected_netdev, r.expected_rdma, r.rule_file) for r in rails] == [
        (0, PF1, "gpu_a", None, nodes.NET_RULES), (1, PF0, "gpu_b", None, nodes.NET_RULES)]


def test_an_rdma_rule_alone_takes_the_netdev_on_the_function_as_expected():
    snap = replace(nodes.node(rails=1), rules=(RailRule(PF0, "rdma_rail0", "rdma", nodes.RDMA_RULES, 1),))
    snap = nodes.replace_link(snap, "net_rail0", ifname="enp12s0")
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.expected_netdev, rail.renamed, rail.rule_file, rail.rdma_rule.name) == (
        "enp12s0", False, nodes.RDMA_RULES, "rdma_rail0")


def test_rails_flag_adds_only_the_rails_no_netdev_names():
    snap = nodes.node(rules=False)
    snap = nodes.replace_link(snap, "net_rail0", ifname="net_rail0_plane1")
    topo = build_topology(snap, Expectations(rails=3))
    assert [(r.rail, r.plane, r.source) for r in topo.rails] == [
        (0, 1, "netdev"), (1, None, "netdev"), (2, None, "rails")]
    assert build_topology(snap, Expectations(rails=3, net_templates=())).rails == ()


# -- OVS orphans


def test_ovs_orphan_reasons_and_ports_that_are_no_orphans():
    snap = nodes.with_ovs(
        nodes.drop_link(nodes.node(), "net_rail1"),
        OvsInterface("pod-b", "", None, 4, None),             # a netdev OVS still sees
        OvsInterface("net_rail1", "", 0, -1, None),          # the missing rail: RailMissing says it
        OvsInterface("gre0", "gre", 0, -1, None),             # a tunnel has no netdev
        OvsInterface("br-int", "internal", 0, -1, None),
        OvsInterface("net_rail0_7", "system", 0, 3, "down"),
        OvsInterface("net_rail1_3", "system", 5, -1, None),   # owned through the rail's expected name
        OvsInterface("pod-a", None, 5, 4, None, "No such device"),
    )
    topo = build_topology(snap, EXP)
    assert [(o.name, o.owner, o.why) for o in topo.ovs_orphans] == [
        ("br-int", "node", "ofport -1"), ("pod-a", "node", "error: No such device"),
        ("net_rail0_7", f"pci/{PF0}", "ifindex 0"), ("net_rail1_3", f"pci/{PF1}", "ofport -1")]
    assert build_topology(nodes.with_ovs(nodes.node()), EXP).ovs_orphans == ()


def test_a_net_name_no_template_parses_takes_its_rail_from_the_rdma_name():
    snap = replace(nodes.node(rails=1, rules=False), rules=(
        RailRule(PF0, "gpu_a", "net", nodes.NET_RULES, 1), RailRule(PF0, "rdma_rail3", "rdma", nodes.RDMA_RULES, 1)))
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.rail, rail.expected_netdev, rail.expected_rdma, rail.rule_file) == (
        3, "gpu_a", "rdma_rail3", nodes.NET_RULES)


def test_an_ovs_orphan_belongs_to_the_pf_whose_netdev_has_the_name_now():
    # the uplinks swapped names: net_rail0 is PF1's netdev, though rail 0 (PF0) expects it
    snap = nodes.replace_link(nodes.node(), "net_rail0", ifname="tmp")
    snap = nodes.replace_link(nodes.replace_link(snap, "net_rail1", ifname="net_rail0"), "tmp", ifname="net_rail1")
    snap = nodes.with_ovs(snap, OvsInterface("net_rail0_5", "", 0, 7, "down"))
    assert [(o.name, o.owner) for o in build_topology(snap, EXP).ovs_orphans] == [("net_rail0_5", f"pci/{PF1}")]


def test_a_nics_pfs_are_in_pci_order_with_wide_domains():
    # a VMD domain (10000) is above ffff, though it sorts first as text
    low, high = "ffff:00:00.0", "10000:00:00.0"
    links = tuple(Link(i, f"eth{i}", phys_port_name="p0", phys_switch_id="aa", parent_bus="pci", parent_dev=bdf)
                  for i, bdf in ((2, high), (3, low)))
    (nic,) = build_topology(Snapshot(taken_at=0.0, links=links), EXP).nics
    assert nic.pfs == (low, high)
