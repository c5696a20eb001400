"""RdmaLinkDown alone, RailRdmaMissing and RdmaNetnsModeUnexpected."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.analysis.checks.rdma import rdma_subject, running_netns_mode
from agent.analysis.diagnose import diagnose
from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.model import DevlinkParam, RdmaDevice, RdmaLink, RdmaPort, Versions
from tests.support import nodes
from tests.support.nodes import found


def rdma_state(snap, dev, state, phys):
    return replace(snap, rdma_links=tuple(replace(rl, state=state, physical_state=phys) if rl.dev == dev else rl
                                          for rl in snap.rdma_links))


def test_rdma_port_down_while_netdev_up():
    snap = rdma_state(nodes.node(), "rdma_rail1", "INIT", "LINK_UP")
    assert found(snap) == [("RdmaLinkDown", "critical", "rdma_rail1")]


def test_unreadable_rdma_state_raises_nothing():
    assert found(rdma_state(nodes.node(), "rdma_rail1", None, None)) == []


def _no_rdma(snap):
    """mlx5_ib (or ib_core) not loaded: no RDMA device in sysfs, nothing in ``rdma link show``."""
    return replace(snap, rdma_links=(), rdma_devices=())


def _no_rdma_rules(snap):
    return replace(snap, rules=tuple(r for r in snap.rules if r.kind != "rdma"))


def _enable_roce(snap, value):
    pfs = {p.handle for p in snap.params}
    return replace(snap, params=(*snap.params, *(DevlinkParam(h, "enable_roce", (("driverinit", value),))
                                                 for h in sorted(pfs))))


def test_rails_whose_rules_name_an_rdma_device_and_have_none_are_rail_rdma_missing():
    # issue 28 item 9: the healthy node without its RDMA devices used to give no finding at all
    assert found(_no_rdma(nodes.node())) == [("RailRdmaMissing", "critical", "net_rail0"),
                                             ("RailRdmaMissing", "critical", "net_rail1")]
    f = next(f for f in diagnose(_no_rdma(nodes.node()), Expectations(), kernel_table=()).findings)
    assert f.evidence["netdev"] == "net_rail0" and f.evidence["expected_rdma"] == "rdma_rail0"
    assert "names its RDMA device rdma_rail0" in f.message and "NCCL falls back to sockets" in f.message


def test_an_mlx5_pf_with_roce_enabled_and_no_rdma_device_is_rail_rdma_missing():
    snap = _enable_roce(_no_rdma_rules(_no_rdma(nodes.node())), True)
    assert found(snap) == [("RailRdmaMissing", "critical", "net_rail0"), ("RailRdmaMissing", "critical", "net_rail1")]
    f = diagnose(snap, Expectations(), kernel_table=()).findings[0]
    assert "mlx5 with RoCE enabled" in f.message and f.evidence["driver"] == "mlx5_core"


def test_without_rdma_rules_and_without_roce_a_rail_without_rdma_is_not_judged():
    assert found(_no_rdma_rules(_no_rdma(nodes.node()))) == []
    assert found(_enable_roce(_no_rdma_rules(_no_rdma(nodes.node())), False)) == []
    # RoCE enabled on a PF whose driver is not mlx5 says nothing of mlx5_ib
    snap = _enable_roce(_no_rdma_rules(_no_rdma(nodes.node())), True)
    snap = replace(snap, drivers=tuple(replace(d, driver="ice") for d in snap.drivers),
                   pci=tuple(replace(p, driver="ice") for p in snap.pci))
    assert found(snap) == []


def test_expect_rdma_judges_a_rail_nothing_else_expects_rdma_of():
    snap = _no_rdma_rules(_no_rdma(nodes.node()))
    assert found(snap, Expectations(rdma=True)) == [("RailRdmaMissing", "critical", "net_rail0"),
                                                    ("RailRdmaMissing", "critical", "net_rail1")]
    assert found(nodes.node(), Expectations(rdma=True)) == []  # every rail has its RDMA device


def test_a_rail_with_an_rdma_device_under_another_name_is_a_name_mismatch_not_missing():
    snap = nodes.node()
    snap = replace(snap, rdma_links=tuple(replace(rl, dev="mlx5_1") if rl.dev == "rdma_rail1" else rl
                                          for rl in snap.rdma_links),
                   rdma_devices=tuple(replace(d, name="mlx5_1") if d.name == "rdma_rail1" else d
                                      for d in snap.rdma_devices))
    assert found(snap) == [("RdmaNameMismatch", "critical", "rdma_rail1")]


def test_a_rail_without_netdev_is_rail_missing_only():
    snap = _no_rdma(nodes.drop_link(nodes.node(), "net_rail1"))
    assert ("RailMissing", "critical", "net_rail1") in found(snap)
    assert ("RailRdmaMissing", "critical", "net_rail1") not in found(snap)


@pytest.mark.parametrize(("running", "expect", "cmdline", "modprobe", "want"), [
    ("exclusive", None, "", (), False),
    ("shared", "shared", "", (), False),
    ("shared", "exclusive", "", (), True),
    ("exclusive", "shared", "", (), True),
    ("shared", None, "ro ib_core.netns_mode=0", (), True),
    ("shared", None, "", (("/etc/modprobe.d/ib_core.conf", "options ib_core netns_mode=0"),), True),
    ("exclusive", None, "ro ib_core.netns_mode=0", (), False),
    (None, "exclusive", "", (), False),
])
def test_netns_mode(running, expect, cmdline, modprobe, want):
    snap = replace(nodes.node(), rdma_netns=running,
                   versions=Versions(kernel="6.8.0-60-generic", cmdline=cmdline, modprobe_netns_mode=modprobe))
    got = found(snap, Expectations(rdma_netns=expect))
    assert got == ([("RdmaNetnsModeUnexpected", "warning", "node")] if want else [])


def test_netns_mode_from_sysfs_when_rdma_tool_missing():
    snap = replace(nodes.node(), rdma_netns=None, versions=Versions(netns_mode="Y"))
    assert found(snap, Expectations(rdma_netns="exclusive")) == [("RdmaNetnsModeUnexpected", "warning", "node")]


# -- RdmaNameMismatch: the rule names an RDMA device the function does not have (rename failed)


def rdma_renamed(snap, old, new):
    """The RDMA device ``old`` kept the kernel name ``new``: rdma links and sysfs say ``new``."""
    return replace(snap, rdma_links=tuple(replace(rl, dev=new) if rl.dev == old else rl for rl in snap.rdma_links),
                   rdma_devices=tuple(replace(d, name=new) if d.name == old else d for d in snap.rdma_devices))


def test_failed_rdma_rename_is_rdma_name_mismatch_on_the_expected_name():
    snap = rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1")
    assert found(snap) == [("RdmaNameMismatch", "critical", "rdma_rail1")]
    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert f.evidence["actual"] == "mlx5_1" and f.evidence["rule"] == f"{nodes.RDMA_RULES} line 5"
    # the rail table shows the name the device has
    assert [r.rdma for r in diagnose(snap, Expectations(), kernel_table=()).rails] == ["rdma_rail0", "mlx5_1"]


def test_rdma_link_down_on_a_renamed_device_keeps_the_expected_subject():
    snap = rdma_state(rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1"), "mlx5_1", "DOWN", "DISABLED")
    assert found(snap) == [("RdmaLinkDown", "critical", "rdma_rail1"), ("RdmaNameMismatch", "critical", "rdma_rail1")]


def test_without_an_rdma_rule_nothing_expects_an_rdma_name():
    snap = rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1")
    snap = replace(snap, rules=tuple(r for r in snap.rules if r.kind == "net"))
    assert found(snap) == []
    assert found(rdma_state(snap, "mlx5_1", "DOWN", "DISABLED")) == [("RdmaLinkDown", "critical", "mlx5_1")]


def test_missing_rail_is_rail_missing_only_even_with_a_renamed_rdma_device():
    snap = nodes.drop_link(rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1"), "net_rail1")
    assert found(snap) == [("RailMissing", "critical", "net_rail1")]


# -- a function with two RDMA devices (ConnectX-8: an SMI device beside the RoCE one)


def with_smi(snap, pci, name, netdev_on_link=True):
    """An SMI device (InfiniBand link layer, no netdev) on ``pci``, as ``rdma dev add ... type SMI`` makes."""
    smi = RdmaDevice(name, pci, "40.44.1036", "MT4131", None, (RdmaPort(1, "ACTIVE", "LINK_UP", "infiniband"),))
    links = (*snap.rdma_links, RdmaLink(name, 1, "ACTIVE", "LINK_UP", None))
    if not netdev_on_link:
        links = tuple(replace(rl, netdev=None) for rl in links)
    return replace(snap, rdma_devices=(*snap.rdma_devices, smi), rdma_links=links)


@pytest.mark.parametrize("smi", ["smi1", "aaa_smi"])  # "aaa_smi": a name that sorts first, to show order plays no part
@pytest.mark.parametrize("netdev_on_link", [True, False])
def test_rail_rdma_device_is_the_roce_one_never_the_first_by_name(smi, netdev_on_link):
    snap = with_smi(nodes.node(), nodes.PCIS[0], smi, netdev_on_link)
    topo = build_topology(snap, Expectations())
    rail0 = topo.rails[0]
    assert (rail0.rdma.dev, rail0.rdma_device.name, rail0.other_rdma) == ("rdma_rail0", "rdma_rail0", (smi,))
    assert found(snap) == []
    down = rdma_state(snap, "rdma_rail0", "DOWN", "DISABLED")
    (f,) = diagnose(down, Expectations(), kernel_table=()).findings
    assert (f.code, f.subject, f.evidence["device"], f.evidence["others"]) == (
        "RdmaLinkDown", "rdma_rail0", "rdma_rail0", [smi])


def test_two_devices_nothing_tells_apart_is_no_rail_device_and_a_failed_rename():
    snap = with_smi(nodes.node(), nodes.PCIS[0], "smi1", netdev_on_link=False)
    snap = replace(snap, rdma_devices=tuple(replace(d, ports=()) for d in snap.rdma_devices))
    snap = rdma_renamed(snap, "rdma_rail0", "mlx5_0")
    rail0 = build_topology(snap, Expectations()).rails[0]
    assert rail0.rdma_device is None and rail0.other_rdma == ("mlx5_0", "smi1")
    (f,) = [f for f in diagnose(snap, Expectations(), kernel_table=()).findings if f.code == "RdmaNameMismatch"]
    assert f.subject == "rdma_rail0" and f.evidence["others"] == ["mlx5_0", "smi1"]


def only(snap, exp=None):
    (f,) = diagnose(snap, exp or Expectations(), kernel_table=()).findings
    return f


def test_rdma_name_mismatch_says_what_the_function_has_and_why_it_matters():
    f = only(rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1"))
    assert f.message == (f"rail 1: the RDMA device of {nodes.PCIS[1]} is named mlx5_1, not rdma_rail1 (the RDMA "
                         "rename did not apply; NCCL_IB_HCA and the RDMA device plugin select devices by name)")
    assert f.evidence == {"pci": nodes.PCIS[1], "actual": "mlx5_1", "rule": f"{nodes.RDMA_RULES} line 5",
                          "netdev": "net_rail1"}


def test_rdma_name_mismatch_without_a_rail_device_lists_the_candidates():
    snap = with_smi(nodes.node(), nodes.PCIS[0], "smi1", netdev_on_link=False)
    snap = replace(snap, rdma_devices=tuple(replace(d, ports=()) for d in snap.rdma_devices))
    f = only(rdma_renamed(snap, "rdma_rail0", "mlx5_0"))
    assert f.message.startswith(f"rail 0: no RDMA device of {nodes.PCIS[0]} is named rdma_rail0 (it has mlx5_0, smi1) "
                                "(the RDMA rename did not apply")
    assert f.evidence == {"pci": nodes.PCIS[0], "rule": f"{nodes.RDMA_RULES} line 4", "netdev": "net_rail0",
                          "others": ["mlx5_0", "smi1"]}


def test_rdma_link_down_names_the_port_and_both_states():
    f = only(rdma_state(nodes.node(), "rdma_rail1", "INIT", "LINK_UP"))
    assert f.message == "rail 1: RDMA port rdma_rail1/1 is INIT / LINK_UP"
    assert f.evidence == {"port": 1, "state": "INIT", "physical_state": "LINK_UP", "netdev": "net_rail1",
                          "rail": "net_rail1", "device": "rdma_rail1"}
    f = only(rdma_state(nodes.node(), "rdma_rail1", None, "DISABLED"))
    assert f.message == "rail 1: RDMA port rdma_rail1/1 is ? / DISABLED"
    f = only(rdma_state(nodes.node(), "rdma_rail1", "DOWN", None))
    assert f.message == "rail 1: RDMA port rdma_rail1/1 is DOWN / ?"


def test_every_rail_port_is_judged():
    snap = rdma_state(rdma_state(nodes.node(), "rdma_rail0", "DOWN", "DISABLED"), "rdma_rail1", "DOWN", "DISABLED")
    assert found(snap) == [("RdmaLinkDown", "critical", "rdma_rail0"), ("RdmaLinkDown", "critical", "rdma_rail1")]
    first_gone = rdma_state(nodes.drop_link(nodes.node(), "net_rail0"), "rdma_rail1", "DOWN", "DISABLED")
    assert ("RdmaLinkDown", "critical", "rdma_rail1") in found(first_gone)


def test_rdma_subject_is_the_rules_name_else_the_rails_device_else_none():
    snap = replace(rdma_renamed(nodes.node(), "rdma_rail1", "mlx5_1"), rules=tuple(
        r for r in nodes.node().rules if not (r.kind == "rdma" and r.pci == nodes.PCIS[1])))
    rail0, rail1 = build_topology(snap, Expectations()).rails
    assert (rdma_subject(rail0), rdma_subject(rail1)) == ("rdma_rail0", "mlx5_1")
    no_links = replace(snap, rdma_links=(), rdma_devices=tuple(replace(d, ports=()) for d in snap.rdma_devices))
    rail1 = build_topology(no_links, Expectations()).rails[1]
    assert rail1.rdma is None and rdma_subject(rail1) == "mlx5_1"
    nothing = replace(no_links, rdma_devices=())
    assert rdma_subject(build_topology(nothing, Expectations()).rails[1]) is None


def netns(running, cmdline="", modprobe=()):
    return replace(nodes.node(), rdma_netns=running,
                   versions=Versions(kernel="6.8.0-60-generic", cmdline=cmdline, modprobe_netns_mode=modprobe))


MODPROBE = "/etc/modprobe.d/ib_core.conf"


def test_netns_finding_gives_every_reason_and_where_the_node_asks():
    snap = netns("shared", "ro ib_core.netns_mode=0", ((MODPROBE, "options ib_core netns_mode=0 "),))
    f = only(snap, Expectations(rdma_netns="exclusive"))
    assert f.message == (f"RDMA netns mode is shared: expected exclusive; the node asks for exclusive mode ({MODPROBE}: "
                         "options ib_core netns_mode=0; /proc/cmdline: ib_core.netns_mode=0) but the running ib_core "
                         "was loaded shared (module not reloaded or node not rebooted)")
    assert f.evidence == {"running": "shared", "expected": "exclusive",
                          "requested_by": [f"{MODPROBE}: options ib_core netns_mode=0", "/proc/cmdline: ib_core.netns_mode=0"]}


def test_netns_the_cmdline_wins_and_only_the_asks_for_the_winning_mode_are_named():
    snap = netns("shared", "ro ib_core.netns_mode=0", ((MODPROBE, "options ib_core netns_mode=1"),))
    assert only(snap).evidence["requested_by"] == ["/proc/cmdline: ib_core.netns_mode=0"]
    shared_wins = netns("shared", "ro ib_core.netns_mode=Y", ((MODPROBE, "options ib_core netns_mode=0"),))
    assert found(shared_wins) == []


@pytest.mark.parametrize(("word", "mode"), [("0", "exclusive"), ("N", "exclusive"), ("exclusive", "exclusive"),
                                            ("false", "exclusive"), ("1", "shared"), ("y", "shared"),
                                            ("Shared", "shared"), ("true", "shared"), ("2", None)])
def test_netns_mode_words(word, mode):
    snap = nodes.node()
    assert running_netns_mode(replace(snap, rdma_netns=word, versions=replace(snap.versions, netns_mode=None))) == mode
    # what rdma system show says wins over the module parameter; a word that is no mode falls back to it
    assert running_netns_mode(replace(snap, rdma_netns=None, versions=replace(snap.versions, netns_mode=word))) == mode
    assert running_netns_mode(replace(snap, rdma_netns=word, versions=replace(snap.versions, netns_mode="Y"))) == (
        mode or "shared")


def test_a_netns_value_that_is_no_mode_asks_for_nothing():
    assert found(netns("shared", "ro ib_core.netns_mode=2", ((MODPROBE, "options ib_core netns_mode=maybe"),))) == []
    assert found(netns("shared", "ro xib_core.netns_mode=0")) == []
