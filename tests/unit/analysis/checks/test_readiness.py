"""FirmwarePendingActivation, FirmwareStoredUnreadable, GpuDirectNotReady, MtuMismatch, DriverNotDoca, RailNamingConflict: each
healthy and faulty, and the traps of docs/design.md §4 (open kernel modules through DMA-BUF, a node without
GPUs, the management NIC's MTU, an OFED driver, the mismatch a conflict replaces)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.analysis.checks.readiness import common_mtu, dma_buf, is_inbox
from agent.config import Expectations
from agent.model import FirmwareInfo, GpuState, Link, PciPath, RailRule
from tests.support import nodes
from tests.support.nodes import found

PF0, PF1 = (f"pci/{b}" for b in nodes.PCIS[:2])


def fw(handle: str, running: str, stored: str) -> FirmwareInfo:
    return FirmwareInfo(handle, "mlx5_core", (("fw.version", running), ("fw", running)),
                        (("fw.version", stored), ("fw", stored)), "MT_0000000838")


# -- FirmwarePendingActivation -----------------------------------------------------------------


def test_firmware_running_as_stored_is_quiet():
    snap = replace(nodes.node(), firmware=(fw(PF0, "28.43.1014", "28.43.1014"), fw(PF1, "28.43.1014", "28.43.1014")))
    assert found(snap) == []


def test_firmware_flashed_not_active_is_info_on_the_nics_lowest_pf():
    snap = replace(nodes.node(), firmware=(fw(PF0, "28.42.1000", "28.42.1000"), fw(PF1, "28.42.1000", "28.43.1014")))
    assert found(snap) == [("FirmwarePendingActivation", "info", PF1)]
    f = next(f for f in _diag(snap).findings)
    assert f.evidence["pending"] == [{"handle": PF1, "running": "28.42.1000", "stored": "28.43.1014",
                                      "version": "fw.version"}, {"handle": PF1, "running": "28.42.1000",
                                                                  "stored": "28.43.1014", "version": "fw"}]
    # stored versions differ across the node's NICs: evidence
    assert f.evidence["stored_by_nic"] == {PF0: "28.42.1000", PF1: "28.43.1014"}


def test_two_pfs_of_one_nic_give_one_finding_on_the_lowest():
    snap = nodes.node()
    sid = next(lk.phys_switch_id for lk in snap.links if lk.ifname == "net_rail0")
    snap = nodes.replace_link(snap, "net_rail1", phys_switch_id=sid)  # both PFs: one NIC
    snap = replace(snap, firmware=(fw(PF0, "1", "2"), fw(PF1, "1", "2")))
    assert found(snap) == [("FirmwarePendingActivation", "info", PF0)]


def test_a_stored_version_of_all_ones_is_stored_unreadable_never_pending_activation():
    # issue 28 item 4: mlx5 since upstream 10dc35f6a443 reports a pending image it cannot read as
    # 255.255.65535; railscope said "firmware 255.255.65535 is flashed but 28.43.1014 runs"
    snap = replace(nodes.node(), firmware=(fw(PF0, "28.43.1014", "255.255.65535"), fw(PF1, "28.43.1014", "28.43.1014")))
    assert found(snap) == [("FirmwareStoredUnreadable", "warning", PF0)]
    (f,) = _diag(snap).findings
    assert "could not report its stored firmware" in f.message and "28.43.1014 runs" in f.message
    assert "check `devlink dev info` and the flash log before any reset" in f.message
    assert f.evidence["unreadable"][0] == {"handle": PF0, "version": "fw.version", "running": "28.43.1014",
                                           "stored": "255.255.65535"}
    # the sentinel is not a stored version the evidence of another NIC's pending activation compares
    snap = replace(snap, firmware=(fw(PF0, "28.43.1014", "255.255.65535"), fw(PF1, "28.42.1000", "28.43.1014")))
    assert found(snap) == [("FirmwareStoredUnreadable", "warning", PF0), ("FirmwarePendingActivation", "info", PF1)]
    pending = next(f for f in _diag(snap).findings if f.code == "FirmwarePendingActivation")
    assert "stored_by_nic" not in pending.evidence


def test_both_pfs_of_one_nic_unreadable_give_one_finding_on_the_lowest():
    snap = nodes.node()
    sid = next(lk.phys_switch_id for lk in snap.links if lk.ifname == "net_rail0")
    snap = nodes.replace_link(snap, "net_rail1", phys_switch_id=sid)
    snap = replace(snap, firmware=(fw(PF0, "28.43.1014", "255.255.65535"), fw(PF1, "28.43.1014", "255.255.65535")))
    assert found(snap) == [("FirmwareStoredUnreadable", "warning", PF0)]
    assert _diag(snap).findings[0].evidence["pfs"] == [PF0, PF1]


def test_a_running_version_of_all_ones_is_not_a_pending_activation():
    fi = fw(PF0, "255.255.65535", "28.43.1014")
    assert fi.pending == () and fi.unreadable == ()
    assert found(replace(nodes.node(), firmware=(fi,))) == []


def test_netdevsim_style_version_names_and_unreadable_firmware():
    fi = FirmwareInfo("netdevsim/netdevsim10", "netdevsim", (("fw.mgmt", "10.20.30"),), (("fw.mgmt", "10.20.30"),))
    assert fi.pending == () and fi.version == "10.20.30"
    # a version only in one set is not compared; no firmware read: nothing judged
    assert FirmwareInfo("h", running=(("fw.undi", "1"),), stored=(("fw.version", "2"),)).pending == ()
    assert found(replace(nodes.node(), firmware=())) == []


# -- GpuDirectNotReady -------------------------------------------------------------------------

SWITCH = "/sys/devices/pci0000:08/0000:08:01.0/0000:09:00.0"


def gpus(peer: bool = True, taint: str | None = "PO", loaded: bool = True, n: int = 1) -> GpuState:
    return GpuState(
        gpus=tuple(PciPath(f"0000:0b:0{i}.0", f"{SWITCH}/0000:0a:0{i}.0/0000:0b:0{i}.0", 0, "0x030200")
                   for i in range(n)),
        rail_paths=(PciPath(nodes.PCIS[0], f"{SWITCH}/0000:0a:07.0/{nodes.PCIS[0]}", 0),),
        peer_memory=(("/sys/module/nvidia_peermem/version", "570.133.20"),) if peer else (),
        nvidia_loaded=loaded, nvidia_version="570.133.20" if loaded else None, nvidia_taint=taint if loaded else None)


@pytest.mark.parametrize(("state", "kernel", "want"), [
    (gpus(), "6.8.0-60-generic", []),  # nvidia_peermem: ready
    (gpus(peer=False), "6.8.0-60-generic", [("GpuDirectNotReady", "warning", "node")]),  # proprietary, no peermem
    (gpus(peer=False, taint="OE"), "6.8.0-60-generic", []),  # trap: open modules, DMA-BUF
    (gpus(peer=False, taint="OE"), "5.10.0-28-amd64", [("GpuDirectNotReady", "warning", "node")]),  # < 5.12
    (gpus(peer=False, loaded=False), "6.8.0-60-generic", [("GpuDirectNotReady", "warning", "node")]),
    (gpus(peer=False, taint=None), "6.8.0-60-generic", []),  # taint unreadable: not judged
    (gpus(peer=False, n=0), "6.8.0-60-generic", []),  # trap: no GPUs, not judged
    (None, "6.8.0-60-generic", []),  # source not read
])
def test_gpudirect(state, kernel, want):
    snap = nodes.node()
    snap = replace(snap, gpus=state, versions=replace(snap.versions, kernel=kernel))
    assert [f for f in found(snap) if f[0] == "GpuDirectNotReady"] == want


def test_gpudirect_without_rails_is_not_judged():
    snap = replace(nodes.node(rules=False), gpus=gpus(peer=False), links=())
    assert [f for f in found(snap) if f[0] == "GpuDirectNotReady"] == []


def test_any_of_the_three_nccl_paths_is_enough():
    for path in ("/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                 "/sys/module/nvidia_peermem/version"):
        state = replace(gpus(peer=False), peer_memory=((path, "1.0"),))
        assert found(replace(nodes.node(), gpus=state)) == [], path


def test_dma_buf_needs_the_open_module_and_5_12():
    assert dma_buf(gpus(taint="OE"), "5.12.0") is True
    assert dma_buf(gpus(taint="OE"), "5.11.22") is False
    assert dma_buf(gpus(taint="POE"), "6.8.0") is False
    assert dma_buf(gpus(loaded=False), "6.8.0") is False


# -- MtuMismatch -------------------------------------------------------------------------------


def test_mtu_of_one_rail_differs_from_the_others():
    snap = nodes.replace_link(nodes.node(rails=4), "net_rail2", mtu=1500)
    assert found(snap) == [("MtuMismatch", "warning", "net_rail2")]


def test_mtu_tie_takes_the_largest_and_expect_mtu_wins():
    snap = nodes.replace_link(nodes.node(), "net_rail1", mtu=1500)
    assert found(snap) == [("MtuMismatch", "warning", "net_rail1")]
    assert found(snap, Expectations(mtu=1500)) == [("MtuMismatch", "warning", "net_rail0")]
    assert common_mtu([1500, 9000, 4200, 4200]) == 4200 and common_mtu([]) is None


def test_the_management_nic_is_not_a_rail():
    snap = nodes.add_link(nodes.node(), Link(ifindex=99, ifname="eno1", operstate="UP", carrier=1, mtu=1500,
                                             parent_bus="pci", parent_dev="0000:02:00.0"))
    assert found(snap) == []
    assert found(snap, Expectations(mtu=9000)) == []


# -- DriverNotDoca -----------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "want"), [
    ("25.10-1.7.1", []),  # DOCA
    ("5.8-1.0.1.1", []),  # trap: MLNX_OFED is not inbox
    (None, [("DriverNotDoca", "warning", "node")]),  # no module version: inbox
    ("6.8.0-60-generic", [("DriverNotDoca", "warning", "node")]),  # the kernel release: inbox
])
def test_driver_kind(version, want):
    snap = nodes.node()
    snap = replace(snap, versions=replace(snap.versions, mlx5_version=version))
    assert found(snap, Expectations(driver="doca")) == want
    assert found(snap) == []  # without --expect-driver nothing is judged


def test_is_inbox():
    assert is_inbox("", "6.8.0-60-generic") and not is_inbox("24.10-0.7.0.0", None)


# -- RailNamingConflict ------------------------------------------------------------------------


def test_two_rules_name_one_function_replace_the_mismatch():
    snap = nodes.node()
    snap = nodes.replace_link(snap, "net_rail1", ifname="eth5")
    site = RailRule(nodes.PCIS[1], "eth5", "net", "/etc/udev/rules.d/70-persistent-net.rules", 1)
    assert found(snap) == [("RailNameMismatch", "critical", "net_rail1")]
    assert found(replace(snap, rules=(*snap.rules, site))) == [("RailNamingConflict", "critical", PF1)]


def test_one_name_given_to_two_functions():
    snap = nodes.node()
    rules = tuple(replace(r, name="net_rail0") if r.kind == "net" and r.pci == nodes.PCIS[1] else r
                  for r in snap.rules)
    snap = nodes.replace_link(replace(snap, rules=rules), "net_rail1", ifname="enp141s0f0np0")
    assert found(snap) == [("RailNamingConflict", "critical", "net_rail0")]


def test_the_same_rule_twice_and_a_storage_nic_rule_are_no_conflict():
    snap = nodes.node()
    dup = replace(snap.rules[0], file="/etc/udev/rules.d/70-persistent-net.rules")
    storage = RailRule("0000:a1:00.0", "eth_sec0", "net", "/etc/udev/rules.d/70-persistent-net.rules", 2)
    assert found(replace(snap, rules=(*snap.rules, dup, storage))) == []


def _diag(snap):
    from agent.analysis.diagnose import diagnose

    return diagnose(snap, Expectations(), kernel_table=())
