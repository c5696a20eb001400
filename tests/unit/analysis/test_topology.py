"""build_topology: rails, PFs, NICs and OVS orphans by the rules of docs/design.md §4."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.model import (
    DevlinkDev,
    DevlinkPort,
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


def test_healthy_node_resolves_rails_pfs_and_nics():
    topo = build_topology(nodes.node(), EXP)
    assert [(r.rail, r.plane, r.pci, r.netdev_name, r.rdma.dev) for r in topo.rails] == [
        (0, None, PF0, "net_rail0", "rdma_rail0"), (1, None, PF1, "net_rail1", "rdma_rail1")]
    r0 = topo.rails[0]
    assert r0.expected_rdma == "rdma_rail0" and r0.source == "udev"
    assert r0.pf.handle == f"pci/{PF0}" and r0.pf.eswitch_mode == "switchdev"
    assert r0.pf.esw_multiport is False and r0.pf.numvfs == 1
    assert [x.netdev for x in r0.pf.representors] == ["net_rail0_0"]
    assert r0.pf.stale_representors == ()
    # VFs never count as PFs or NIC members
    assert [p.bdf for p in topo.pfs] == [PF0, PF1]
    assert [n.pfs for n in topo.nics] == [(PF0,), (PF1,)]
    assert all(n.carries_rails and not n.torn for n in topo.nics)


def test_representor_sharing_the_function_is_never_the_rail_netdev():
    snap = nodes.replace_link(nodes.node(), "net_rail0", ifname="eth2")
    snap = nodes.replace_link(snap, "net_rail0_0", ifname="net_rail0")  # a rep got the rule's name
    snap = replace(snap, rdma_links=tuple(replace(rl, netdev="eth2") if rl.dev == "rdma_rail0" else rl
                                          for rl in snap.rdma_links))
    r0 = build_topology(snap, EXP).rails[0]
    assert r0.netdev_name == "eth2" and r0.renamed
    assert r0.rdma.dev == "rdma_rail0"


def test_missing_uplink_leaves_rail_without_netdev():
    snap = nodes.drop_link(nodes.node(), "net_rail1")
    r1 = build_topology(snap, EXP).rails[1]
    assert r1.netdev is None and r1.pci == PF1 and r1.expected_netdev == "net_rail1"
    # the RDMA device is still on the function: port 1 is the rail's
    assert r1.rdma.dev == "rdma_rail1"


def test_rdma_port_from_sysfs_when_rdma_tool_missing():
    snap = replace(nodes.node(), rdma_links=())
    r0 = build_topology(snap, EXP).rails[0]
    assert (r0.rdma.dev, r0.rdma.state, r0.rdma.physical_state) == ("rdma_rail0", "ACTIVE", "LINK_UP")


def test_representor_ports_are_not_rail_ports():
    snap = replace(nodes.node(), rdma_links=(
        RdmaLink("rdma_rail0", 2, "DOWN", "DISABLED", "net_rail0_0"),
        RdmaLink("rdma_rail0", 1, "ACTIVE", "LINK_UP", "net_rail0"),
    ))
    assert build_topology(snap, EXP).rails[0].rdma.port == 1


def test_stale_representors_and_other_controllers():
    snap = nodes.node(numvfs=2)
    snap = nodes.set_numvfs(snap, PF0, 1)
    snap = nodes.add_link(snap, Link(90, "pf0c1vf0rep", "UP", 1, phys_port_name="c1pf0vf0",
                                     phys_switch_id=nodes.SWITCH_IDS[0], parent_bus="pci", parent_dev=PF0))
    snap = nodes.replace_link(snap, "net_rail0_0", operstate="DOWN", carrier=0)
    pf = build_topology(snap, EXP).pf(PF0)
    assert [r.netdev for r in pf.representors] == ["net_rail0_0", "net_rail0_1"]
    assert pf.stale_representors == ("net_rail0_1",)
    assert pf.representors_down == ("net_rail0_0",)
    assert build_topology(nodes.set_numvfs(snap, PF0, 0), EXP).pf(PF0).stale_representors == (
        "net_rail0_0", "net_rail0_1")
    # unreadable sriov_numvfs judges nothing
    assert build_topology(nodes.set_numvfs(snap, PF0, None), EXP).pf(PF0).stale_representors == ()


def test_two_pf_nic_esw_multiport_torn():
    snap = nodes.node(rails=2)
    # make both PFs one NIC: same switch id
    snap = replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[0]) if ln.phys_switch_id else ln
                                     for ln in snap.links))
    snap = nodes.set_param(snap, f"pci/{PF1}", "esw_multiport", True)
    topo = build_topology(snap, EXP)
    assert len(topo.nics) == 1
    nic = topo.nics[0]
    assert nic.pfs == (PF0, PF1) and nic.esw_multiport is False and nic.torn_pfs == (PF1,)


def test_legacy_pf_without_switch_id_uses_its_own_netdev():
    snap = nodes.replace_link(nodes.node(rails=1, numvfs=0), "net_rail0", phys_port_name=None, phys_switch_id=None)
    topo = build_topology(snap, EXP)
    assert topo.rails[0].netdev_name == "net_rail0"
    assert topo.nics[0].switch_id is None


def test_rails_from_netdev_names_and_from_rails_flag():
    snap = nodes.node(rules=False)
    topo = build_topology(snap, Expectations(rails=3))
    assert [(r.rail, r.netdev_name, r.source) for r in topo.rails] == [
        (0, "net_rail0", "netdev"), (1, "net_rail1", "netdev"), (2, None, "rails")]
    assert topo.rails[2].expected_netdev == "net_rail2" and topo.rails[2].pci is None
    assert topo.rails[2].expected_rdma == "rdma_rail2"


def test_multiplane_rules_parse_planes_and_flag_long_names():
    snap = nodes.node(rails=2, rules=False)
    snap = replace(snap, rules=(
        RailRule(PF0, "net_rail0_plane1", "net", nodes.NET_RULES, 4),
        RailRule(PF1, "net_rail0_plane0", "net", nodes.NET_RULES, 5),
    ))
    topo = build_topology(snap, EXP)
    assert [(r.rail, r.plane, r.pci) for r in topo.rails] == [(0, 0, PF1), (0, 1, PF0)]
    assert [(p.file, p.names) for p in topo.template_problems] == [
        (nodes.NET_RULES, ("net_rail0_plane0", "net_rail0_plane1"))]
    assert topo.rails[0].expected_rdma == "rdma_rail0_plane0"


def test_ovs_orphans_are_owned_by_the_pf_whose_name_prefixes_them():
    snap = nodes.with_ovs(
        nodes.node(),
        OvsInterface("net_rail0_0", "", 6, 1, "up"),
        OvsInterface("net_rail0_5", "", 0, 7, "down"),
        OvsInterface("pod-veth", "", 0, -1, "down", "could not open network device pod-veth (No such device)"),
        OvsInterface("vxlan0", "vxlan", 0, 3, "up"),
        OvsInterface("net_rail1_2", "system", 0, -1, None),
    )
    topo = build_topology(snap, EXP)
    assert [(o.name, o.owner) for o in topo.ovs_orphans] == [
        ("pod-veth", "node"), ("net_rail0_5", f"pci/{PF0}"), ("net_rail1_2", f"pci/{PF1}")]


def test_vf_functions_are_not_pfs_even_with_a_devlink_handle():
    snap = nodes.node(rails=1)
    snap = replace(snap, pci=(*snap.pci, PciFunction("0000:0c:00.5", physfn=PF0)))
    topo = build_topology(snap, EXP)
    assert [p.bdf for p in topo.pfs] == [PF0]


def test_representor_without_parent_dev_is_owned_through_its_devlink_port():
    snap = nodes.replace_link(nodes.node(), "net_rail1_0", parent_dev=None, parent_bus=None)
    pf = build_topology(snap, EXP).pf(PF1)
    assert [r.netdev for r in pf.representors] == ["net_rail1_0"]


def test_custom_net_template():
    snap = nodes.node(rules=False)
    snap = nodes.replace_link(snap, "net_rail0", ifname="gpu0")
    snap = nodes.replace_link(snap, "net_rail1", ifname="gpu1")
    topo = build_topology(snap, Expectations(net_templates=("gpu%rail_id%",), rdma_templates=("rdma_rail%rail_id%",)))
    assert [(r.rail, r.netdev_name, r.expected_rdma, r.rdma.dev) for r in topo.rails] == [
        (0, "gpu0", "rdma_rail0", "rdma_rail0"), (1, "gpu1", "rdma_rail1", "rdma_rail1")]


def test_a_pf_on_another_bus_gets_its_devlink_handle():
    """netdevsim (the kernel lab's NIC): parent ``netdevsim/netdevsim10``, and that is its devlink handle.

    An mlx5 SF netdev (parent ``auxiliary/mlx5_core.sf.2``) has a devlink instance of its own, but it is a
    function of its PF, never a PF.
    """
    sid = "a07c4f7dfa0b4b9c9eb2e4dfaf3fc09686e4bc50f7fac2044d65509b24d18f"
    links = (
        Link(ifindex=2, ifname="eth0", phys_port_name="p1", phys_switch_id=sid,
             parent_bus="netdevsim", parent_dev="netdevsim10"),
        Link(ifindex=3, ifname="eth1", phys_port_name="pf0vf0", phys_switch_id=sid,
             parent_bus="netdevsim", parent_dev="netdevsim10"),
        Link(ifindex=4, ifname="enp8s0f0s2", parent_bus="auxiliary", parent_dev="mlx5_core.sf.2"),
    )
    snap = Snapshot(taken_at=0.0, links=links, pci=(PciFunction("netdevsim10", sriov_numvfs=1),),
                    devlink_devs=(DevlinkDev("netdevsim/netdevsim10"), DevlinkDev("auxiliary/mlx5_core.sf.2")),
                    eswitch=(Eswitch("netdevsim/netdevsim10", "switchdev"),))
    topo = build_topology(snap, EXP)
    assert [(p.bdf, p.handle, p.netdev, p.numvfs, p.eswitch_mode) for p in topo.pfs] == [
        ("netdevsim10", "netdevsim/netdevsim10", "eth0", 1, "switchdev")]
    assert [r.netdev for r in topo.pfs[0].representors] == ["eth1"] and topo.pfs[0].stale_representors == ()
    # devlink unreadable: the device is still named by its own bus, never pci/netdevsim10
    snap = replace(snap, devlink_devs=(), eswitch=(), links=(replace(links[0], ifname="net_rail0"), *links[1:]))
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.pf.handle, rail.pf.eswitch_mode, rail.pf.numvfs) == ("netdevsim/netdevsim10", None, 1)


# --- representors: which links are one, and which PF owns it -------------------------------------

PFX, PFY = "0000:03:00.0", "0000:04:00.0"


def _rep(ifindex: int, name: str, port: str, parent: str | None = PFX, bus: str | None = "pci",
         switch_id: str | None = None) -> Link:
    return Link(ifindex=ifindex, ifname=name, operstate="UP", carrier=1, phys_port_name=port,
                phys_switch_id=switch_id, parent_bus=bus if parent else None, parent_dev=parent)


def test_a_dpu_host_pf_port_is_no_representor_and_makes_no_pf_of_its_function():
    # On a BlueField the host PF's port is named pf<N> (no vf / sf part): it is the host's PF seen from
    # the Arm, not a representor of a VF, and it neither lists a PF nor lends the PF a switch id.
    snap = Snapshot(0.0, links=(_rep(5, "pf0hpf", "pf0", parent="0000:05:00.0", bus=None, switch_id="aa"),
                                _rep(6, "pf0vf0", "pf0vf0", parent=PFY, bus=None),
                                _rep(7, "pf0hpf2", "pf0", parent=PFY, bus=None, switch_id="bb")))
    topo = build_topology(snap, EXP)
    assert [p.bdf for p in topo.pfs] == [PFY]
    pf = topo.pf(PFY)
    assert [r.netdev for r in pf.representors] == ["pf0vf0"]
    assert pf.switch_id is None


def test_a_link_that_is_not_this_hosts_representor_does_not_stop_the_next():
    # Another controller's representor (c1pf0vf0, a DPU's host) and a representor no parent and no
    # devlink port can place are skipped alone: the representors after them are still owned.
    snap = Snapshot(0.0, links=(_rep(5, "c1pf0vf0", "c1pf0vf0"), _rep(6, "orphan", "pf0vf2", parent=None),
                                _rep(7, "pf0vf0", "pf0vf0"), _rep(8, "pf0vf1", "pf0vf1")))
    pf = build_topology(snap, EXP).pf(PFX)
    assert [r.netdev for r in pf.representors] == ["pf0vf0", "pf0vf1"]


def test_representors_are_listed_by_vf_number_whatever_the_link_order():
    snap = Snapshot(0.0, links=(_rep(5, "pf0vf1", "pf0vf1"), _rep(6, "pf0vf10", "pf0vf10"),
                                _rep(7, "pf0vf0", "pf0vf0"), _rep(8, "pf0sf0", "pf0sf0")))
    pf = build_topology(snap, EXP).pf(PFX)
    assert [(r.kind, r.index) for r in pf.representors] == [("vf", 0), ("vf", 1), ("vf", 10), ("sf", 0)]


def test_a_representors_parent_device_owns_it_and_its_devlink_port_only_names_an_orphans_owner():
    # The parent device is the kernel's word; the devlink port names the PF only of a representor
    # with no parent (an old kernel), and never a PF on another bus by its PCI address.
    ports = (DevlinkPort(f"pci/{PFY}/1", f"pci/{PFY}", 1, netdev="rep_a", flavour="pcivf", pfnum=0, vfnum=0),
             DevlinkPort(f"pci/{PFY}/2", f"pci/{PFY}", 2, netdev="rep_b", flavour="pcivf", pfnum=0, vfnum=1),
             DevlinkPort("netdevsim/netdevsim10/3", "netdevsim/netdevsim10", 3, netdev="rep_c", flavour="pcivf",
                         pfnum=0, vfnum=0))
    snap = Snapshot(0.0, links=(_rep(5, "rep_a", "pf0vf0", parent=PFX),
                                _rep(6, "rep_b", "pf0vf1", parent=None),
                                _rep(7, "rep_c", "pf0vf0", parent="netdevsim10", bus="netdevsim")),
                    ports=ports)
    topo = build_topology(snap, EXP)
    owners = {p.bdf: [r.netdev for r in p.representors] for p in topo.pfs}
    assert owners == {PFX: ["rep_a"], PFY: ["rep_b"], "netdevsim10": ["rep_c"]}


# --- rails from naming rules ---------------------------------------------------------------------

SITE_RULES = "/etc/udev/rules.d/70-persistent-net.rules"


@pytest.mark.parametrize("kind,name,exp", [
    ("net", "gpu3", Expectations(net_templates=("gpu%rail_id%",))),
    ("rdma", "ib_gpu3", Expectations(rdma_templates=("ib_gpu%rail_id%",))),
])
def test_a_site_rule_names_a_rail_by_the_given_templates(kind: str, name: str, exp: Expectations):
    # A site's own rules file names rails only where a name fits a template: the net rules by the net
    # templates given, the RDMA rules by the RDMA templates given, each beside the known ones.
    snap = Snapshot(0.0, rules=(RailRule(PFX, name, kind, SITE_RULES, 1),
                                RailRule(PFY, "eth_sec0", "net", SITE_RULES, 2)))
    topo = build_topology(snap, exp)
    assert [(r.rail, r.pci, r.source, r.rule_file) for r in topo.rails] == [(3, PFX, "udev", SITE_RULES)]


def test_an_rdma_only_rule_expects_the_twin_netdev_name_with_every_number():
    # Only an RDMA rule names the function, and no netdev is there: the netdev expected is the RDMA
    # name's net twin, rendered with its NIC, plane and rail numbers.
    snap = Snapshot(0.0, rules=(RailRule(PFX, "rdma_1_0_2", "rdma", nodes.RDMA_RULES, 1),))
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.rail, rail.plane, rail.nic, rail.expected_netdev, rail.expected_rdma, rail.netdev) == (
        2, 0, 1, "net_1_0_2", "rdma_1_0_2", None)


# --- rails from netdev names and from --rails -------------------------------------------------------


def test_a_rail_found_by_its_netdev_name_is_that_netdev_with_or_without_a_parent():
    snap = Snapshot(0.0, links=(Link(2, "net_rail0", "UP", 1),
                                Link(3, "net_rail1", "UP", 1, phys_switch_id="aa", parent_bus="pci", parent_dev=PFX)))
    topo = build_topology(snap, EXP)
    assert [(r.rail, r.source, r.pci, r.netdev_name) for r in topo.rails] == [
        (0, "netdev", None, "net_rail0"), (1, "netdev", PFX, "net_rail1")]


def test_a_rails_flag_rail_is_a_virtual_link_of_its_name_but_never_a_representor_or_a_vfs():
    # A test namespace's veth named net_rail0 is the rail --rails expects; a representor or a VF's
    # netdev that got the name is not.
    snap = Snapshot(0.0, links=(Link(2, "net_rail0", "UP", 1, kind="veth"),
                                Link(3, "net_rail1", "UP", 1, phys_port_name="pf0vf0", parent_dev=PFX),
                                Link(4, "net_rail2", "UP", 1, parent_dev="0000:03:00.2")),
                    pci=(PciFunction(PFX, sriov_totalvfs=8, sriov_numvfs=1, virtfns=("0000:03:00.2",)),
                         PciFunction("0000:03:00.2", physfn=PFX)))
    topo = build_topology(snap, Expectations(rails=3))
    assert [(r.rail, r.source, r.netdev_name) for r in topo.rails] == [
        (0, "rails", "net_rail0"), (1, "rails", None), (2, "rails", None)]


def test_rails_flag_names_rails_by_the_first_template_with_only_a_rail_number():
    exp = Expectations(rails=2, net_templates=("net_rail%rail_id%_plane%plane_id%", "gpu%rail_id%"),
                       rdma_templates=("ib%rail_id%",))
    topo = build_topology(Snapshot(0.0, links=(Link(2, "gpu1", "UP", 1),)), exp)
    assert [(r.rail, r.expected_netdev, r.source, r.netdev_name) for r in topo.rails] == [
        (0, "gpu0", "rails", None), (1, "gpu1", "netdev", "gpu1")]
    none_fits = Expectations(rails=2, net_templates=("net_rail%rail_id%_plane%plane_id%",))
    assert build_topology(Snapshot(0.0), none_fits).rails == ()


def test_of_two_rdma_devices_on_a_rail_function_the_rdma_rule_names_the_rails():
    # Two InfiniBand devices on one function and no rdma link to tell them apart: the RDMA rule's
    # name picks the rail's; the other is listed beside it.
    ib = (RdmaPort(1, "ACTIVE", "LINK_UP", "infiniband"),)
    snap = Snapshot(0.0, rules=(RailRule(PFX, "rdma_rail0", "rdma", nodes.RDMA_RULES, 1),),
                    rdma_devices=(RdmaDevice("mlx5_0", pci=PFX, ports=ib), RdmaDevice("rdma_rail0", pci=PFX, ports=ib)))
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.rdma_device.name, rail.rdma.dev, rail.other_rdma) == ("rdma_rail0", "rdma_rail0", ("mlx5_0",))


def test_rails_are_ordered_by_rail_then_plane_none_first_then_function_none_first():
    links = (Link(2, "net_rail0_plane1", "UP", 1, parent_dev=PFY), Link(3, "net_rail00", "UP", 1, parent_dev=PFX),
             Link(4, "net_rail0_plane0", "UP", 1, parent_dev="0000:05:00.0"), Link(5, "net_rail0", "UP", 1),
             Link(6, "net_rail1", "UP", 1))
    topo = build_topology(Snapshot(0.0, links=links), EXP)
    assert [(r.rail, r.plane, r.pci, r.netdev_name) for r in topo.rails] == [
        (0, None, None, "net_rail0"), (0, None, PFX, "net_rail00"), (0, 0, "0000:05:00.0", "net_rail0_plane0"),
        (0, 1, PFY, "net_rail0_plane1"), (1, None, None, "net_rail1")]


def test_pfs_are_in_pci_address_order_a_wide_domain_by_its_value():
    # Hyper-V gives VMs 4-digit domains of any value (c3a1:...), Intel VMD 5-digit ones (10000:...).
    fns = tuple(PciFunction(b, sriov_totalvfs=8) for b in ("10000:e1:00.0", "c3a1:00:00.0", "0000:8d:00.0"))
    topo = build_topology(Snapshot(0.0, pci=fns), EXP)
    assert [p.bdf for p in topo.pfs] == ["0000:8d:00.0", "c3a1:00:00.0", "10000:e1:00.0"]


def test_a_rail_port_read_from_sysfs_alone_is_port_1_of_the_rail_netdev():
    # Without the rdma tool the port comes from sysfs: port 1, in the rdma words, on the rail's netdev.
    snap = replace(nodes.node(), rdma_links=())
    r0 = build_topology(snap, EXP).rails[0]
    assert r0.rdma == RdmaLink("rdma_rail0", 1, "ACTIVE", "LINK_UP", "net_rail0")


def test_of_two_roce_devices_on_a_rail_function_the_rdma_rule_names_the_rails():
    # "The only Ethernet one" decides only when there is one; with two, the rule's name does.
    eth = (RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),)
    snap = Snapshot(0.0, rules=(RailRule(PFX, "rdma_rail0", "rdma", nodes.RDMA_RULES, 1),),
                    rdma_devices=(RdmaDevice("mlx5_0", pci=PFX, ports=eth), RdmaDevice("rdma_rail0", pci=PFX, ports=eth)))
    (rail,) = build_topology(snap, EXP).rails
    assert (rail.rdma_device.name, rail.other_rdma) == ("rdma_rail0", ("mlx5_0",))


def test_a_rail_is_keyed_by_its_function_whatever_netdev_has_its_name():
    # Found by a netdev's name, the rail is the uplink of that netdev's function (a rename that left
    # the name on another netdev of the function is a mismatch, not a different rail netdev).
    by_netdev = Snapshot(0.0, links=(Link(2, "eth5", "UP", 1, phys_port_name="p0", phys_switch_id="aa",
                                          parent_bus="pci", parent_dev=PFX),
                                     Link(3, "net_rail0", "UP", 1, parent_bus="pci", parent_dev=PFX)))
    (rail,) = build_topology(by_netdev, EXP).rails
    assert (rail.source, rail.pci, rail.netdev_name, rail.renamed) == ("netdev", PFX, "eth5", True)
    # Named by a udev rule, the rail is its function's: a netdev of its name on another function is not it.
    by_rule = Snapshot(0.0, rules=(RailRule(PFX, "net_rail0", "net", nodes.NET_RULES, 1),),
                       links=(Link(3, "net_rail0", "UP", 1, parent_bus="pci", parent_dev=PFY),))
    (rail,) = build_topology(by_rule, EXP).rails
    assert (rail.source, rail.pci, rail.netdev) == ("udev", PFX, None)


def test_a_rails_flag_rail_on_a_virtual_link_with_a_parent_device_is_that_devices():
    # An IPoIB child interface is a virtual link whose sysfs names the PCI function it sits on.
    snap = Snapshot(0.0, links=(Link(2, "net_rail0", "UP", 1, kind="ipoib", parent_bus="pci", parent_dev=PFX),))
    (rail,) = build_topology(snap, Expectations(rails=1)).rails
    assert (rail.source, rail.netdev_name, rail.pci) == ("rails", "net_rail0", PFX)
