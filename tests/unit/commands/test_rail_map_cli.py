"""``--rail-map``: rails declared by PCI function on every command that judges rails (doctor, metrics,
preflight, the agent), read strictly, recorded into bundles; ``--capture-on`` needs a spool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import build_parser, main
from agent.commands.agent import settings_from_args
from agent.config import SettingsError

IMAGES = Path(__file__).resolve().parents[2] / "images"
#: the netdevs keep systemd's names, no rule names a rail and the manifest records no map
KERNEL_NAMES = IMAGES / "rail-map-function-missing"
MAP = "0=0000:0c:00.0,1=0000:8d:00.0"
RAILS = [[0, None, "enp12s0f0np0", "mlx5_0", "0000:0c:00.0", "up", "ACTIVE"],
         [1, None, "enp141s0f0np0", "mlx5_1", "0000:8d:00.0", "up", "ACTIVE"]]


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in __import__("os").environ if v.startswith("RAILSCOPE_")]:
        monkeypatch.delenv(var)


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    rc = main(["doctor", "--from", str(KERNEL_NAMES), "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def _rows(doc: dict) -> list[list]:
    return [[r["rail"], r["plane"], r["netdev"], r["rdma"], r["pci"], r["oper"], r["rdma_state"]] for r in doc["rails"]]


def test_a_node_whose_netdevs_no_template_matches_has_its_rails_by_pci_with_the_rail_map(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, doc = _doctor(capsys)
    assert rc == 0 and doc["rails"] == []  # no rail found: nothing judged per rail
    rc, doc = _doctor(capsys, "--rail-map", MAP)
    assert rc == 0 and _rows(doc) == RAILS and doc["findings"] == []
    # a file of "RAIL PCI" lines, comments and blank lines between
    path = tmp_path / "rails.txt"
    path.write_text("# rail  PCI function (lspci -D -d 15b3:)\n1 0000:8d:00.0\n\n0\t0000:0C:00.0  # rail 0\n")
    rc, doc = _doctor(capsys, "--rail-map", str(path))
    assert rc == 0 and _rows(doc) == RAILS
    # the variable, as the chart gives it
    monkeypatch.setenv("RAILSCOPE_RAIL_MAP", MAP)
    rc, doc = _doctor(capsys)
    assert _rows(doc) == RAILS
    assert main(["doctor", "--from", str(KERNEL_NAMES)]) == 0
    assert f"judged with: rail_map={MAP} (RAILSCOPE_RAIL_MAP)" in capsys.readouterr().out


@pytest.mark.parametrize("value, why", [
    ("0=0c:00.0", "'0c:00.0' has no PCI domain: write it as sysfs does, 0000:0c:00.0"),
    ("0=0000:0c:00.0,1=0000:0c:00.0", "0000:0c:00.0 is given for rails 0 and 1"),
    ("0 0000:0c:00.0", "0 0000:0c:00.0: no such file (a map on the command line is RAIL=PCI pairs"),
    ("", "empty: expected RAIL=PCI pairs"),
])
def test_a_bad_rail_map_is_a_usage_error_naming_the_entry(value: str, why: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "--from", str(KERNEL_NAMES), "--rail-map", value])
    err = capsys.readouterr().err
    assert exc.value.code == 3 and "--rail-map" in err and why in err and "Traceback" not in err


def test_a_bad_line_of_a_rail_map_file_is_named_by_file_and_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rails.txt"
    path.write_text("0 0000:0c:00.0\n1 0000:8d:00.0 eth1\n")
    with pytest.raises(SystemExit):
        main(["doctor", "--from", str(KERNEL_NAMES), "--rail-map", str(path)])
    assert f"{path}:2: expected RAIL PCI, e.g. 0 0000:0c:00.0, got '1 0000:8d:00.0 eth1'" in capsys.readouterr().err


def test_metrics_serve_the_mapped_rails_and_a_node_without_rails_says_zero(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["metrics", "--from", str(KERNEL_NAMES)]) == 0
    text = capsysbinary.readouterr().out.decode()
    assert "\nrailscope_rails 0.0\n" in text and "railscope_rail_up" not in text
    assert main(["metrics", "--from", str(KERNEL_NAMES), "--rail-map", MAP]) == 0
    text = capsysbinary.readouterr().out.decode()
    assert "\nrailscope_rails 2.0\n" in text
    assert 'railscope_rail_up{device="enp141s0f0np0",plane="",rail="1"} 1.0' in text


def test_preflight_judges_the_mapped_rails(capsys: pytest.CaptureFixture[str]) -> None:
    main(["preflight", "--from", str(KERNEL_NAMES), "--json", "--rail-map", "0=0000:0c:00.0,1=0000:0d:00.0"])
    rails = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["check"] == "rails")
    assert rails == {"check": "rails", "status": "fail", "detail": "RailMissing 0000:0d:00.0"}
    main(["preflight", "--from", str(KERNEL_NAMES), "--json", "--rail-map", MAP])
    rails = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["check"] == "rails")
    assert rails["status"] == "ok", rails


def test_the_agent_reads_the_rail_map_into_its_expectations_and_its_readers() -> None:
    args = build_parser("agent").parse_args(["agent", "--listen", "10.0.0.7", "--rail-map", MAP])
    s = settings_from_args(args)
    want = ((0, "0000:0c:00.0"), (1, "0000:8d:00.0"))
    assert s.expectations.rail_map == want and s.read.rail_map == want


def test_capture_on_without_a_spool_is_refused_at_start(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An event capture is written into the spool: without one --capture-on captured nothing, silently."""
    argv = ["agent", "--listen", "10.0.0.7", "--capture-on", "LinkFlapping,PfcStorm"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert ("railscope agent: --capture-on LinkFlapping,PfcStorm: event captures are written into the spool, "
            "and none is given: add --spool DIR") in err
    with pytest.raises(SettingsError, match="--capture-on LinkFlapping"):
        settings_from_args(build_parser("agent").parse_args([*argv, "--collector", "http://collector:9842"]))
    s = settings_from_args(build_parser("agent").parse_args([*argv, "--spool", str(tmp_path)]))
    assert s.capture_on == {"LinkFlapping", "PfcStorm"} and s.spool_dir == str(tmp_path)
