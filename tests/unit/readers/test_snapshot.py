"""take_snapshot on the shared example image gives the facts its README states."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.config import ReadConfig
from agent.host import slug
from agent.host.recorded import RecordedHost, open_image
from agent.model import RdmaPort, Snapshot
from agent.readers.snapshot import take_snapshot
from tests.support import bigimage


@pytest.fixture
def snap(example_image: Path) -> Snapshot:
    with open_image(str(example_image)) as host:
        return take_snapshot(host, ReadConfig())


def test_node_kernel_and_driver(snap: Snapshot) -> None:
    assert snap.node == "gpu-node-017"
    assert snap.versions.kernel == "6.8.0-60-generic"
    assert snap.versions.mlx5_version == "25.10-1.7.1"
    assert snap.versions.netns_mode == "N"
    assert snap.rdma_netns == "exclusive"


def test_two_rail_netdevs_with_stats(snap: Snapshot) -> None:
    rails = {lk.ifname: lk for lk in snap.links if lk.stats64}
    assert set(rails) == {"net_rail0", "net_rail1"}
    assert rails["net_rail0"].parent_dev == "0000:0c:00.0"
    assert rails["net_rail1"].parent_dev == "0000:8d:00.0"
    assert all(lk.is_oper_up for lk in rails.values())
    # representors and the management NIC get no statistics (no firmware read per representor)
    assert snap.link("net_rail0_0").stats64 is None
    assert snap.link("ens7f0np0").stats64 is None


def test_pf_handles_eswitch_and_params(snap: Snapshot) -> None:
    esw = {e.handle: e.mode for e in snap.eswitch}
    assert esw == {"pci/0000:0c:00.0": "switchdev", "pci/0000:8d:00.0": "switchdev"}
    mp = {p.handle: p.value() for p in snap.params if p.name == "esw_multiport"}
    assert mp == {"pci/0000:0c:00.0": False, "pci/0000:8d:00.0": False}
    assert all(p.value() is False for p in snap.params if p.name == "esw_multiport")
    # VF and auxiliary handles are not queried
    assert not any(p.handle.startswith("auxiliary/") or p.handle.endswith(".1") for p in snap.params)


def test_one_representor_per_pf(snap: Snapshot) -> None:
    reps = [p for p in snap.ports if p.flavour == "pcivf"]
    assert sorted((p.dev, p.pfnum, p.vfnum, p.netdev) for p in reps) == [
        ("pci/0000:0c:00.0", 0, 0, "net_rail0_0"),
        ("pci/0000:8d:00.0", 0, 0, "net_rail1_0"),
    ]
    uplinks = {p.netdev: p.dev for p in snap.ports if p.flavour == "physical"}
    assert uplinks == {"net_rail0": "auxiliary/mlx5_core.eth.0", "net_rail1": "auxiliary/mlx5_core.eth.1"}


def test_sriov(snap: Snapshot) -> None:
    for bdf in ("0000:0c:00.0", "0000:8d:00.0"):
        fn = snap.pci_function(bdf)
        assert fn is not None and fn.sriov_numvfs == 1 and not fn.is_vf
        assert len(fn.virtfns) == 1


def test_rdma_active(snap: Snapshot) -> None:
    assert {(lk.dev, lk.port, lk.state, lk.netdev) for lk in snap.rdma_links} == {
        ("rdma_rail0", 1, "ACTIVE", "net_rail0"), ("rdma_rail1", 1, "ACTIVE", "net_rail1")}
    devs = {d.name: d for d in snap.rdma_devices}
    assert devs["rdma_rail0"].pci == "0000:0c:00.0"
    assert devs["rdma_rail0"].ports == (RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),)
    assert any(name == "np_ecn_marked_roce_packets" for _, name, _ in devs["rdma_rail0"].counters)


def test_firmware_and_pfc_counters(snap: Snapshot) -> None:
    for netdev in ("net_rail0", "net_rail1"):
        drv = snap.driver_of(netdev)
        assert drv is not None
        assert (drv.driver, drv.version, drv.firmware, drv.psid) == (
            "mlx5_core", "25.10-1.7.1", "28.42.1000", "MT_0000000838")
        st = snap.ethtool_of(netdev)
        assert st is not None
        assert st.get("rx_prio3_pause") is not None and st.get("tx_prio3_pause") is not None
        assert st.get("rx_prio0_pause") is None  # PFC on prio 3 only: a missing key stays missing
    assert {s.netdev for s in snap.ethtool} == {"net_rail0", "net_rail1"}


def test_rules_and_unavailable(snap: Snapshot) -> None:
    assert {(r.kind, r.pci, r.name) for r in snap.rules} == {
        ("net", "0000:0c:00.0", "net_rail0"), ("net", "0000:8d:00.0", "net_rail1"),
        ("rdma", "0000:0c:00.0", "rdma_rail0"), ("rdma", "0000:8d:00.0", "rdma_rail1")}
    assert snap.ovs is None
    # The example image predates the health and firmware sources: not recorded, and said so.
    # ... nor the degradation sources: no hwmon (a kernel before 6.5), no ethtool -m recorded; nor the
    # enable_roce param (RailRdmaMissing's RoCE clause is not judged on it).
    assert list(snap.unavailable) == [
        ("ovs", "no OVS db socket at /var/run/openvswitch/db.sock"),
        ("devlink pci/0000:0c:00.0", "devlink -j dev param show pci/0000:0c:00.0 name enable_roce: not recorded in "
                                     "this image"),
        ("devlink pci/0000:8d:00.0", "devlink -j dev param show pci/0000:8d:00.0 name enable_roce: not recorded in "
                                     "this image"),
        ("devlink health", "devlink -j health show: not recorded in this image"),
        ("firmware", "devlink -j dev info pci/0000:0c:00.0: not recorded in this image"),
        ("firmware", "devlink -j dev info pci/0000:8d:00.0: not recorded in this image"),
        ("thermal", "no mlx5 hwmon sensors on 0000:0c:00.0, 0000:8d:00.0 (kernel before 6.5, or not mlx5)"),
        ("gids net_rail0", "/sys/class/infiniband/rdma_rail0/ports/1/gids: not recorded in this image"),
        ("gids net_rail1", "/sys/class/infiniband/rdma_rail1/ports/1/gids: not recorded in this image"),
        ("ethtool -m net_rail0", "ethtool -m net_rail0: not recorded in this image"),
        ("ethtool -m net_rail1", "ethtool -m net_rail1: not recorded in this image"),
        # ... nor the lldp source (no lldpcli record, no listener frames)
        ("lldp", "lldpcli -f json show neighbors details: not recorded in this image")]
    assert snap.busy == ()


def test_rail_speed(snap: Snapshot) -> None:
    assert snap.link("net_rail0").speed_mbps == 400000
    assert snap.link("net_rail1").speed_mbps == 400000
    assert snap.link("net_rail0_0").speed_mbps is None


class _CountingHost(RecordedHost):
    """The real recorded host, noting every file and command the readers ask for."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.paths: list[str] = []
        self.argvs: list[tuple[str, ...]] = []

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        self.paths.append(path)
        return super().read_text(path, max_bytes)

    def listdir(self, path: str) -> list[str] | None:
        self.paths.append(path)
        return super().listdir(path)

    def run(self, argv, timeout_s: float = 10.0, max_bytes: int = 8 << 20):  # type: ignore[no-untyped-def]
        self.argvs.append(tuple(argv))
        return super().run(argv, timeout_s, max_bytes)


def test_big_switchdev_node_reads_rails_only(tmp_path: Path) -> None:
    host = _CountingHost(str(bigimage.build(tmp_path / "big", rails=2, vfs=20)))
    snap = take_snapshot(host, ReadConfig())
    assert len(snap.links) == 1 + 2 * 21
    assert [lk.ifname for lk in snap.links if lk.stats64] == ["net_rail0", "net_rail1"]
    assert len([p for p in snap.ports if p.flavour == "pcivf"]) == 40
    assert len(snap.rdma_links) == 2 * 21
    # ethtool on the two rails only, never on the 40 representors; one devlink call per PF and param
    ethtool = sorted(a for a in host.argvs if a[0] == "ethtool")
    # ethtool --version: the optics reader's form choice (text or --json -m), once, no device
    assert ethtool == [("ethtool", "--version"), ("ethtool", "-S", "net_rail0"), ("ethtool", "-S", "net_rail1"),
                       ("ethtool", "-i", "net_rail0"), ("ethtool", "-i", "net_rail1"),
                       ("ethtool", "-m", "net_rail0"), ("ethtool", "-m", "net_rail1")]
    # dev show, port show, health show (node-wide), and per PF eswitch + three params + dev info (firmware)
    assert len([a for a in host.argvs if a[0] == "devlink"]) == 3 + 2 * 5
    # sysfs of RDMA ports: port 1 (the uplink's) only, of 21 per device
    port_paths = {p.split("/ports/")[1].split("/")[0] for p in host.paths if "/ports/" in p}
    assert port_paths == {"1"}
    # one PCI function per PF: the representors' parent is the PF, the VFs are not asked for (neither by
    # the gpus source, which knows them for the NICs' VFs)
    pci_dirs = {p.split("/")[5] for p in host.paths if p.startswith("/sys/bus/pci/devices/")}
    assert pci_dirs == {"0000:10:00.0", "0000:11:00.0"}
    # the big image predates the enable_roce param read (one note per PF) and the health / firmware sources
    assert [s for s, _ in snap.unavailable][:6] == ["ovs", "devlink pci/0000:10:00.0", "devlink pci/0000:11:00.0",
                                                    "devlink health", "firmware", "firmware"]
    counters = {d.name: d.counters for d in snap.rdma_devices}
    assert counters["rdma_rail0"] == ((1, "out_of_buffer", 1),)


def test_missing_everything_never_raises(tmp_path: Path) -> None:
    (tmp_path / "img" / "fs").mkdir(parents=True)
    with open_image(str(tmp_path / "img")) as host:
        snap = take_snapshot(host, ReadConfig(), now=1.0)
    assert snap.taken_at == 1.0 and snap.links == () and snap.node is None and snap.ovs is None
    sources = [s for s, _ in snap.unavailable]
    for src in ("versions", "udev net rules", "netlink", "devlink", "rdma", "infiniband", "ovs"):
        assert src in sources, src


def test_every_command_run_is_in_the_example_image(example_image: Path) -> None:
    host = _CountingHost(str(example_image))
    snap = take_snapshot(host, ReadConfig())
    cmd_dir = example_image / "cmd"
    missing = [a for a in host.argvs if not (cmd_dir / f"{slug(list(a))}.stdout").exists()]
    # ovs-vsctl: skipped at capture (no OVS db socket); the enable_roce param, devlink health show, dev
    # info, ethtool --version and -m, lldpcli: the shared image predates them
    assert [a[0] for a in missing] == ["ovs-vsctl", *["devlink"] * 5, "ethtool", "ethtool", "ethtool", "lldpcli"]
    assert missing[1:] == [("devlink", "-j", "dev", "param", "show", "pci/0000:0c:00.0", "name", "enable_roce"),
                           ("devlink", "-j", "dev", "param", "show", "pci/0000:8d:00.0", "name", "enable_roce"),
                           ("devlink", "-j", "health", "show"), ("devlink", "-j", "dev", "info", "pci/0000:0c:00.0"),
                           ("devlink", "-j", "dev", "info", "pci/0000:8d:00.0"), ("ethtool", "--version"),
                           ("ethtool", "-m", "net_rail0"), ("ethtool", "-m", "net_rail1"),
                           ("lldpcli", "-f", "json", "show", "neighbors", "details")]
    assert snap.unavailable[:6] == (("ovs", "no OVS db socket at /var/run/openvswitch/db.sock"),
                                    ("devlink pci/0000:0c:00.0", "devlink -j dev param show pci/0000:0c:00.0 name "
                                                                 "enable_roce: not recorded in this image"),
                                    ("devlink pci/0000:8d:00.0", "devlink -j dev param show pci/0000:8d:00.0 name "
                                                                 "enable_roce: not recorded in this image"),
                                    ("devlink health", "devlink -j health show: not recorded in this image"),
                                    ("firmware", "devlink -j dev info pci/0000:0c:00.0: not recorded in this image"),
                                    ("firmware", "devlink -j dev info pci/0000:8d:00.0: not recorded in this image"))


def test_representor_ethtool_is_opt_in(example_image: Path) -> None:
    host = _CountingHost(str(example_image))
    take_snapshot(host, ReadConfig())
    assert not any(a[0] == "ethtool" and a[-1].endswith("_0") for a in host.argvs)
    host = _CountingHost(str(example_image))
    snap = take_snapshot(host, ReadConfig(representor_ethtool=True))
    assert ("ethtool", "-S", "net_rail0_0") in host.argvs
    assert ("ethtool -S net_rail0_0", "ethtool -S net_rail0_0: not recorded in this image") in snap.unavailable


def test_tar_gz_bundle_gives_the_same_snapshot(example_image: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "gpu-node-017.tar.gz"
    with tarfile.open(bundle, "w:gz") as tf:
        tf.add(example_image, arcname="gpu-node-017-bundle")
    with open_image(str(example_image)) as a, open_image(str(bundle)) as b:
        assert take_snapshot(a, ReadConfig()) == take_snapshot(b, ReadConfig())


@pytest.mark.netns
def test_live_snapshot_in_a_network_namespace() -> None:
    """The live doors end to end: netlink dump, rail stats and speed, ethtool ioctls, on a veth rail."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    ns = f"rs-snap-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace here")
    try:
        for argv in (["link", "add", "net_rail0", "type", "veth", "peer", "name", "peer0"],
                     ["link", "set", "net_rail0", "up"], ["link", "set", "peer0", "up"]):
            subprocess.run(["ip", "-n", ns, *argv], check=True, capture_output=True)
        code = ("import json\nfrom agent.host.live import LiveHost\nfrom agent.readers.snapshot import take_snapshot\n"
                "s = take_snapshot(LiveHost('/'))\n"
                "print(json.dumps({'stats': [lk.ifname for lk in s.links if lk.stats64],"
                " 'speed': {lk.ifname: lk.speed_mbps for lk in s.links},"
                " 'ethtool': {e.netdev: e.as_dict() for e in s.ethtool},"
                " 'drivers': {d.netdev: d.driver for d in s.drivers},"
                " 'sources': [u[0] for u in s.unavailable]}))\n")
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                             check=True, capture_output=True, text=True, timeout=120)
        got = json.loads(out.stdout)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    # net_rail0 is a rail by its name (template); peer0 is not, so it gets no stats or ethtool read
    assert got["stats"] == ["net_rail0"]
    assert got["speed"]["net_rail0"] == 10000 and got["speed"]["peer0"] is None
    assert list(got["ethtool"]) == ["net_rail0"] and "peer_ifindex" in got["ethtool"]["net_rail0"]
    assert got["drivers"] == {"net_rail0": "veth"}
    assert "netlink" not in got["sources"]
