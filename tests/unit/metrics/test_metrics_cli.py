"""``railscope metrics --from``: the golden exposition of the example image, promtool, values, errors.

Regenerate the golden file after an intended change with
``RAILSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/unit/metrics/test_metrics_cli.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from agent.cli import main
from agent.metrics.exposition import render
from tests.support.metrics_expo import ROOT, have, series, state_for, value
from tests.support.metrics_synth import parse_ethtool_s, synthetic_snapshot

GOLDEN = ROOT / "tests" / "golden" / "spectrumx-2rail-healthy.prom"
UPDATE = os.environ.get("RAILSCOPE_UPDATE_GOLDEN") == "1"


def run_cli(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, bytes]:
    rc = main(["metrics", *argv])
    out, err = capsysbinary.readouterr()
    return rc, out, err


@pytest.fixture
def example_text(example_image: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> bytes:
    rc, out, err = run_cli(capsysbinary, "--from", str(example_image))
    assert rc == 0, err
    return out


def test_golden_exposition_of_the_example_image(example_text: bytes) -> None:
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_bytes(example_text)
    assert GOLDEN.exists(), f"{GOLDEN} is missing: run with RAILSCOPE_UPDATE_GOLDEN=1"
    want = GOLDEN.read_text().splitlines()
    got = example_text.decode().splitlines()
    diff = "\n".join(difflib.unified_diff(want, got, "golden", "railscope metrics", lineterm="", n=1))
    assert not diff, f"exposition differs from {GOLDEN.name} (RAILSCOPE_UPDATE_GOLDEN=1 to accept):\n{diff}"


def _promtool_check(text: bytes) -> None:
    if not have("promtool"):
        pytest.skip("promtool is not installed (Debian package 'prometheus')")
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60, check=False)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), \
        (res.stdout + res.stderr).decode()


def test_promtool_accepts_the_golden_file() -> None:
    _promtool_check(GOLDEN.read_bytes())


def test_promtool_accepts_a_big_node_with_representor_series() -> None:
    st = state_for(synthetic_snapshot(8, 127, numvfs=120))
    _promtool_check(render(st, clock=lambda: 0.0, representor_include="."))


def test_output_is_the_same_on_every_run(example_image: Path, example_text: bytes,
                                         capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    _, again, _ = run_cli(capsysbinary, "--from", str(example_image))
    assert again == example_text
    assert value(example_text, "railscope_sample_age_seconds") == 0


# -- values for the example image, from the image's own raw files --------------------------------


def _ethtool(image: Path, netdev: str) -> dict[str, int]:
    return dict(parse_ethtool_s((image / "cmd" / f"ethtool_-S_{netdev}.stdout").read_text()))


def _link(image: Path, name: str) -> dict:
    return next(lk for lk in json.loads((image / "netlink" / "links.json").read_text())["links"]
                if lk["ifname"] == name)


def _ib(image: Path, dev: str, sub: str, name: str) -> int:
    # The image stores sysfs class symlinks flattened; the counters live under the PCI device.
    hits = list((image / "fs" / "sys" / "devices").rglob(f"infiniband/{dev}/ports/1/{sub}/{name}"))
    assert len(hits) == 1, hits
    return int(hits[0].read_text())


@pytest.mark.parametrize("rail", [0, 1])
def test_pfc_values_of_the_example_image(example_image: Path, example_text: bytes, rail: int) -> None:
    netdev = f"net_rail{rail}"
    c = _ethtool(example_image, netdev)
    r = {"rail": str(rail), "device": netdev, "prio": "3"}
    for d in ("rx", "tx"):
        assert value(example_text, "railscope_pfc_pause_frames_total", direction=d, **r) == c[f"{d}_prio3_pause"]
        # µs in the driver, seconds in the metric.
        assert value(example_text, "railscope_pfc_pause_duration_seconds_total", direction=d, **r) == \
            pytest.approx(c[f"{d}_prio3_pause_duration"] / 1e6, rel=1e-12)
        assert value(example_text, "railscope_prio_bytes_total", direction=d, **r) == c[f"{d}_prio3_bytes"]
    assert value(example_text, "railscope_pfc_pause_transitions_total", direction="rx", **r) == \
        c["rx_prio3_pause_transition"]
    assert value(example_text, "railscope_prio_discards_total", **r) == c["rx_prio3_discards"]
    assert value(example_text, "railscope_prio_ecn_marked_packets_total", **r) == c["rx_prio3_marked"]
    assert value(example_text, "railscope_pause_storm_error_events_total", rail=str(rail)) == \
        c["tx_pause_storm_error_events"]
    # PFC is on priority 3 only: no other priority has PFC series, although all have traffic series.
    assert {lab["prio"] for n, lab, _ in series(example_text) if n.startswith("railscope_pfc_")} == {"3"}
    assert len({lab["prio"] for n, lab, _ in series(example_text) if n == "railscope_prio_bytes_total"}) == 8


@pytest.mark.parametrize("rail", [0, 1])
def test_link_and_rdma_values_of_the_example_image(example_image: Path, example_text: bytes, rail: int) -> None:
    netdev, rdma = f"net_rail{rail}", f"rdma_rail{rail}"
    lk = _link(example_image, netdev)
    r = {"rail": str(rail), "device": netdev}
    assert value(example_text, "railscope_rail_up", **r) == 1
    assert value(example_text, "railscope_rail_carrier_changes_total", **r) == lk["carrier_changes"]
    assert value(example_text, "railscope_rail_mtu_bytes", **r) == lk["mtu"]
    assert value(example_text, "railscope_rail_speed_bytes", **r) == 400_000 * 1_000_000 / 8  # 400 GbE
    assert value(example_text, "railscope_rail_bytes_total", direction="tx", **r) == lk["stats64"]["tx_bytes"]
    assert value(example_text, "railscope_rail_info", pci=lk["parent_dev"], rdma=rdma, **r) == 1
    rr = {"rail": str(rail), "device": rdma}
    assert value(example_text, "railscope_rdma_port_up", **rr) == 1
    for name in ("np_cnp_sent", "rp_cnp_handled", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err"):
        assert value(example_text, f"railscope_rdma_{name}_total", **rr) == _ib(example_image, rdma, "hw_counters", name)
    # port_xmit_data counts 4-byte words.
    assert value(example_text, "railscope_rdma_port_bytes_total", direction="tx", **rr) == \
        4 * _ib(example_image, rdma, "counters", "port_xmit_data")


def test_node_and_pf_values_of_the_example_image(example_text: bytes) -> None:
    assert value(example_text, "railscope_kernel_info", release="6.8.0-60-generic") == 1
    assert value(example_text, "railscope_driver_info", driver="mlx5_core", version="25.10-1.7.1") == 1
    assert value(example_text, "railscope_firmware_info", rail="0", version="28.42.1000", psid="MT_0000000838") == 1
    assert value(example_text, "railscope_rdma_netns_info", mode="exclusive") == 1
    for pci in ("0000:0c:00.0", "0000:8d:00.0"):
        assert value(example_text, "railscope_sriov_vfs", pci=pci) == 1
        assert value(example_text, "railscope_representors", pci=pci) == 1
        assert value(example_text, "railscope_representors_stale", pci=pci) == 0
        assert value(example_text, "railscope_devlink_eswitch_info", pci=pci, mode="switchdev") == 1
        assert value(example_text, "railscope_devlink_param_info", pci=pci, param="esw_multiport",
                     value="false") == 1
    # A healthy node: no warning or critical finding is exported.
    assert not [lab for n, lab, _ in series(example_text)
                if n == "railscope_finding" and lab["severity"] in ("warning", "critical")]
    # The live agent's sources; every read completed (no OVS on the node is a fact, not a failure).
    ok = {lab["source"]: v for n, lab, v in series(example_text) if n == "railscope_scrape_collector_success"}
    from agent.readers.sources import SOURCES

    assert ok == {s.name: 1 for s in SOURCES}  # every source of the registry, each one read
    took = {lab["source"]: v for n, lab, v in series(example_text)
            if n == "railscope_scrape_collector_duration_seconds"}
    assert took["counters"] == pytest.approx(0.08)  # four ethtool commands of 0.02 s in the manifest
    assert "railscope_source_hung" not in {n for n, _, _ in series(example_text)}


def test_a_command_that_timed_out_in_the_capture_is_a_hung_source(
        example_image: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    image = tmp_path / "img"
    shutil.copytree(example_image, image, symlinks=True)
    manifest = json.loads((image / "manifest.json").read_text())
    for item in manifest["items"]:
        if item.get("argv") == ["ethtool", "-S", "net_rail1"]:
            item.update(timed_out=True, duration_s=10.0)
    (image / "manifest.json").write_text(json.dumps(manifest))
    rc, out, _ = run_cli(capsysbinary, "--from", str(image))
    assert rc == 0
    assert value(out, "railscope_source_hung", source="counters", device="net_rail1") == 1
    assert value(out, "railscope_scrape_collector_success", source="counters") == 0
    assert value(out, "railscope_scrape_collector_success", source="links") == 1
    # The hung rail's PFC counters are not there to serve; the other rail's are.
    assert {lab["device"] for n, lab, _ in series(out) if n == "railscope_pfc_pause_frames_total"} == {"net_rail0"}


def test_representor_include_flag(example_image: Path, capsysbinary: pytest.CaptureFixture[bytes],
                                  example_text: bytes) -> None:
    rc, out, _ = run_cli(capsysbinary, "--from", str(example_image), "--representor-include", "^net_rail1_")
    assert rc == 0
    before = series(example_text)
    added = [s for s in series(out) if s not in before]
    assert {(n, lab["device"]) for n, lab, _ in added} == {("railscope_representor_up", "net_rail1_0"),
                                                           ("railscope_representor_stale", "net_rail1_0")}


def test_a_bundle_tar_gz_gives_the_same_exposition(example_image: Path, example_text: bytes, tmp_path: Path,
                                                   capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    bundle = tmp_path / "bundle.tar.gz"
    with tarfile.open(bundle, "w:gz") as tf:
        tf.add(example_image, arcname="spectrumx-2rail-healthy")
    rc, out, _ = run_cli(capsysbinary, "--from", str(bundle))
    assert rc == 0 and out == example_text


# -- bad input: one line, exit 3, no traceback ----------------------------------------------------


@pytest.mark.parametrize("make", ["missing", "plain-dir", "not-tar"])
def test_a_non_image_path_exits_3_with_one_line(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes],
                                                 make: str) -> None:
    path = tmp_path / "x"
    if make == "plain-dir":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    elif make == "not-tar":
        path.write_text("not a bundle")
    rc, out, err = run_cli(capsysbinary, "--from", str(path))
    assert rc == 3 and out == b""
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("railscope metrics: ") and "Traceback" not in err.decode()


def test_a_bad_regex_is_a_usage_error(example_image: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["metrics", "--from", str(example_image), "--representor-include", "net_rail(["])
    assert exc.value.code == 3
    assert "not a valid regular expression" in capsysbinary.readouterr().err.decode()


@pytest.mark.skipif(shutil.which("railscope") is None, reason="the console script is not installed")
def test_console_script(example_image: Path) -> None:
    res = subprocess.run(["railscope", "metrics", "--from", str(example_image)], capture_output=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout == GOLDEN.read_bytes()
