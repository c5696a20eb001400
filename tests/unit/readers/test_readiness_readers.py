"""The firmware and gpus sources: devlink dev info parsed (mlx5 and netdevsim), GPUs found by vendor and
class with their PCIe places, the peer-memory paths NCCL probes, the rail <-> GPU link words."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.analysis.gpu_topology import gpu_for, link_word
from agent.host.recorded import open_image
from agent.model import UNREADABLE_VERSION, GpuState, PciPath
from agent.readers.firmware import parse_dev_info
from agent.readers.gpus import is_gpu, parse_pci_path, read_gpus
from agent.readers.snapshot import take_snapshot

IMAGES = Path(__file__).resolve().parents[2] / "images"


def test_dev_info_of_mlx5_and_netdevsim():
    doc = {"info": {"pci/0000:0c:00.0": {"driver": "mlx5_core", "serial_number": "MT2330X01234", "versions": {
        "fixed": {"fw.psid": "MT_0000000838"}, "running": {"fw.version": "28.42.1000", "fw": "28.42.1000"},
        "stored": {"fw.version": "28.43.1014", "fw": "28.43.1014"}}}}}
    (fi,) = parse_dev_info(doc)
    assert (fi.handle, fi.psid, fi.version, fi.stored_version) == ("pci/0000:0c:00.0", "MT_0000000838",
                                                                    "28.42.1000", "28.43.1014")
    assert [p[0] for p in fi.pending] == ["fw.version", "fw"]
    (ns,) = parse_dev_info({"info": {"netdevsim/netdevsim10": {"driver": "netdevsim", "versions": {
        "running": {"fw.mgmt": "10.20.30"}, "stored": {"fw.mgmt": "10.20.30"}}}}})
    assert ns.version == "10.20.30" and ns.pending == ()
    # junk: a bad handle, values that are not versions, no versions at all
    got = parse_dev_info({"info": {"bad": {}, "pci/x": {"versions": {"running": {"fw": True, "a": ["1"]}}},
                                   "pci/y": {}}})
    assert [(f.handle, f.running) for f in got] == [("pci/x", ()), ("pci/y", ())]
    with pytest.raises(ValueError):
        parse_dev_info({"dev": {}})


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "mlx5"


def _text_dev_info(text: str) -> dict:
    """``devlink dev info`` text (as posted) -> the ``-j`` document iproute2 prints for it."""
    info: dict = {}
    handle = section = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", "$")):
            continue
        if not line.startswith(" ") and line.endswith(":"):
            handle, section = line[:-1], None
            info[handle] = {"versions": {}}
            continue
        words = line.split()
        if len(words) == 1 and words[0].endswith(":") and words[0][:-1] in ("fixed", "running", "stored"):
            section = words[0][:-1]
            info[handle]["versions"][section] = {}
        elif len(words) == 2 and section is not None:
            info[handle]["versions"][section][words[0]] = words[1]
        elif len(words) == 2 and handle is not None:
            info[handle][words[0]] = words[1]
    return {"info": info}


def test_dev_info_of_a_stored_image_mlx5_cannot_read():
    # upstream 10dc35f6a443's own example (after a failed flash): stored 255.255.65535, never pending
    (fi,) = parse_dev_info(_text_dev_info(
        (FIXTURES / "devlink-dev-info-stored-unreadable-10dc35f6a443.txt").read_text()))
    assert (fi.handle, fi.driver, fi.psid, fi.version) == ("pci/0000:00:06.0", "mlx5_core", "MT_0000000436",
                                                           "22.41.0188")
    assert fi.stored_version == UNREADABLE_VERSION and fi.pending == ()
    assert fi.unreadable == (("fw.version", "22.41.0188", UNREADABLE_VERSION), ("fw", "22.41.0188", UNREADABLE_VERSION))
    # a ConnectX-7 that runs what it stores (Jiri Pirko's example, two PFs and their nested instances)
    got = parse_dev_info(_text_dev_info((FIXTURES / "devlink-dev-info-cx7-running-stored.txt").read_text()))
    assert [(f.handle, f.version, f.stored_version, f.pending, f.unreadable) for f in got if f.handle.startswith("pci/")] \
        == [("pci/0000:08:00.0", "28.41.1000", "28.41.1000", (), ()), ("pci/0000:08:00.1", "28.41.1000", "28.41.1000",
                                                                     (), ())]


def test_gpu_classes():
    assert is_gpu("0x10de", "0x030200") and is_gpu("0x10DE", "0x030000")
    assert not is_gpu("0x10de", "0x068000")  # NVSwitch: a bridge, not a GPU
    assert not is_gpu("0x10de", "0x040300")  # the GPU's HD audio function
    assert not is_gpu("0x15b3", "0x020000") and not is_gpu("0x10de", "garbage")


def test_pci_path_rules():
    p = parse_pci_path("0000:18:00.0", "/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", "-1")
    assert p.path and p.numa_node is None
    # a path that does not end in the function, or leaves /sys/devices, is no place in the tree
    assert parse_pci_path("0000:18:00.0", "/sys/devices/pci0000:15/0000:19:00.0", "0").path is None
    assert parse_pci_path("0000:18:00.0", "/tmp/0000:18:00.0", "0").path is None


def test_gpus_of_the_hgx_image():
    with open_image(str(IMAGES / "gpudirect-hgx-pix-healthy")) as host:
        st = read_gpus(host, ["0000:0c:00.0", "0000:8d:00.0"])
    assert [(g.bdf, g.numa_node, g.pci_class) for g in st.gpus] == [("0000:0b:00.0", 0, "0x030200"),
                                                                     ("0000:8b:00.0", 1, "0x030200")]
    assert st.peer_memory == (("/sys/module/nvidia_peermem/version", "570.133.20"),)
    assert (st.nvidia_loaded, st.nvidia_version, st.nvidia_taint) == (True, "570.133.20", "PO")
    assert gpu_for("0000:0c:00.0", st) == ("0000:0b:00.0", "PIX")
    assert gpu_for("0000:8d:00.0", st) == ("0000:8b:00.0", "PIX")


def test_a_node_without_gpus_reads_nothing_and_notes_nothing(example_image: Path):
    with open_image(str(example_image)) as host:
        snap = take_snapshot(host)
    assert snap.gpus is not None and snap.gpus.gpus == () and not snap.gpus.nvidia_loaded
    assert not [u for u in snap.unavailable if u[0] == "gpus"]


R = "/sys/devices/pci0000:15/0000:15:01.0"


@pytest.mark.parametrize(("a", "b", "word"), [
    (f"{R}/0000:16:00.0/0000:17:00.0/0000:18:00.0", f"{R}/0000:16:00.0/0000:17:01.0/0000:19:00.0", "PIX"),
    # two cascaded switches below one root port
    (f"{R}/0000:16:00.0/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0",
     f"{R}/0000:16:00.0/0000:17:01.0/0000:1b:00.0", "PXB"),
    (f"{R}/0000:18:00.0", "/sys/devices/pci0000:15/0000:15:03.0/0000:1c:00.0", "PHB"),
])
def test_link_words_in_one_host_bridge(a, b, word):
    assert link_word(PciPath(a.rsplit("/", 1)[1], a, 0), PciPath(b.rsplit("/", 1)[1], b, 0)) == word


def test_link_words_across_host_bridges():
    a = PciPath("0000:18:00.0", f"{R}/0000:18:00.0", 0)
    assert link_word(a, PciPath("0000:48:00.0", "/sys/devices/pci0000:40/0000:40:01.0/0000:48:00.0", 0)) == "NODE"
    assert link_word(a, PciPath("0000:98:00.0", "/sys/devices/pci0000:90/0000:90:01.0/0000:98:00.0", 1)) == "SYS"
    # an unknown NUMA node never claims SYS
    assert link_word(a, PciPath("0000:98:00.0", "/sys/devices/pci0000:90/0000:90:01.0/0000:98:00.0", None)) == "NODE"
    assert link_word(a, PciPath("x", None)) is None


def test_the_nearest_gpu_and_its_ties():
    nic = PciPath("0000:98:00.0", "/sys/devices/pci0000:90/0000:90:01.0/0000:98:00.0", 1)
    far = PciPath("0000:18:00.0", f"{R}/0000:18:00.0", 0)
    near_numa = PciPath("0000:48:00.0", "/sys/devices/pci0000:40/0000:40:01.0/0000:48:00.0", 1)
    st = GpuState(gpus=(far, near_numa), rail_paths=(nic,))
    assert gpu_for("0000:98:00.0", st) == ("0000:48:00.0", "NODE")  # a tie: the PF's NUMA node first
    assert gpu_for("0000:98:00.0", GpuState(rail_paths=(nic,))) == (None, None)
    assert gpu_for("0000:99:00.0", st) == (None, None)


def test_the_firmware_handles_are_the_rail_pfs_on_any_bus():
    from agent.model import Link, PciFunction
    from agent.readers.firmware import rail_pf_handles
    from agent.readers.sources import Context

    links = (Link(2, "net_rail0", parent_bus="netdevsim", parent_dev="netdevsim10"),
             Link(3, "eth9", parent_bus="netdevsim", parent_dev="netdevsim12"),  # not a rail
             Link(4, "net_rail1", parent_bus="pci", parent_dev="0000:8d:00.0"))
    ctx = Context(links=links, rails=("net_rail0", "net_rail1"), rail_bdfs=("0000:8d:00.0", "0000:8d:00.2"),
                  functions=(PciFunction("0000:8d:00.2", physfn="0000:8d:00.0"),))
    assert rail_pf_handles(ctx) == ["pci/0000:8d:00.0", "netdevsim/netdevsim10"]


@pytest.mark.parametrize("name", ["gpudirect-hgx-pix-healthy", "gpudirect-not-ready-peermem-lost",
                                  "firmware-pending-activation"])
def test_a_capture_records_what_the_readiness_sources_read(name: str, tmp_path: Path):
    """The replay plug-in records every door the new sources use: doctor --from the capture judges as the
    node did (GPUs, their PCIe places, the peer-memory paths, devlink dev info)."""
    from agent.analysis import pipeline
    from agent.capture.replay import record_image
    from agent.config import Expectations

    with open_image(str(IMAGES / name)) as src:
        record_image(src, str(tmp_path / "cap"))
    docs = []
    for path in (IMAGES / name, tmp_path / "cap"):
        with open_image(str(path)) as host:
            diag = pipeline.run(take_snapshot(host), Expectations(), ()).diagnosis
        docs.append(([r.as_json() for r in diag.rails], [(f.code, f.severity, f.subject) for f in diag.findings]))
    assert docs[1] == docs[0]
