"""The capture's replay plug-in records the degradation sources (sysfs PCIe link and AER, hwmon, ``ethtool
-m``) as the readers read them, so ``doctor --from`` the bundle gives the diagnosis of the node it was
captured from (docs/design.md §7)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from agent.capture.runner import CaptureParams, capture
from agent.cli import main
from agent.host.recorded import RecordedHost
from tests.support.capture_kit import items

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


OPTICS_JSON = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "optics" / \
    "ethtool-json-m-qsfp28-finisar-cwdm4-RECONSTRUCTED.json"


def _json_form_image(tmp_path: Path, name: str, low_rx: str | None, keep_text: bool = False) -> Path:
    """Image ``name`` as a node whose ethtool is 6.14: the same modules read with ``--json`` (``low_rx``:
    the rail whose lane 3 receives 0.0501 mW, as the image's text says); ``keep_text``: the node also
    answers the text form, as a real one does."""
    root = tmp_path / ("json-text-node" if keep_text else "json-node")
    shutil.copytree(IMAGES / name, root, symlinks=True)
    cmd = root / "cmd"
    module = "".join(ln + "\n" for ln in OPTICS_JSON.read_text().splitlines() if not ln.startswith("#"))
    for nd in ("net_rail0", "net_rail1"):
        for ext in (".stdout", ".rc") if not keep_text else ():
            (cmd / f"ethtool_-m_{nd}{ext}").unlink()
        rx = "0.9969,0.91,0.0501,0.9713" if nd == low_rx else "0.9969,0.91,0.9101,0.9713"
        doc = module.replace("0.9969,0.91,0.9101,0.9713", rx)
        if nd == low_rx:
            # the module raises its own flag for the lane below its low warning threshold, as the text's does
            doc = doc.replace('"laser_rx_power_low_warning": [ false,false,false,false ]',
                              '"laser_rx_power_low_warning": [ false,false,true,false ]')
        (cmd / f"ethtool_--json_-m_{nd}.stdout").write_text(doc)
        (cmd / f"ethtool_--json_-m_{nd}.rc").write_text("0\n")
    (cmd / "ethtool_--version.stdout").write_text("ethtool version 6.14.2\n")
    (cmd / "ethtool_--version.rc").write_text("0\n")
    return root


@pytest.mark.parametrize(("name", "low_rx", "codes"), [("degradation-sources-healthy", None, []),
                                                      ("optics-out-of-range-warning", "net_rail1", ["OpticsOutOfRange"])])
def test_the_json_form_diagnoses_as_the_text_and_its_bundle_replays_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, low_rx: str | None, codes: list[str]) -> None:
    node = _json_form_image(tmp_path, name, low_rx)
    text_form, json_form = _doctor(IMAGES / name, capsys), _doctor(node, capsys)
    # the same judgement (docs/design.md §4: tools compare code, severity and subject); the JSON form prints every
    # lane's flags, so its message leads with the flag the module raised, where the image's cut text
    # prints no flag line for that lane and is judged by the value against the threshold
    def judged(doc: dict) -> list[tuple[str, str, str]]:
        return [(f["code"], f["severity"], f["subject"]) for f in doc["findings"]]

    assert judged(json_form) == judged(text_form) and [c for c, _s, _j in judged(json_form)] == codes
    assert {k: v for k, v in json_form.items() if k != "findings"} == {k: v for k, v in text_form.items()
                                                                       if k != "findings"}
    if low_rx:
        assert "RX power low warning flag on lane 3" in json_form["findings"][0]["message"]
    buf = io.BytesIO()
    with RecordedHost(str(_json_form_image(tmp_path, name, low_rx, keep_text=True))) as host:
        capture(host, buf, CaptureParams(node="gpu-node-017", nice=0, recorder_gap_s=0))
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(buf.getvalue())
    got = items(buf.getvalue())
    # a capture reads each module once, as the text a person reads (docs/design.md §7), whatever ethtool can print
    assert "cmd/ethtool_-m_net_rail0.stdout" in got
    assert not any("--json" in p for p in got) and "cmd/ethtool_--version.stdout" not in got
    have = _doctor(bundle, capsys)
    # the bundle holds the text form the capture read, and replays its diagnosis exactly
    assert have["findings"] == text_form["findings"] and have["rails"] == json_form["rails"]
