"""The capture's replay plug-in records the degradation sources (sysfs PCIe link and AER, hwmon, ``ethtool
-m``) as the readers read them, so ``doctor --from`` the bundle gives the diagnosis of the node it was
captured from (DESIGN §7)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agent.capture.runner import CaptureParams, capture
from agent.cli import main
from agent.host.recorded import RecordedHost

from .kit import items

IMAGES = Path(__file__).resolve().parents[2] / "images"


def _doctor(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    main(["doctor", "--from", str(path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    doc.pop("unavailable")  # the bundle's manifest differs from a hand-made image's: not a diagnosis
    return doc


@pytest.mark.parametrize("name", ["degradation-sources-healthy", "optics-out-of-range-alarm", "pcie-link-degraded",
                                  "nic-temperature-high", "pcie-errors-aer", "link-degrading-counters"])
def test_doctor_from_the_bundle_equals_doctor_from_the_node(name: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    buf = io.BytesIO()
    with RecordedHost(str(IMAGES / name)) as host:
        capture(host, buf, CaptureParams(node="gpu-node-017", nice=0, recorder_gap_s=0))
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(buf.getvalue())
    got = items(buf.getvalue())
    assert "cmd/ethtool_-m_net_rail0.stdout" in got
    assert any(p.endswith("/current_link_width") for p in got)
    want, have = _doctor(IMAGES / name, capsys), _doctor(bundle, capsys)
    assert have["findings"] == want["findings"] and have["rails"] == want["rails"]
