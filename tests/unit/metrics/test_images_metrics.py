"""``railscope metrics --from`` on every node image of tests/images: the exposition is valid, agrees
with ``railscope doctor`` finding for finding, and each fault shows in the series an alert uses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agent.cli import main
from tests.support.metrics_expo import IMAGES, have, series, value

IMAGE_DIRS = sorted(p for p in IMAGES.iterdir() if p.is_dir() and any(
    (p / m).exists() for m in ("manifest.json", "fs", "cmd", "netlink"))) if IMAGES.is_dir() else []


def _metrics(capsysbinary: pytest.CaptureFixture[bytes], image: Path, *flags: str) -> bytes:
    rc = main(["metrics", "--from", str(image), *flags])
    out, err = capsysbinary.readouterr()
    assert rc == 0, err.decode()
    return out


def _doctor(capsysbinary: pytest.CaptureFixture[bytes], image: Path) -> dict:
    main(["doctor", "--from", str(image), "--json"])
    out, _ = capsysbinary.readouterr()
    return json.loads(out)


@pytest.mark.skipif(not IMAGE_DIRS, reason="no node images under tests/images")
@pytest.mark.parametrize("image", IMAGE_DIRS, ids=lambda p: p.name)
def test_every_image_exports_what_the_doctor_finds(image: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, image)
    got = {(lab["code"], lab["severity"], lab["subject"]) for n, lab, v in series(text)
           if n == "railscope_finding" and v == 1}
    doc = _doctor(capsysbinary, image)
    assert got == {(f["code"], f["severity"], f["subject"]) for f in doc["findings"]}
    for row in doc["rails"]:
        want = 1 if row["oper"] == "up" else 0
        # by rail and device: two rules may give one rail number to two functions (a naming conflict)
        by = {"device": row["netdev"]} if row["netdev"] else {}
        assert value(text, "railscope_rail_up", rail=str(row["rail"]), **by) == want, row
    if have("promtool"):
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60,
                             check=False)
        assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), (res.stdout + res.stderr).decode()


def _image(name: str) -> Path:
    path = IMAGES / name
    if not path.is_dir():
        pytest.skip(f"no image {name}")
    return path


def test_stale_representors_show_per_pf(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, _image("representor-stale"))
    stale = {lab["pci"]: v for n, lab, v in series(text) if n == "railscope_representors_stale"}
    assert stale["0000:8d:00.0"] == 2  # 3 representors for 1 VF
    assert value(text, "railscope_representors", pci="0000:8d:00.0") == 3


def test_rail_link_down_shows_in_link_and_rdma_series(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, _image("rail-link-down"))
    assert value(text, "railscope_rail_up", rail="0") == 0
    assert value(text, "railscope_rail_carrier", rail="0") == 0
    assert value(text, "railscope_rdma_port_up", rail="0") == 0
    assert value(text, "railscope_rail_up", rail="1") == 1


def test_global_pause_and_pfc_disabled_images(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, _image("global-pause-enabled"))
    assert {lab["device"] for n, lab, _ in series(text) if n.startswith("railscope_global_pause")} == {"net_rail0"}
    text = _metrics(capsysbinary, _image("pfc-disabled"))
    pfc = {lab["device"] for n, lab, _ in series(text) if n.startswith("railscope_pfc_")}
    assert pfc == {"net_rail0"}  # a rail without PFC keys has no PFC series at all, never zeros


def test_storm_and_drop_counters_images(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, _image("pfc-storm-counters"))
    assert value(text, "railscope_pause_storm_error_events_total", rail="0") > 0
    text = _metrics(capsysbinary, _image("lossless-drops-counters"))
    drops = sum(v for n, lab, v in series(text) if lab.get("device") == "net_rail1" and lab.get("prio") == "3"
                and n in ("railscope_prio_discards_total", "railscope_prio_buffer_discards_total",
                          "railscope_prio_congestion_discards_total"))
    assert drops > 0


def test_missing_rail_is_exported_down(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, _image("rail-missing"))
    assert value(text, "railscope_rail_up", rail="1", device="net_rail1") == 0
    assert value(text, "railscope_finding", code="RailMissing", subject="net_rail1") == 1


def test_events_of_the_image_count_in_events_total(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    image = _image("link-flapping-events")
    codes = [e["code"] for e in json.loads((image / "events.json").read_text())["events"]]
    text = _metrics(capsysbinary, image)
    assert value(text, "railscope_events_total", code="LinkFlapping") == codes.count("LinkFlapping") > 0
    # Codes the detectors can raise are exported at 0 before their first event (rate() sees the first one).
    assert value(text, "railscope_events_total", code="DriverReload") == 0


def test_a_stored_firmware_the_nic_cannot_read_is_no_pending_activation(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, IMAGES / "firmware-stored-unreadable")
    # 255.255.65535 is what the NIC said (kept in the info series), never a flashed image waiting for a reset
    assert value(text, "railscope_firmware_pending_activation", pci="0000:0c:00.0") == 0
    assert [lab["stored"] for n, lab, _v in series(text)
            if n == "railscope_pf_firmware_info" and lab.get("pci") == "0000:0c:00.0"] == ["255.255.65535"]
    assert value(text, "railscope_finding", code="FirmwareStoredUnreadable", subject="pci/0000:0c:00.0") == 1


def test_a_gone_pcie_link_and_missing_rdma_devices_are_findings(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = _metrics(capsysbinary, IMAGES / "pcie-link-gone")
    assert value(text, "railscope_finding", code="PcieLinkDegraded", severity="critical",
                 subject="pci/0000:8d:00.0") == 1
    text = _metrics(capsysbinary, IMAGES / "rdma-gone-rules-name-rdma")
    assert value(text, "railscope_finding", code="RailRdmaMissing", severity="critical", subject="net_rail0") == 1
