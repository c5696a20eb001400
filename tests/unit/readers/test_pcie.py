"""pcie: link speed / width of a rail PF and its upstream port, and AER totals (sysfs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.readers.common import Notes
from agent.readers.pcie import link_gone, parse_aer, parse_link_speed, parse_link_width, read_pcie
from tests.support.imagekit import make_image

PF = "/sys/devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0"
AER_COR = ("RxErr 2\nBadTLP 0\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\n"
           "TOTAL_ERR_COR 3\n")


@pytest.mark.parametrize(("text", "want"), [
    ("32.0 GT/s PCIe", 32.0), ("16.0 GT/s PCIe\n", 16.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5),
    ("Unknown", None), ("", None), (None, None), ("0 GT/s", None), ("fast", None)])
def test_speed(text: str | None, want: float | None) -> None:
    assert parse_link_speed(text) == want


@pytest.mark.parametrize(("text", "want"), [("16", 16), ("8\n", 8), ("0", None), ("64", None), ("x16", None)])
def test_width(text: str, want: int | None) -> None:
    assert parse_link_width(text) == want


def test_aer_totals_and_junk() -> None:
    assert parse_aer(AER_COR)["TOTAL_ERR_COR"] == 3
    assert parse_aer("TOTAL_ERR_FATAL x\nbroken line here\nTOTAL_ERR_NONFATAL -1\n") == {}
    assert parse_aer(None) == {}


def test_read_a_pf_and_its_upstream_port(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        f"{PF}/current_link_speed": "16.0 GT/s PCIe\n", f"{PF}/current_link_width": "8\n",
        f"{PF}/max_link_speed": "32.0 GT/s PCIe\n", f"{PF}/max_link_width": "16\n",
        "/sys/devices/pci0000:0b/0000:0b:01.0/max_link_speed": "16.0 GT/s PCIe\n",
        "/sys/devices/pci0000:0b/0000:0b:01.0/max_link_width": "16\n",
        f"{PF}/aer_dev_correctable": AER_COR, f"{PF}/aer_dev_fatal": "TOTAL_ERR_FATAL 1\n",
    }, symlinks={"/sys/bus/pci/devices/0000:0c:00.0": "../../../devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0"})
    notes = Notes()
    (link,) = read_pcie(host, ["0000:0c:00.0"], notes)
    assert (link.speed_gts, link.width, link.max_speed_gts, link.max_width) == (16.0, 8, 32.0, 16)
    assert (link.upstream, link.upstream_max_speed_gts, link.upstream_max_width) == ("0000:0b:01.0", 16.0, 16)
    assert (link.aer_correctable, link.aer_nonfatal, link.aer_fatal) == (3, None, 1)
    assert notes.unavailable == []


def test_a_pf_under_the_root_complex_has_no_upstream_port_and_unknown_is_not_available(tmp_path: Path) -> None:
    pf = "/sys/devices/pci0000:00/0000:00:02.0"
    host = make_image(tmp_path / "img", files={f"{pf}/current_link_speed": "Unknown\n"},
                      symlinks={"/sys/bus/pci/devices/0000:00:02.0": "../../../devices/pci0000:00/0000:00:02.0"})
    notes = Notes()
    (link,) = read_pcie(host, ["0000:00:02.0", "netdevsim10"], notes)
    assert link.upstream is None and link.speed_gts is None and link.aer_fatal is None
    assert [s for s, _ in notes.unavailable] == ["pcie"]


@pytest.mark.parametrize(("speed", "width", "want"), [
    ("Unknown\n", "63\n", True), ("Unknown speed\n", "63", True),  # pci_speed_string, and kernels before 5.x
    ("Unknown", "16", False),  # a rate this kernel does not name: not judged
    ("32.0 GT/s PCIe", "63", False), (None, "63", False), ("Unknown", None, False)])
def test_link_gone_needs_unknown_speed_and_width_63(speed: str | None, width: str | None, want: bool) -> None:
    assert link_gone(speed, width) is want


def test_a_link_that_reads_all_ones_is_gone_and_not_merely_unavailable(tmp_path: Path) -> None:
    # tests/fixtures/public/pcie/sysfs-link-gone.RECONSTRUCTED.txt: what pci-sysfs.c prints for LNKSTA 0xffff
    fix = (Path(__file__).resolve().parents[2] / "fixtures" / "public" / "pcie" /
           "sysfs-link-gone.RECONSTRUCTED.txt").read_text()
    files = dict(line.split(": ", 1) for line in fix.splitlines() if line.startswith("current_link_"))
    host = make_image(tmp_path / "img", files={
        f"{PF}/current_link_speed": files["current_link_speed"] + "\n",
        f"{PF}/current_link_width": files["current_link_width"] + "\n",
        f"{PF}/max_link_speed": "32.0 GT/s PCIe\n", f"{PF}/max_link_width": "16\n",
    }, symlinks={"/sys/bus/pci/devices/0000:0c:00.0": "../../../devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0"})
    notes = Notes()
    (link,) = read_pcie(host, ["0000:0c:00.0"], notes)
    assert link.gone and link.speed_gts is None and link.width is None
    assert notes.unavailable == []  # known, and judged: PcieLinkDegraded critical
