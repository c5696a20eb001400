"""Conformance of the diagnosis to docs/design.md §2-§4, one test per rule the code once broke.

Each test states the docs/design.md sentence it holds the code to. Hand-built snapshots come from
``tests/support/nodes.py``; rules that live in the readers run on a copy of a generated node image.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from agent.analysis.diagnose import diagnose
from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.host.recorded import open_image
from agent.model import DevlinkPort, Event, Link, OvsInterface, PciFunction, RailRule, Versions
from agent.readers.snapshot import take_snapshot
from agent.report.text import render
from tests.support import nodes, script

EXP = Expectations()
IMAGES = Path(__file__).resolve().parents[2] / "images"
mi = script("tests/images/make_images.py")


def found(snap, exp=EXP, **kw):
    return [(f.code, f.severity, f.subject) for f in diagnose(snap, exp, kernel_table=(), **kw).findings]


def image_copy(tmp_path: Path, name: str = "spectrumx-2rail-healthy") -> Path:
    dst = tmp_path / name
    shutil.copytree(IMAGES / name, dst, symlinks=True)
    return dst


def diagnose_image(path: Path, exp: Expectations = EXP):
    host = open_image(str(path))
    try:
        snap = take_snapshot(host)
    finally:
        host.close()
    return diagnose(snap, exp, kernel_table=())


# -- "A rail's netdev is the uplink of its PCI function: the netdev whose parent_dev (or device link)
#    is that function" (§4); "/sys/class/net/<if>/device (symlink, when netlink gives no parent)" (§2)


def test_a_link_dump_without_parents_finds_rails_through_the_device_symlink(tmp_path: Path) -> None:
    img = image_copy(tmp_path)
    dump = json.loads((img / "netlink/links.json").read_text())
    for ln in dump["links"]:
        ln["parent_bus"] = ln["parent_dev"] = None  # a kernel without IFLA_PARENT_DEV_NAME
    (img / "netlink/links.json").write_text(json.dumps(dump))
    diag = diagnose_image(img)
    assert [(f.code, f.subject) for f in diag.findings] == []
    assert [(r.netdev, r.pci, r.oper, r.representors) for r in diag.rails] == [
        ("net_rail0", "0000:0c:00.0", "up", 1), ("net_rail1", "0000:8d:00.0", "up", 1)]


# -- "RailNameMismatch: the PCI function a rule names has an uplink netdev with another name" and
#    "RailTemplateInvalid: a naming rule's netdev name is longer than 15 ... RDMA names may be 64" (§4)


def test_an_rdma_rule_alone_names_no_netdev() -> None:
    snap = nodes.node()
    snap = replace(snap, rules=tuple(r for r in snap.rules if r.kind == "rdma"))
    snap = nodes.replace_link(snap, "net_rail1", ifname="enp141s0f0np0")
    assert found(snap) == []
    diag = diagnose(snap, EXP, kernel_table=())
    assert [(r.rail, r.netdev, r.rdma) for r in diag.rails] == [
        (0, "net_rail0", "rdma_rail0"), (1, "enp141s0f0np0", "rdma_rail1")]
    # its netdev going down is still judged, under the name it has
    snap = nodes.replace_link(snap, "enp141s0f0np0", operstate="DOWN", carrier=0)
    assert found(snap) == [("RailLinkDown", "critical", "enp141s0f0np0")]


def test_long_rdma_names_are_not_a_template_problem() -> None:
    snap = replace(nodes.node(), rules=(
        RailRule(nodes.PCIS[0], "rdma_rail0_plane0", "rdma", nodes.RDMA_RULES, 4),
        RailRule(nodes.PCIS[1], "rdma_rail0_plane1", "rdma", nodes.RDMA_RULES, 5),
    ))
    # 17 characters is no RailTemplateInvalid (RDMA names may be 64); the devices that kept other
    # names are each a failed RDMA rename
    assert found(snap) == [("RdmaNameMismatch", "critical", "rdma_rail0_plane0"),
                           ("RdmaNameMismatch", "critical", "rdma_rail0_plane1")]
    assert [(r.rail, r.plane) for r in diagnose(snap, EXP, kernel_table=()).rails] == [(0, 0), (0, 1)]


# -- "FirmwareSkew: rails of the same NIC model on one node run different firmware" (§4)


def test_rails_of_unknown_model_are_not_called_the_same_model() -> None:
    snap = nodes.node()
    snap = replace(snap, drivers=tuple(replace(d, psid=None, firmware="28.43.1014" if d.netdev == "net_rail1"
                                               else d.firmware) for d in snap.drivers),
                   rdma_devices=tuple(replace(d, hca_type=None) for d in snap.rdma_devices))
    assert found(snap) == []
    # the same node with the model known is skew
    snap = replace(snap, drivers=tuple(replace(d, psid="MT_0000000838") for d in snap.drivers))
    assert found(snap) == [("FirmwareSkew", "info", "node")]


# -- "a timeout on devlink while the SR-IOV daemon creates VFs means busy, not down" (§3)


def test_a_busy_devlink_is_said_to_be_busy_and_judges_nothing(tmp_path: Path) -> None:
    img = image_copy(tmp_path, "eswitch-mode-unexpected")
    manifest = json.loads((img / "manifest.json").read_text())
    for item in manifest["items"]:
        argv = item.get("argv") or []
        if argv[:3] == ["devlink", "-j", "dev"] and "pci/0000:8d:00.0" in argv:
            item["timed_out"] = True
    (img / "manifest.json").write_text(json.dumps(manifest))
    diag = diagnose_image(img, Expectations(eswitch_mode="switchdev", esw_multiport=False))
    assert diag.findings == ()
    reasons = dict(diag.unavailable)
    assert "busy, not down" in reasons["devlink pci/0000:8d:00.0"]
    assert diag.rails[1].eswitch_mode is None and diag.rails[1].esw_multiport is None


# -- messages name the plane on a multiplane node (rail numbers repeat across planes)


@pytest.mark.parametrize("code", ["RailLinkDown", "RdmaLinkDown"])
def test_messages_of_a_multiplane_rail_name_its_plane(code: str) -> None:
    snap = replace(nodes.node(), rules=(
        RailRule(nodes.PCIS[0], "net_0_0_0", "net", nodes.NET_RULES, 4),
        RailRule(nodes.PCIS[1], "net_0_1_0", "net", nodes.NET_RULES, 5),
    ))
    snap = nodes.replace_link(snap, "net_rail1", operstate="DOWN", carrier=0)
    snap = replace(snap, rdma_links=tuple(replace(rl, state="DOWN") if rl.dev == "rdma_rail1" else rl
                                          for rl in snap.rdma_links))
    (f,) = [f for f in diagnose(snap, EXP, kernel_table=()).findings if f.code == code]
    assert f.message.startswith("rail 0 plane 1:")
    out = io.StringIO()
    render(diagnose(snap, EXP, kernel_table=()), out, colour=False)
    assert "rail 0 plane 1:" in out.getvalue()


# -- "A NIC's esw_multiport is the value read on its lowest PF; that PF's handle is the subject of
#    EswMultiportUnexpected" (§4); a busy PF must not move the alert to another subject


def one_nic(snap):
    return replace(snap, links=tuple(replace(ln, phys_switch_id=nodes.SWITCH_IDS[0]) if ln.phys_switch_id else ln
                                     for ln in snap.links))


def test_multiport_subject_stays_the_lowest_pf_when_it_cannot_be_read() -> None:
    lowest = f"pci/{nodes.PCIS[0]}"
    snap = one_nic(nodes.node())
    snap = replace(snap, params=tuple(p for p in snap.params if p.handle != lowest), busy=(lowest,))
    assert found(snap, Expectations(esw_multiport=True)) == [("EswMultiportUnexpected", "warning", lowest)]


# -- "RepresentorStale: ... OVS ports whose netdev is gone" and "One finding per cause: a rail with no
#    netdev is RailMissing only" (§4): the OVS port of a rail's own uplink is not a representor


def test_the_ovs_port_of_a_missing_or_renamed_uplink_is_not_a_stale_representor() -> None:
    gone = OvsInterface("net_rail1", "", 0, -1, "down", "could not open network device net_rail1 (No such device)")
    snap = nodes.with_ovs(nodes.drop_link(nodes.node(), "net_rail1"), gone)
    assert found(snap) == [("RailMissing", "critical", "net_rail1")]
    snap = nodes.with_ovs(nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0"), gone)
    assert found(snap) == [("RailNameMismatch", "critical", "net_rail1")]
    # a representor's port is still one
    snap = nodes.with_ovs(nodes.node(), gone, OvsInterface("net_rail1_3", "", 0, -1, "down"))
    assert found(snap) == [("RepresentorStale", "warning", f"pci/{nodes.PCIS[1]}")]


# -- "Expectations come from flags, never from a silent default" (§4): the human "OK" says what it
#    did not judge, so a legacy PF on a node checked without flags does not read as checked


def test_human_ok_names_the_expectations_no_flag_gave(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    img = str(IMAGES / "eswitch-mode-unexpected")
    assert main(["doctor", "--from", img]) == 0
    out = capsys.readouterr().out
    assert "OK: 2 rail(s), no findings" in out
    assert "not judged (no expectation given): eswitch mode (--expect-eswitch-mode), esw_multiport " \
           "(--expect-esw-multiport), RDMA netns mode (--expect-rdma-netns), mlx5 driver kind (--expect-driver)" in out
    assert main(["doctor", "--from", img, "--expect-eswitch-mode", "switchdev", "--expect-esw-multiport", "false",
                 "--expect-rdma-netns", "exclusive", "--expect-driver", "doca"]) == 1
    out = capsys.readouterr().out
    assert "not judged" not in out and "EswitchModeUnexpected" in out


def test_a_function_named_by_an_rdma_rule_alone_gets_its_netdev_read(tmp_path: Path) -> None:
    """Statistics, speed and ethtool are read for every rail netdev, also one no net rule names and
    whose port name says nothing (legacy mode on an old kernel)."""
    img = mi.Image.load(IMAGES / "spectrumx-2rail-healthy")
    mi.rename_netdev(img, "net_rail1", "enp141s0f0np0")
    img.update_link("enp141s0f0np0", phys_port_name=None, phys_switch_id=None)
    del img.files[mi.NET_RULES]
    mi.set_counters(img, "enp141s0f0np0", drop=("rx_prio3_pause", "tx_prio3_pause"))
    img.save(tmp_path / "img", "test image\n", {})
    diag = diagnose_image(tmp_path / "img")
    assert [(f.code, f.subject) for f in diag.findings] == [("PfcDisabled", "enp141s0f0np0")]
    row = diag.rails[1]
    assert (row.netdev, row.speed_mbps, row.driver, row.psid) == ("enp141s0f0np0", 400000, "mlx5_core", "MT_0000000838")


def test_firmware_skew_of_two_models_is_one_finding_naming_both() -> None:
    snap = nodes.node(rails=4)
    cx7, bf3 = ("net_rail0", "net_rail1"), ("net_rail2", "net_rail3")
    newer = ("net_rail1", "net_rail3")
    snap = replace(snap, drivers=tuple(replace(d, firmware="28.43.1014" if d.netdev in newer else d.firmware)
                                       for d in snap.drivers),
                   rdma_devices=tuple(replace(d, hca_type="MT41692") if d.name in ("rdma_rail2", "rdma_rail3") else d
                                      for d in snap.rdma_devices))
    (f,) = diagnose(snap, EXP, kernel_table=()).findings
    assert (f.code, f.severity, f.subject) == ("FirmwareSkew", "info", "node")
    assert "MT4129" in f.message and "MT41692" in f.message
    assert f.evidence["models"] == {"MT41692": {"28.42.1000": [bf3[0]], "28.43.1014": [bf3[1]]},
                                    "MT4129": {"28.42.1000": [cx7[0]], "28.43.1014": [cx7[1]]}}


def test_netns_finding_says_where_the_node_asks_for_exclusive() -> None:
    snap = replace(nodes.node(netns="shared"), versions=Versions(
        kernel="6.8.0-60-generic", cmdline="ro ib_core.netns_mode=0",
        modprobe_netns_mode=(("/etc/modprobe.d/rdma.conf", "options ib_core netns_mode=1"),)))
    (f,) = diagnose(snap, EXP, kernel_table=()).findings
    assert f.code == "RdmaNetnsModeUnexpected" and "/proc/cmdline: ib_core.netns_mode=0" in f.message
    assert f.evidence["requested_by"] == ["/proc/cmdline: ib_core.netns_mode=0"]


def test_rail_missing_says_when_the_pci_function_is_gone_too() -> None:
    snap = nodes.drop_link(nodes.node(), "net_rail1")
    (f,) = diagnose(snap, EXP, kernel_table=()).findings
    assert "not in /sys/bus/pci/devices" not in f.message
    snap = replace(snap, pci=tuple(fn for fn in snap.pci if fn.bdf != nodes.PCIS[1] and fn.physfn != nodes.PCIS[1]))
    (f,) = diagnose(snap, EXP, kernel_table=()).findings
    assert (f.code, f.subject) == ("RailMissing", "net_rail1")
    assert f.message.endswith("; the PCI function is not in /sys/bus/pci/devices either")


def test_a_leak_of_hundreds_of_representors_is_one_readable_line() -> None:
    snap = nodes.set_numvfs(nodes.node(numvfs=120), nodes.PCIS[0], 0)
    (f,) = [f for f in diagnose(snap, EXP, kernel_table=()).findings if f.subject == f"pci/{nodes.PCIS[0]}"]
    assert f.code == "RepresentorStale" and len(f.evidence["stale_representors"]) == 120
    assert f.message.endswith("net_rail0_7 and 112 more") and len(f.message) < 300


# -- guards for rules the code already kept (they failed nowhere, and must keep holding)


def test_a_two_port_nics_second_pf_owns_its_pf1_representors() -> None:
    """``pf<N>`` is the NIC's device index, not the PCI function: the second PF's VFs are ``pf1vfM``,
    owned by their parent_dev and judged against that PF's own sriov_numvfs (§3, §4)."""
    snap = nodes.node(rails=1, numvfs=1)
    sw, pf1, vf0 = nodes.SWITCH_IDS[0], "0000:0c:00.1", "0000:0c:00.2"
    links, ports = list(snap.links), list(snap.ports)
    links.append(Link(20, "net_rail1", "UP", 1, 2, 1, 1, 9000, "b8:3f:d2:7a:40:99", "p1", sw, "pci", pf1))
    for v in range(2):
        links.append(Link(21 + v, f"net_rail1_{v}", "UP", 1, 2, 1, 1, 9000, None, f"pf1vf{v}", sw, "pci", pf1))
        ports.append(DevlinkPort(f"pci/{pf1}/{v + 1}", f"pci/{pf1}", v + 1, f"net_rail1_{v}", "pcivf", 0, 1, v))
    pci = [replace(fn, bdf=vf0) if fn.physfn else replace(fn, virtfns=(vf0,)) for fn in snap.pci]
    pci.append(PciFunction(pf1, 2, 8, driver="mlx5_core"))
    snap = replace(snap, links=tuple(links), ports=tuple(ports), pci=tuple(pci),
                   rules=(*snap.rules, RailRule(pf1, "net_rail1", "net", nodes.NET_RULES, 9)))
    snap = nodes.with_ovs(snap, OvsInterface("net_rail1", "", 20, 1, "up"),
                          OvsInterface("net_rail1_1", "", 22, 3, "down"))  # a VF down: normal
    assert found(snap) == []
    diag = diagnose(snap, EXP, kernel_table=())
    assert [(r.netdev, r.numvfs, r.representors) for r in diag.rails] == [("net_rail0", 1, 1), ("net_rail1", 2, 2)]
    # one VF fewer on the second PF: pf1vf1 is stale there, not on the first PF
    snap = replace(snap, pci=tuple(replace(fn, sriov_numvfs=1) if fn.bdf == pf1 else fn for fn in snap.pci))
    assert found(snap) == [("RepresentorStale", "warning", f"pci/{pf1}")]
    # an OVS port whose netdev is gone is evidence, never counted as a representor
    snap = nodes.with_ovs(snap, OvsInterface("net_rail1_7", "", 0, -1, "down"))
    (f,) = diagnose(snap, EXP, kernel_table=()).findings
    assert f.evidence["ovs_orphans"] == ["net_rail1_7"] and f.evidence["stale_representors"] == ["net_rail1_1"]
    assert diagnose(snap, EXP, kernel_table=()).rails[1].representors == 2


def test_the_document_has_exactly_the_design_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    main(["doctor", "--from", str(IMAGES / "representor-stale"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["schema", "node", "kernel", "rails", "findings", "unavailable"]  # unavailable: additive
    assert all(list(r) == ["rail", "plane", "netdev", "rdma", "pci", "oper", "speed_mbps", "mtu", "rdma_state", "driver",
                           "driver_version", "firmware", "psid", "eswitch_mode", "esw_multiport", "numvfs",
                           "representors", "gpu", "gpu_link", "peer"] for r in doc["rails"])
    assert all(list(f) == ["code", "severity", "subject", "message", "evidence"] for f in doc["findings"])
    assert (doc["rails"][0]["firmware"], doc["rails"][0]["psid"]) == ("28.42.1000", "MT_0000000838")


# -- "a missing file or command means not available, never a crash" (§2): one damaged value must not
#    cost the whole diagnosis


def test_a_parent_that_is_not_a_pci_address_does_not_stop_the_diagnosis() -> None:
    snap = nodes.add_link(nodes.node(), Link(77, "weird0", "UP", 1, phys_switch_id="ab12", parent_bus="pci",
                                             parent_dev="not-a-bdf"))
    assert found(snap) == []


def test_devlink_param_values_that_are_not_a_list_are_no_values() -> None:
    from agent.readers.devlink import parse_params

    (p,) = parse_params({"param": {"pci/0000:0c:00.0": [{"name": "esw_multiport", "values": True}]}})
    assert p.values == () and p.value() is None


def test_an_event_finding_is_the_event_and_says_how_long_before_the_capture() -> None:
    ev = Event(nodes.TAKEN_AT - 95, "LinkFlapping", "warning", "net_rail1", "net_rail1: 3 carrier losses",
               (("carrier_losses", 3),))
    (f,) = diagnose(nodes.node(), EXP, kernel_table=(), events=(ev,), capture_time=nodes.TAKEN_AT).findings
    assert (f.code, f.severity, f.subject) == ("LinkFlapping", "warning", "net_rail1")
    assert f.evidence == {"carrier_losses": 3, "event_ts": nodes.TAKEN_AT - 95}
    assert f.message == "net_rail1: 3 carrier losses (agent event, 95 s before the capture)"


def test_a_function_with_two_uplinks_gives_the_rail_the_one_with_its_name() -> None:
    """netdevsim (the kernel lab's NIC) has several ports per device; the rail is the one its name says."""
    snap = nodes.node(rules=False)
    snap = nodes.add_link(snap, Link(1, "eth1", "DOWN", 0, phys_port_name="p1", phys_switch_id=nodes.SWITCH_IDS[0],
                                     parent_bus="pci", parent_dev=nodes.PCIS[0]))
    snap = replace(snap, links=tuple(sorted(snap.links, key=lambda ln: ln.ifindex)))
    assert found(snap) == []
    assert diagnose(snap, EXP, kernel_table=()).rails[0].netdev == "net_rail0"
    assert build_topology(snap, EXP).pf(nodes.PCIS[0]).netdev == "net_rail0"
