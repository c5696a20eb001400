"""Rail codes: one finding per cause, keyed by the PCI function."""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.model import RailRule
from tests.support import nodes
from tests.support.nodes import found


def test_healthy_node_has_no_findings():
    assert found(nodes.node()) == []
    assert found(nodes.node(rails=4)) == []


def test_missing_rail_is_rail_missing_only():
    snap = nodes.drop_link(nodes.node(), "net_rail1")
    assert found(snap) == [("RailMissing", "critical", "net_rail1")]
    diag = diagnose(snap, Expectations(), kernel_table=())
    row = diag.rails[1]
    assert (row.rail, row.pci, row.numvfs, row.netdev, row.rdma, row.oper, row.firmware) == (
        1, nodes.PCIS[1], 1, None, None, None, None)


def test_renamed_rail_is_name_mismatch_only():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0")
    assert found(snap) == [("RailNameMismatch", "critical", "net_rail1")]
    assert diagnose(snap, Expectations(), kernel_table=()).rails[1].netdev == "enp141s0f0np0"


def test_rails_flag_without_rules_expects_missing_rails():
    snap = nodes.node(rules=False)
    assert found(snap, Expectations(rails=2)) == []
    assert found(snap, Expectations(rails=3)) == [("RailMissing", "critical", "net_rail2")]


def test_rails_flag_beyond_the_rules_reports_the_missing_rails_and_says_so():
    snap = nodes.node(rails=4)  # the rules name rails 0-3
    assert found(snap, Expectations(rails=6)) == [("RailMissing", "critical", "net_rail4"),
                                                 ("RailMissing", "critical", "net_rail5")]
    diag = diagnose(snap, Expectations(rails=6), kernel_table=())
    assert [r.rail for r in diag.rails] == [0, 1, 2, 3, 4, 5]
    assert diag.notes == ("--rails 6: the udev rules name rail(s) 0-3; rail(s) 4,5 are expected from --rails "
                          "as well",)
    assert diag.as_json()["notes"] == list(diag.notes)


def test_rails_flag_below_the_rules_leaves_the_rules_winning_and_says_so():
    snap = nodes.node(rails=4)
    assert found(snap, Expectations(rails=2)) == []
    diag = diagnose(snap, Expectations(rails=2), kernel_table=())
    assert [r.rail for r in diag.rails] == [0, 1, 2, 3]
    assert diag.notes == ("--rails 2: the udev rules name 4 rails (0-3); the rules win",)
    assert diagnose(snap, Expectations(rails=4), kernel_table=()).notes == ()
    assert "notes" not in diagnose(snap, Expectations(), kernel_table=()).as_json()


def test_long_names_are_one_template_finding_not_per_rail_mismatches():
    snap = nodes.replace_link(nodes.node(), "net_rail0", ifname="eth2")
    snap = nodes.replace_link(snap, "net_rail1", ifname="eth3")
    snap = replace(snap, rules=(
        RailRule(nodes.PCIS[0], "net_rail0_plane0", "net", nodes.NET_RULES, 4),
        RailRule(nodes.PCIS[1], "net_rail0_plane1", "net", nodes.NET_RULES, 5),
    ))
    assert found(snap) == [("RailTemplateInvalid", "critical", nodes.NET_RULES)]


def test_down_rail_gives_rail_and_rdma_link_down():
    snap = nodes.replace_link(nodes.node(), "net_rail0", operstate="DOWN", carrier=0)
    snap = replace(snap, rdma_links=tuple(replace(rl, state="DOWN", physical_state="DISABLED")
                                          if rl.dev == "rdma_rail0" else rl for rl in snap.rdma_links))
    assert found(snap) == [("RailLinkDown", "critical", "net_rail0"), ("RdmaLinkDown", "critical", "rdma_rail0")]
    assert diagnose(snap, Expectations(), kernel_table=()).rails[0].oper == "down"


def test_operstate_unknown_with_carrier_is_up():
    snap = nodes.replace_link(nodes.node(), "net_rail0", operstate="UNKNOWN")
    assert found(snap) == []


SITE = "/etc/udev/rules.d/70-persistent-net.rules"


def site_node():
    """Rails named by a site's own file (eth_rail / roce_rail), a storage NIC's rules beside them."""
    snap = nodes.node(rules=False)
    snap = nodes.replace_link(nodes.replace_link(snap, "net_rail0", ifname="eth_rail0"), "net_rail1", ifname="eth_rail1")
    rename = {"rdma_rail0": "roce_rail0", "rdma_rail1": "roce_rail1"}
    snap = replace(snap, rdma_links=tuple(replace(rl, dev=rename[rl.dev], netdev=rl.netdev.replace("net_", "eth_"))
                                          for rl in snap.rdma_links),
                   rdma_devices=tuple(replace(d, name=rename[d.name]) for d in snap.rdma_devices),
                   drivers=tuple(replace(d, netdev=d.netdev.replace("net_", "eth_")) for d in snap.drivers),
                   ethtool=tuple(replace(e, netdev=e.netdev.replace("net_", "eth_")) for e in snap.ethtool))
    rules = []
    for i, (pci, name) in enumerate(((nodes.PCIS[0], "rail0"), ("0000:1a:00.0", "sec0"), (nodes.PCIS[1], "rail1"))):
        rules.append(RailRule(pci, f"eth_{name}", "net", SITE, 2 * i + 1))
        rules.append(RailRule(pci, f"roce_{name}", "rdma", SITE, 2 * i + 2))
    return replace(snap, rules=tuple(rules))


def test_site_rules_name_rails_and_not_the_storage_nic():
    snap = site_node()
    assert found(snap) == []
    rails = diagnose(snap, Expectations(), kernel_table=()).rails
    assert [(r.rail, r.netdev, r.rdma, r.pci) for r in rails] == [
        (0, "eth_rail0", "roce_rail0", nodes.PCIS[0]), (1, "eth_rail1", "roce_rail1", nodes.PCIS[1])]


def test_site_rail_whose_rename_failed_is_not_invisible():
    snap = nodes.replace_link(site_node(), "eth_rail1", ifname="enp141s0f0np0")
    assert found(snap) == [("RailNameMismatch", "critical", "eth_rail1")]

def test_operstate_unknown_without_carrier_is_down():
    """UNKNOWN is up only with carrier (drivers without operstate support report UNKNOWN; carrier 0 is
    still no link)."""
    snap = nodes.replace_link(nodes.node(), "net_rail0", operstate="UNKNOWN", carrier=0)
    assert ("RailLinkDown", "critical", "net_rail0") in found(snap)
    assert diagnose(snap, Expectations(), kernel_table=()).rails[0].oper == "down"


def only(snap, exp=None):
    (f,) = diagnose(snap, exp or Expectations(), kernel_table=()).findings
    return f


def test_rail_missing_says_where_the_netdev_was_expected():
    f = only(nodes.drop_link(nodes.node(), "net_rail1"))
    assert f.message == f"rail 1: no netdev on PCI function {nodes.PCIS[1]} (expected net_rail1)"
    assert f.evidence == {"pci": nodes.PCIS[1], "source": "udev", "numvfs": 1}
    f = only(nodes.node(rules=False), Expectations(rails=3))
    assert (f.message, f.evidence) == ("rail 2: no netdev on this node (expected net_rail2)", {"source": "rails"})


def test_rail_missing_says_when_the_function_left_the_bus():
    snap = nodes.drop_link(nodes.node(), "net_rail1")
    snap = replace(snap, pci=tuple(p for p in snap.pci if p.bdf != nodes.PCIS[1]))
    f = only(snap)
    assert f.message == (f"rail 1: no netdev on PCI function {nodes.PCIS[1]} (expected net_rail1); "
                         "the PCI function is not in /sys/bus/pci/devices either")
    assert f.evidence == {"pci": nodes.PCIS[1], "source": "udev", "pci_function_present": False}
    # Without sysfs at all nothing says the function is gone.
    unread = replace(nodes.drop_link(nodes.node(), "net_rail1"), pci=())
    assert "pci_function_present" not in only(unread).evidence


def test_rail_name_mismatch_names_the_function_the_actual_name_and_the_rule():
    f = only(nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0"))
    assert f.message == (f"rail 1: the uplink of {nodes.PCIS[1]} is named enp141s0f0np0, not net_rail1 "
                         "(the udev rename did not apply)")
    assert f.evidence == {"pci": nodes.PCIS[1], "actual": "enp141s0f0np0", "rule": nodes.NET_RULES}


def test_rail_link_down_gives_operstate_carrier_and_losses():
    rdma_up = nodes.replace_link(nodes.node(), "net_rail0", operstate="DOWN", carrier=0, carrier_down_count=4)
    f = only(rdma_up)
    assert f.message == "rail 0: net_rail0 is not up (operstate DOWN, carrier 0)"
    assert f.evidence == {"netdev": "net_rail0", "operstate": "DOWN", "carrier": 0, "carrier_down_count": 4}


def test_a_renamed_rail_that_is_down_is_both_findings():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0", operstate="DOWN", carrier=0)
    assert found(snap) == [("RailLinkDown", "critical", "net_rail1"), ("RailNameMismatch", "critical", "net_rail1")]


def test_template_invalid_names_the_file_and_every_long_name():
    snap = nodes.replace_link(nodes.node(), "net_rail0", ifname="eth2")
    snap = nodes.replace_link(snap, "net_rail1", ifname="eth3")
    snap = replace(snap, rules=(
        RailRule(nodes.PCIS[0], "net_rail0_plane0", "net", nodes.NET_RULES, 4),
        RailRule(nodes.PCIS[1], "net_rail0_plane1", "net", nodes.NET_RULES, 5),
    ))
    f = only(snap)
    assert f.message == (f"2 netdev name(s) in {nodes.NET_RULES} are longer than 15 characters (IFNAMSIZ) and can "
                         "never be applied: net_rail0_plane0, net_rail0_plane1")
    assert f.evidence == {"names": ["net_rail0_plane0", "net_rail0_plane1"], "max_len": 15}


def test_multiplane_messages_name_the_plane():
    # net_%nic_id%_%plane_id%_%rail_id%: rail numbers repeat across planes, so the label names both.
    snap = replace(nodes.drop_link(nodes.node(), "net_rail1"), rules=(
        RailRule(nodes.PCIS[0], "net_0_0_0", "net", nodes.NET_RULES, 4),
        RailRule(nodes.PCIS[1], "net_0_1_0", "net", nodes.NET_RULES, 5),
    ))
    f = only(nodes.replace_link(snap, "net_rail0", ifname="net_0_0_0"))
    assert f.message == f"rail 0 plane 1: no netdev on PCI function {nodes.PCIS[1]} (expected net_0_1_0)"


def test_every_rail_message_on_a_multiplane_node_names_the_plane():
    snap = replace(nodes.node(), rules=(
        RailRule(nodes.PCIS[0], "net_0_0_0", "net", nodes.NET_RULES, 4),
        RailRule(nodes.PCIS[1], "net_0_1_0", "net", nodes.NET_RULES, 5),
        *(r for r in nodes.node().rules if r.kind == "rdma"),
    ))
    snap = nodes.replace_link(snap, "net_rail0", ifname="net_0_0_0")
    snap = nodes.replace_link(snap, "net_rail1", ifname="eth3", operstate="DOWN", carrier=0)
    snap = replace(snap, rdma_links=tuple(replace(rl, dev="mlx5_1", state="DOWN", physical_state="DISABLED")
                                          if rl.dev == "rdma_rail1" else rl for rl in snap.rdma_links),
                   rdma_devices=tuple(replace(d, name="mlx5_1") if d.name == "rdma_rail1" else d for d in snap.rdma_devices))
    got = {f.code: f.message for f in diagnose(snap, Expectations(), kernel_table=()).findings}
    assert set(got) == {"RailNameMismatch", "RailLinkDown", "RdmaNameMismatch", "RdmaLinkDown"}
    assert all(m.startswith("rail 0 plane 1: ") for m in got.values()), got


def test_a_missing_rail_does_not_stop_the_next_being_judged():
    snap = nodes.replace_link(nodes.drop_link(nodes.node(), "net_rail0"), "net_rail1", operstate="DOWN", carrier=0)
    assert found(snap) == [("RailLinkDown", "critical", "net_rail1"), ("RailMissing", "critical", "net_rail0")]


def test_a_rail_netdev_without_a_parent_device_is_found_by_its_name():
    # A netdev named like a rail whose sysfs names no parent device (no PCI function to look its
    # uplink up on) is still the rail's netdev: it is there, so it is judged, never "missing".
    from agent.model import Link, Snapshot

    snap = Snapshot(0.0, links=(Link(2, "net_rail0", "UP", 1), Link(3, "net_rail1", "DOWN", 0)))
    assert found(snap) == [("RailLinkDown", "critical", "net_rail1")]
    rows = diagnose(snap, Expectations(), kernel_table=()).rails
    assert [(r.rail, r.pci, r.netdev) for r in rows] == [(0, None, "net_rail0"), (1, None, "net_rail1")]


def _kernel_named(snap):
    # no rules, and names no template matches: systemd's predictable names
    for old, new in (("net_rail0", "enp12s0f0np0"), ("net_rail1", "enp141s0f0np0")):
        snap = nodes.replace_link(snap, old, ifname=new)
    return snap


def test_without_rules_or_a_template_name_a_node_has_no_rails_and_the_rail_map_finds_them_by_pci():
    snap = _kernel_named(nodes.node(rules=False))
    assert diagnose(snap, Expectations(), kernel_table=()).rails == ()
    exp = Expectations(rail_map=((0, nodes.PCIS[0]), (1, nodes.PCIS[1])))
    diag = diagnose(snap, exp, kernel_table=())
    assert found(snap, exp) == []
    assert [(r.rail, r.netdev, r.pci, r.rdma, r.oper) for r in diag.rails] == [
        (0, "enp12s0f0np0", nodes.PCIS[0], "rdma_rail0", "up"), (1, "enp141s0f0np0", nodes.PCIS[1], "rdma_rail1", "up")]
    # a rail of the map is judged as any rail: its link down is RailLinkDown on the name it has
    down = nodes.replace_link(snap, "enp141s0f0np0", operstate="DOWN", carrier=0)
    assert ("RailLinkDown", "critical", "enp141s0f0np0") in found(down, exp)


def test_a_rail_map_function_without_a_netdev_is_missing_by_its_address():
    snap = _kernel_named(nodes.node(rules=False))
    exp = Expectations(rail_map=((0, nodes.PCIS[0]), (1, "0000:0d:00.0")))
    got = [f for f in diagnose(snap, exp, kernel_table=()).findings if f.code == "RailMissing"]
    assert [(f.subject, f.message) for f in got] == [
        ("0000:0d:00.0", "rail 1: no netdev on PCI function 0000:0d:00.0 (named by --rail-map); the PCI function "
                         "is not in /sys/bus/pci/devices either")]


def test_the_rail_map_wins_over_the_rules_and_says_where_they_disagree():
    snap = nodes.node(rails=3)  # the rules name rails 0-2
    exp = Expectations(rail_map=((0, nodes.PCIS[1]), (1, nodes.PCIS[0])))
    diag = diagnose(snap, exp, kernel_table=())
    # the rules still say what the functions' names should be: no mismatch, the names are the rules'
    assert found(snap, exp) == []
    assert [(r.rail, r.netdev, r.pci) for r in diag.rails] == [(0, "net_rail1", nodes.PCIS[1]),
                                                               (1, "net_rail0", nodes.PCIS[0])]
    assert diag.notes == (
        f"--rail-map: rail 0 is {nodes.PCIS[1]}, which the udev rules name net_rail1 (rail 1); the map wins",
        f"--rail-map: rail 1 is {nodes.PCIS[0]}, which the udev rules name net_rail0 (rail 0); the map wins",
        f"--rail-map: the udev rules also name {nodes.PCIS[2]} (net_rail2), not rails by the map")
    # a failed rename of a mapped function is still the rule's finding
    renamed = nodes.replace_link(snap, "net_rail1", ifname="enp141s0f0np0")
    assert ("RailNameMismatch", "critical", "net_rail1") in found(renamed, exp)
    # --rails beyond the map is expected too, and said
    more = diagnose(snap, replace(exp, rails=3), kernel_table=())
    assert more.notes[-1] == "--rails 3: --rail-map names rail(s) 0,1; rail(s) 2 are expected from --rails as well"


def test_a_rail_map_naming_a_vf_has_no_netdev_and_says_why():
    from agent.model import Link

    vf = nodes.vf_of(nodes.PCIS[1])
    # the VF's own netdev, on the host (not moved into a pod)
    snap = nodes.add_link(_kernel_named(nodes.node(rules=False)), Link(60, "enp141s0f0v0", "UP", 1, parent_bus="pci",
                                                                       parent_dev=vf))
    exp = Expectations(rail_map=((0, nodes.PCIS[0]), (1, vf)))
    diag = diagnose(snap, exp, kernel_table=())
    assert ("RailMissing", "critical", nodes.vf_of(nodes.PCIS[1])) in found(snap, exp)
    assert diag.notes == (f"--rail-map: rail 1 is {nodes.vf_of(nodes.PCIS[1])}, a VF: a rail is a physical function",)
