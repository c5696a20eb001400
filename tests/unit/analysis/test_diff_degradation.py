"""``railscope diff``: a rail whose link speed fell, a PCIe link that trained lower and a corrected-bit
ratio above --ber-warning between the two captures are regressions (the upgrade gate exits 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"
BASE = IMAGES / "degradation-sources-healthy"


def _copy(tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(BASE, dst, symlinks=True)
    return dst


def _set_counter(img: Path, netdev: str, key: str, value: int) -> None:
    p = img / "cmd" / f"ethtool_-S_{netdev}.stdout"
    lines = [f"     {key}: {value}" if ln.split(":")[0].strip() == key else ln for ln in p.read_text().splitlines()]
    p.write_text("\n".join(lines) + "\n")


def _diff(before: Path, after: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, int]:
    code = main(["diff", str(before), str(after), "--json", *extra])
    return json.loads(capsys.readouterr().out), code


def test_a_rail_whose_speed_fell_is_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _copy(tmp_path, "after")
    (after / "fs/sys/class/net/net_rail0").resolve()  # a symlink into the PCI device: write through it
    speed = next(p for p in (after / "fs/sys/devices").rglob("net_rail0/speed"))
    speed.write_text("200000\n")
    doc, code = _diff(BASE, after, capsys)
    assert code == 1
    assert [(i["code"], i["subject"], i["before"], i["after"]) for i in doc["regressions"]] == [
        ("SpeedLower", "net_rail0", 400000, 200000)]
    assert not [i for i in doc["changes"] if i["code"] == "SpeedChanged"]
    # and back up is a change only
    doc, code = _diff(after, BASE, capsys)
    assert code == 0 and [i["code"] for i in doc["changes"]] == ["SpeedChanged"]


def test_a_pcie_link_that_trained_narrower_is_a_regression_that_explains_its_finding(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = _diff(BASE, IMAGES / "pcie-link-degraded", capsys)
    assert code == 1
    regs = doc["regressions"]
    assert [(i["code"], i["subject"], i["before"], i["after"]) for i in regs] == [
        ("PcieLinkLower", "pci/0000:0c:00.0", "32.0 GT/s x16", "32.0 GT/s x8")]
    assert not [i for i in regs if i["code"] == "FindingNew"]  # PcieLinkDegraded is folded into it


def test_a_corrected_bit_ratio_above_ber_warning_between_captures_is_a_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _copy(tmp_path, "after")
    line = 400_000_000_000
    counters = {ln.split(":")[0].strip(): int(ln.split(":")[1]) for ln in
                (BASE / "cmd/ethtool_-S_net_rail1.stdout").read_text().splitlines()[1:] if ":" in ln}
    _set_counter(after, "net_rail1", "rx_bits_phy", counters["rx_bits_phy"] + line * 300)
    _set_counter(after, "net_rail1", "rx_corrected_bits_phy", counters["rx_corrected_bits_phy"] + line * 300 // 1000)
    doc, code = _diff(BASE, after, capsys)
    assert code == 1
    assert [(i["code"], i["subject"], i["after"]) for i in doc["regressions"]] == [("BerHigh", "net_rail1", "1.00e-03")]
    # a looser --ber-warning: not a regression
    doc, code = _diff(BASE, after, capsys, "--ber-warning", "2e-3")
    assert code == 0 and doc["regressions"] == []


def test_too_few_bits_between_captures_are_not_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _copy(tmp_path, "after")
    counters = {ln.split(":")[0].strip(): int(ln.split(":")[1]) for ln in
                (BASE / "cmd/ethtool_-S_net_rail1.stdout").read_text().splitlines()[1:] if ":" in ln}
    _set_counter(after, "net_rail1", "rx_bits_phy", counters["rx_bits_phy"] + 10**11)
    _set_counter(after, "net_rail1", "rx_corrected_bits_phy", counters["rx_corrected_bits_phy"] + 10**9)
    doc, code = _diff(BASE, after, capsys)
    assert code == 0 and doc["regressions"] == []


def test_the_after_bundles_recorded_ber_warning_judges_the_ratio(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _copy(tmp_path, "after")
    line = 400_000_000_000
    counters = {ln.split(":")[0].strip(): int(ln.split(":")[1]) for ln in
                (BASE / "cmd/ethtool_-S_net_rail1.stdout").read_text().splitlines()[1:] if ":" in ln}
    _set_counter(after, "net_rail1", "rx_bits_phy", counters["rx_bits_phy"] + line * 300)
    _set_counter(after, "net_rail1", "rx_corrected_bits_phy", counters["rx_corrected_bits_phy"] + line * 300 // 1000)
    man = json.loads((after / "manifest.json").read_text())
    man["expectations"] = {"ber_warning": 2e-3}
    (after / "manifest.json").write_text(json.dumps(man))
    doc, code = _diff(BASE, after, capsys)
    assert code == 0 and doc["regressions"] == []
    # the command line still wins over the bundle
    doc, code = _diff(BASE, after, capsys, "--ber-warning", "2.4e-4")
    assert code == 1 and [i["code"] for i in doc["regressions"]] == ["BerHigh"]


def test_preflight_since_judges_the_ratio_with_ber_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _copy(tmp_path, "after")
    line = 400_000_000_000
    counters = {ln.split(":")[0].strip(): int(ln.split(":")[1]) for ln in
                (BASE / "cmd/ethtool_-S_net_rail1.stdout").read_text().splitlines()[1:] if ":" in ln}
    _set_counter(after, "net_rail1", "rx_bits_phy", counters["rx_bits_phy"] + line * 300)
    _set_counter(after, "net_rail1", "rx_corrected_bits_phy", counters["rx_corrected_bits_phy"] + line * 300 // 1000)
    code = main(["preflight", "--from", str(after), "--since", str(BASE), "--json"])
    since = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["since"]
    assert code == 1 and (since["status"], since["detail"]) == ("fail", "BerHigh net_rail1")
    code = main(["preflight", "--from", str(after), "--since", str(BASE), "--json", "--ber-warning", "2e-3"])
    since = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["since"]
    assert code == 0 and since["status"] == "ok"
