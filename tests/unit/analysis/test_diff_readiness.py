"""``railscope diff`` readiness rows on node images: GPUDirect lost after an upgrade that dropped
nvidia_peermem is a regression (exit 1, named); a rail whose MTU no longer matches the others is one;
the same MTU change on every rail, firmware running / stored and the driver kind are changes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agent.analysis import pipeline
from agent.analysis.diff import Side, diff
from agent.cli import main
from agent.config import Expectations
from agent.host.recorded import open_image
from agent.model import FirmwareInfo
from agent.readers.snapshot import take_snapshot

IMAGES = Path(__file__).resolve().parents[2] / "images"


def run(before: str, after: str, capsys: pytest.CaptureFixture[str]) -> tuple[dict, int]:
    code = main(["diff", str(IMAGES / before), str(IMAGES / after), "--json"])
    return json.loads(capsys.readouterr().out), code


def codes(items: list[dict]) -> list[tuple[str, str]]:
    return [(i["code"], i["subject"]) for i in items]


def test_an_upgrade_that_lost_nvidia_peermem_is_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = run("gpudirect-hgx-pix-healthy", "gpudirect-not-ready-peermem-lost", capsys)
    assert code == 1
    assert codes(doc["regressions"]) == [("GpuDirectLost", "node")]
    assert doc["regressions"][0]["findings"] == ["GpuDirectNotReady node"]  # folded, one cause one line
    assert codes(doc["changes"]) == [("GpuDirectPathsChanged", "node")]


def test_open_modules_instead_of_peermem_are_no_regression(capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = run("gpudirect-hgx-pix-healthy", "gpudirect-open-modules-dmabuf-healthy", capsys)
    assert code == 0 and doc["regressions"] == []
    assert codes(doc["changes"]) == [("GpuDirectPathsChanged", "node"), ("GpuModuleChanged", "node")]


def test_a_rail_whose_mtu_no_longer_matches_is_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = run("spectrumx-2rail-healthy", "mtu-mismatch", capsys)
    assert code == 1
    assert codes(doc["regressions"]) == [("MtuMismatched", "net_rail1")]
    assert ("MtuChanged", "net_rail1") in codes(doc["changes"])


def _side(name: str, **changes: object) -> Side:
    with open_image(str(IMAGES / name)) as host:
        snap = take_snapshot(host)
    snap = replace(snap, **changes)
    out = pipeline.run(snap, Expectations(), ())
    return Side(name, out.snapshot, out.topology, out.diagnosis)


def test_the_same_mtu_on_every_rail_is_a_change_only() -> None:
    a = _side("spectrumx-2rail-healthy")
    links = tuple(replace(lk, mtu=4200) if lk.ifname.startswith("net_rail") else lk for lk in a.snapshot.links)
    d = diff(a, _side("spectrumx-2rail-healthy", links=links))
    assert d.regressions == () and {i.code for i in d.changes} == {"MtuChanged"}


def test_firmware_and_driver_kind_are_changes() -> None:
    def fw(run: str, stored: str) -> tuple[FirmwareInfo, ...]:
        return (FirmwareInfo("pci/0000:0c:00.0", "mlx5_core", (("fw.version", run),), (("fw.version", stored),)),)

    a = _side("spectrumx-2rail-healthy", firmware=fw("28.42.1000", "28.42.1000"))
    b0 = _side("spectrumx-2rail-healthy", firmware=fw("28.42.1000", "28.43.1014"))
    b = replace(b0, snapshot=replace(b0.snapshot, versions=replace(b0.snapshot.versions, mlx5_version=None)))
    d = diff(a, b)
    assert d.regressions == ()
    assert [(i.code, i.subject, i.before, i.after) for i in d.changes if i.code != "DriverChanged"] == [
        ("DriverKindChanged", "node", "doca/ofed", "inbox"),
        ("FindingNew", "pci/0000:0c:00.0", None, "info"),  # FirmwarePendingActivation: a change, info
        ("FirmwareStoredChanged", "pci/0000:0c:00.0", "28.42.1000", "28.43.1014")]
