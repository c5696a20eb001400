"""The pcie source on a real kernel: QEMU's e1000e behind a PCIe root port (q35, added by
``scripts/klab/qemu/qemu-system-x86_64``) is rail ``net_rail2``; the kernel's own sysfs link files and
AER counters, and its AER driver handling errors injected with ``aer_inject``.

What the lab shows: the reader's link speed / width against the device's config space (LNKCAP /
LNKSTA read without sysfs), the upstream port found from the resolved sysfs path, an endpoint at its
own maximum under a faster port judged fine, real ``aer_dev_*`` files counting a correctable and a
non-fatal error, the daemon's PcieErrors event when the correctable total rises, the series and the
live diagnosis equal to ``doctor --from`` the daemon's image. What it cannot: a rail PF trained
below its own maximum — QEMU 7.2's emulated endpoints advertise and train at 2.5 GT/s x1
(hw/pci/pcie.c ``pcie_cap_v1_fill``), so the one such link in the lab is the root port's (its
LNKSTA follows the endpoint, ``pcie_sync_bridge_lnk``); the reader and the check are shown on it.

Run alone: ``KLAB_ONLY=pcie python3 -m pytest tests/klab/test_klab_pcie.py -m klab``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def pcie(klab):
    return klab.scenario("pcie")


def test_the_reader_reads_what_the_device_config_space_says(pcie):
    (link,) = pcie["read"]
    bdf, port = pcie["bdf"], pcie["root_port"]
    dev, up = pcie["config"][bdf], pcie["config"][port]
    assert (link["speed_gts"], link["width"]) == (dev["speed_gts"], dev["width"])
    assert (link["max_speed_gts"], link["max_width"]) == (dev["max_speed_gts"], dev["max_width"])
    # the upstream port is the parent directory of the PF's resolved sysfs path
    assert pcie["resolved"].endswith(f"/{port}/{bdf}") and link["upstream"] == port
    assert (link["upstream_max_speed_gts"], link["upstream_max_width"]) == (up["max_speed_gts"], up["max_width"])
    # what QEMU was asked for (x-speed=16, x-width=16) reached the guest's kernel
    assert (up["max_speed_gts"], up["max_width"]) == (16.0, 16)
    assert pcie["sysfs"][port]["max_link_speed"] == "16.0 GT/s PCIe"
    assert (link["aer_correctable"], link["aer_nonfatal"], link["aer_fatal"]) == (0, 0, 0)


def test_a_rail_at_its_own_maximum_under_a_faster_port_is_fine(pcie):
    assert pcie["snapshot_pcie"] == pcie["read"]  # the source reads the rail PF, and only it
    assert pcie["unavailable_before"] == []
    rails = {r["netdev"]: r for r in pcie["rails"]}
    assert rails["net_rail2"]["pci"] == pcie["bdf"]
    assert pcie["findings_before"] == []


def test_a_link_trained_below_its_maximum_is_read_and_judged_degraded(pcie):
    (root,) = pcie["root_port_read"]
    cfg = pcie["config"][pcie["root_port"]]
    assert (root["speed_gts"], root["width"], root["max_speed_gts"], root["max_width"]) == \
        (cfg["speed_gts"], cfg["width"], cfg["max_speed_gts"], cfg["max_width"]) == (2.5, 1, 16.0, 16)
    (f,) = pcie["root_port_judged"]
    assert (f["code"], f["severity"]) == ("PcieLinkDegraded", "warning")
    assert f["evidence"]["degraded"] == ["speed", "width"]


def test_the_kernel_counts_injected_aer_errors_and_the_series_follow(pcie):
    assert "RxErr 1" in pcie["aer_correctable_after_inject"].splitlines()
    assert "TOTAL_ERR_COR 1" in pcie["aer_correctable_after_inject"].splitlines()
    assert "TOTAL_ERR_NONFATAL 1" in pcie["aer_nonfatal_after_inject"].splitlines()
    assert any("Corrected error message received from " + pcie["bdf"] in ln for ln in pcie["dmesg_aer"])
    before = {ln.split("{")[0]: float(ln.rsplit(" ", 1)[1]) for ln in pcie["pcie_series_before"]}
    after = {ln.split("{")[0]: float(ln.rsplit(" ", 1)[1]) for ln in pcie["pcie_series_after"]}
    assert before["railscope_pcie_aer_correctable_errors_total"] == 0
    assert after["railscope_pcie_aer_correctable_errors_total"] == 1
    assert after["railscope_pcie_aer_nonfatal_errors_total"] == 1
    assert after["railscope_pcie_link_width_lanes"] == 1


def test_a_correctable_error_that_rises_is_a_warning_event(pcie):
    (ev,) = pcie["events_correctable"]
    assert (ev["code"], ev["severity"], ev["subject"]) == ("PcieErrors", "warning", f"pci/{pcie['bdf']}")
    assert ev["evidence"]["increase"] == {"aer_dev_correctable": 1}
    assert ev["evidence"]["netdev"] == "net_rail2"


def test_a_nonfatal_error_is_a_warning_and_the_image_gives_the_live_diagnosis(klab, pcie):
    assert any(f'subject="pci/{pcie["bdf"]}"' in ln and 'severity="warning"' in ln and ln.endswith(" 1.0")
               for ln in pcie["finding_series"])
    live = json.loads((klab.path / "doctor-live-pcie.json").read_text())
    bundle = klab.path / "agent-pcie-image.tar.gz"
    assert pcie["image_status"] == 200
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(bundle), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    offline = json.loads(proc.stdout)
    mine = lambda doc: [(f["code"], f["severity"], f["subject"], f["evidence"].get("aer"))  # noqa: E731
                        for f in doc["findings"] if f["code"].startswith("Pcie")]
    want = ("PcieErrors", "warning", f"pci/{pcie['bdf']}", {"correctable": 1, "fatal": 0, "nonfatal": 1})
    assert mine(live) == [want]
    assert mine(offline) == [want]
    # the image carries the daemon's PcieErrors event, and its recorder the AER totals per line
    with tarfile.open(bundle) as tf:
        names = tf.getnames()
        ev = json.load(tf.extractfile(next(n for n in names if n.endswith("events.json"))))["events"]
        rec = tf.extractfile(next(n for n in names if n.endswith("recorder.jsonl"))).read().decode()
    assert any(e["code"] == "PcieErrors" and e["subject"] == f"pci/{pcie['bdf']}" for e in ev)
    lines = [json.loads(ln) for ln in rec.splitlines() if '"net_rail2"' in ln]
    assert lines and lines[-1]["counters"]["aer_dev_nonfatal"] == 1
