"""pci reader: SR-IOV facts per distinct PCI function; truncated sysfs -> None, never a crash."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent.host.recorded import open_image
from agent.model import Link
from agent.readers.common import Notes
from agent.readers.pci import functions_of_links, parse_pci_function, read_bus_devices, read_pci
from tests.support.imagekit import PUBLIC, make_image

PF = "/sys/devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0"


def _sriov_image(tmp_path: Path, numvfs: str | bytes = "3\n", nvfs: int = 12):
    files: dict[str, str | bytes] = {
        f"{PF}/sriov_numvfs": numvfs, f"{PF}/sriov_totalvfs": "16\n",
        f"{PF}/vendor": "0x15b3\n", f"{PF}/device": "0x1021\n",
    }
    symlinks = {
        "/sys/bus/pci/devices/0000:0c:00.0": "../../../devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0",
        f"{PF}/driver": "../../../../bus/pci/drivers/mlx5_core",
    }
    for i in range(nvfs):
        vf = f"0000:0c:{(i + 1) // 8:02x}.{(i + 1) % 8}"
        vpath = f"/sys/devices/pci0000:0b/0000:0b:01.0/{vf}"
        files[f"{vpath}/vendor"] = "0x15b3\n"
        symlinks[f"{PF}/virtfn{i}"] = f"../{vf}"
        symlinks[f"{vpath}/physfn"] = "../0000:0c:00.0"
        symlinks[f"/sys/bus/pci/devices/{vf}"] = f"../../../devices/pci0000:0b/0000:0b:01.0/{vf}"
    return make_image(tmp_path / "img", files=files, symlinks=symlinks)


def test_pf_with_vfs_in_index_order(tmp_path: Path) -> None:
    host = _sriov_image(tmp_path)
    (pf,) = read_pci(host, ["0000:0c:00.0"])
    assert (pf.sriov_numvfs, pf.sriov_totalvfs, pf.driver, pf.vendor, pf.device) == (
        3, 16, "mlx5_core", "0x15b3", "0x1021")
    assert not pf.is_vf
    # virtfn10 sorts after virtfn9 by index, not by name
    assert pf.virtfns[9] == "0000:0c:01.2" and pf.virtfns[10] == "0000:0c:01.3"
    assert len(pf.virtfns) == 12


def test_vf_brings_its_pf(tmp_path: Path) -> None:
    host = _sriov_image(tmp_path)
    out = read_pci(host, ["0000:0c:00.3"])
    assert [f.bdf for f in out] == ["0000:0c:00.0", "0000:0c:00.3"]
    vf = out[1]
    assert vf.is_vf and vf.physfn == "0000:0c:00.0" and vf.sriov_numvfs is None


def test_truncated_and_garbage_sysfs_values_are_none(tmp_path: Path) -> None:
    for i, bad in enumerate(["", "\n", "1\x00\x00garbage", "-1\n", "three\n", b"\xff\xfe"]):
        host = _sriov_image(tmp_path / str(i), numvfs=bad, nvfs=0)
        (pf,) = read_pci(host, ["0000:0c:00.0"])
        assert pf.sriov_numvfs is None, bad
        assert pf.sriov_totalvfs == 16


def test_parse_pci_function_pure() -> None:
    fn = parse_pci_function("0000:0c:00.1", {"vendor": "0x15b3", "device": "garbage"},
                            {"physfn": "../0000:0c:00.0", "driver": None}, {})
    assert fn.physfn == "0000:0c:00.0" and fn.device is None and fn.driver is None


def test_missing_function_is_noted(tmp_path: Path) -> None:
    host = _sriov_image(tmp_path, nvfs=0)
    notes = Notes()
    out = read_pci(host, ["0000:0c:00.0", "0000:99:00.0", "not-a-bdf"], notes)
    assert [f.bdf for f in out] == ["0000:0c:00.0"]
    assert notes.unavailable == [("pci", "no /sys/bus/pci/devices/<bdf> for 0000:99:00.0")]


def test_procfs_e810_fixture_flattened_links(tmp_path: Path) -> None:
    """prometheus/procfs' fixture stores symlinks as files holding the target (as many copies do)."""
    root = tmp_path / "img"
    shutil.copytree(PUBLIC / "procfs" / "sys", root / "fs" / "sys")
    dev = root / "fs" / "sys" / "bus" / "pci" / "devices"
    dev.mkdir(parents=True)
    (dev / "0000:a2:00.0").write_text("../../../devices/pci0000:a2/0000:a2:00.0")
    host = open_image(str(root))
    (fn,) = read_pci(host, ["0000:a2:00.0"])
    assert (fn.sriov_numvfs, fn.sriov_totalvfs, fn.driver, fn.vendor) == (0, 128, "ice", "0x8086")
    # a link without a netlink parent falls back to the /sys/class/net/<if>/device symlink
    got = functions_of_links(host, [Link(ifindex=2, ifname="eth0")])
    assert got == {"eth0": "0000:00:1f.6"}


def test_functions_of_links_prefers_netlink_parent(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img")
    links = [
        Link(ifindex=1, ifname="lo"),
        Link(ifindex=4, ifname="net_rail0", parent_bus="pci", parent_dev="0000:0c:00.0"),
        Link(ifindex=6, ifname="net_rail0_0", parent_bus="pci", parent_dev="0000:0c:00.0"),
        Link(ifindex=9, ifname="sf1", parent_bus="auxiliary", parent_dev="mlx5_core.sf.2"),
        Link(ifindex=10, ifname="veth0", kind="veth"),
    ]
    assert functions_of_links(host, links) == {"net_rail0": "0000:0c:00.0", "net_rail0_0": "0000:0c:00.0"}


def test_functions_missing_are_noted_in_address_order_and_without_notes_no_crash(tmp_path: Path) -> None:
    host = _sriov_image(tmp_path, nvfs=0)
    notes = Notes()
    out = read_pci(host, ["0000:99:00.0", "0000:0c:00.0", "0000:88:00.0"], notes)
    assert [f.bdf for f in out] == ["0000:0c:00.0"]
    assert notes.unavailable == [("pci", "no /sys/bus/pci/devices/<bdf> for 0000:88:00.0, 0000:99:00.0")]
    assert read_pci(host, ["0000:99:00.0"]) == ()


def test_a_physfn_loop_in_a_damaged_image_ends(tmp_path: Path) -> None:
    base = "/sys/devices/pci0000:00"
    fns = ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0")
    host = make_image(tmp_path / "img", files={f"{base}/{b}/vendor": "0x15b3\n" for b in fns}, symlinks={
        **{f"/sys/bus/pci/devices/{b}": f"../../../devices/pci0000:00/{b}" for b in fns},
        f"{base}/0000:01:00.0/physfn": "../0000:02:00.0",
        f"{base}/0000:02:00.0/physfn": "../0000:03:00.0",
        f"{base}/0000:03:00.0/physfn": "../0000:02:00.0",
    })
    assert [f.bdf for f in read_pci(host, ["0000:01:00.0"])] == list(fns)


def test_a_physfn_or_virtfn_that_names_no_function_is_none() -> None:
    fn = parse_pci_function("0000:0c:00.1", {}, {"physfn": "../../not-a-bdf"}, {0: None, 1: "0000:0c:00.2"})
    assert fn.physfn is None and fn.virtfns == ("0000:0c:00.2",)


def test_a_parent_named_like_a_function_on_another_bus_is_no_pci_function(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img")
    links = [Link(ifindex=4, ifname="a", parent_bus="platform", parent_dev="0000:0c:00.0"),
             Link(ifindex=5, ifname="b", parent_bus="pci", parent_dev="not-a-bdf"),
             Link(ifindex=6, ifname="c", parent_dev="0000:0d:00.0")]
    assert functions_of_links(host, links) == {"c": "0000:0d:00.0"}


def test_bus_devices_with_either_sriov_file_are_read_each_on_its_own(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        "/sys/bus/netdevsim/devices/nsim1/uevent": "x\n",
        "/sys/bus/netdevsim/devices/nsim2/sriov_totalvfs": "8\n",
        "/sys/bus/netdevsim/devices/nsim3/sriov_numvfs": "2\n",
    })
    links = [Link(ifindex=i, ifname=f"e{i}", parent_bus="netdevsim", parent_dev=f"nsim{i}") for i in (0, 1, 2, 3)]
    got = read_bus_devices(host, links)
    assert [(f.bdf, f.sriov_numvfs, f.sriov_totalvfs) for f in got] == [("nsim2", None, 8), ("nsim3", 2, None)]


# A sysfs value is read up to 64 bytes: what lies beyond (here a "2" at byte 65) is never seen.
PAST_64 = "1" + " " * 63 + "2\n"


def test_sysfs_values_are_read_up_to_64_bytes(tmp_path: Path) -> None:
    host = _sriov_image(tmp_path, numvfs=PAST_64, nvfs=0)
    (pf,) = read_pci(host, ["0000:0c:00.0"])
    assert pf.sriov_numvfs == 1
    host = make_image(tmp_path / "bus", files={"/sys/bus/netdevsim/devices/nsim1/sriov_numvfs": PAST_64})
    (fn,) = read_bus_devices(host, [Link(ifindex=1, ifname="e1", parent_bus="netdevsim", parent_dev="nsim1")])
    assert fn.sriov_numvfs == 1
