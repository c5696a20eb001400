"""``railscope report`` as text: every finding of every node image, the flight recorder as per-rail
series, the events in order, the manifest summary; bundle text escaped before the terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.readers.history import History, parse_events, parse_recorder
from agent.report.content import build_report, summarise_manifest
from tests.support.hostile_text import hostile_image

ROOT = Path(__file__).resolve().parents[3]
IMAGES = ROOT / "tests" / "images"
ALL = sorted(p.name for p in IMAGES.iterdir() if (p / "expected.json").is_file())


def report(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, int]:
    code = main(["report", str(path), *args])
    return capsys.readouterr().out, code


@pytest.mark.parametrize("name", ALL)
def test_the_text_report_names_every_finding(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((IMAGES / name / "expected.json").read_text())
    out, code = report(IMAGES / name, capsys, *expected["args"])
    assert code == expected["exit"]
    for fcode, severity, subject in expected["findings"]:
        line = next((ln for ln in out.splitlines() if f" {fcode} " in f" {ln} " and subject in ln), None)
        assert line is not None, (fcode, subject)
        assert line.startswith(severity.upper())
    assert "CAPTURE  " in out and "skipped:" in out  # every image skips the OVS query
    if (IMAGES / name / "recorder.jsonl").exists():
        assert "FLIGHT RECORDER (" in out and "rail 0  net_rail0" in out
    else:
        assert "flight recorder: none in this bundle" in out


def test_the_recorder_shows_the_storm_on_its_rail(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = report(IMAGES / "pfc-storm-recorder", capsys)
    rec = out[out.index("FLIGHT RECORDER"):out.index("events:")]
    rail0, rail1 = rec.split("rail 1  net_rail1")
    share0 = next(ln for ln in rail0.splitlines() if "Time paused" in ln)
    share1 = next(ln for ln in rail1.splitlines() if "Time paused" in ln)
    assert "peak 80.0 %" in share0 and ("█" in share0 or "▇" in share0)
    assert "peak 0.0 %" in share1 and "▇" not in share1


def test_events_in_order_with_their_time_before_the_capture(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = report(IMAGES / "link-flapping-events", capsys)
    ev = out[out.index("EVENTS (2"):].splitlines()
    assert "-3600 s" in ev[1] and "net_rail0" in ev[1]
    assert "-95 s" in ev[2] and "LinkFlapping  net_rail1" in ev[2]


def test_series_rates_shares_and_resets_are_gaps() -> None:
    rows = [
        {"ts": 100, "netdev": "net_rail0", "counters": {"tx_prio3_pause": 0, "tx_prio3_pause_duration": 0}},
        {"ts": 101, "netdev": "net_rail0", "counters": {"tx_prio3_pause": 50, "tx_prio3_pause_duration": 250_000}},
        {"ts": 102, "netdev": "net_rail0", "counters": {"tx_prio3_pause": 7, "tx_prio3_pause_duration": 10}},
        {"ts": 104, "netdev": "net_rail0", "counters": {"tx_prio3_pause": 27, "tx_prio3_pause_duration": 1_000_010}},
    ]
    rec, why = parse_recorder("".join(json.dumps(r) + "\n" for r in rows).encode())
    assert why is None
    from agent.findings import Diagnosis

    diag = Diagnosis("n", "k", (), ())
    rep = build_report("x", diag, History(recorder=rec, capture_time=104.0), None)
    (s,) = rep.series
    (pause,) = [ln for ln in s.lines("pause") if ln.direction == "tx"]
    assert pause.points == ((-3.0, 50.0), (-2.0, None), (0.0, 10.0)) and pause.resets == 1
    (share,) = [ln for ln in s.lines("pause_share") if ln.direction == "tx"]
    assert share.points[0] == (-3.0, 0.25) and share.points[2] == (0.0, 0.5)
    assert s.lines("discards") == () and rep.window_s == 4.0


def test_the_manifest_summary_is_type_checked() -> None:
    m = summarise_manifest({"node": "n", "cluster": 7, "items": [
        {"kind": "command", "argv": ["devlink", "-j", "dev", "show"], "rc": 0, "bytes": 10},
        {"kind": "command", "argv": ["rdma", "-j", "link", "show"], "timed_out": True, "duration_s": 10.0, "rc": None},
        {"kind": "file", "path": "fs/proc/cmdline", "truncated": True, "bytes": "lots"},
        {"kind": "command", "argv": ["ovs-vsctl", "show"], "skipped": True, "reason": "no socket"},
        {"kind": "command", "argv": ["devlink", "-j", "health", "show"], "rc": 1},
        "not an item", None,
    ]})
    assert m.items == 5 and m.bytes == 10 and m.field("cluster") is None and m.field("node") == "n"
    assert m.timed_out == (("rdma -j link show", 10.0),) and m.truncated == ("fs/proc/cmdline",)
    assert m.skipped == (("ovs-vsctl show", "no socket"),) and m.failed == (("devlink -j health show", 1),)
    assert not summarise_manifest(None, "manifest.json: not JSON").present


def test_bundle_text_is_escaped_before_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, code = report(hostile_image(tmp_path / "hostile"), capsys)
    assert code == 1  # the event is a LinkFlapping warning
    assert "\x1b" not in out and "\x07" not in out
    assert out.count("\\x1b]0;owned\\x07") >= 4  # the finding, the event, the reason, the skipped item


def test_not_an_image_is_exit_3_with_one_line(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "agent.cli", "report", str(tmp_path)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 3 and "not a railscope node image" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    events = parse_events(b"{}")
    assert events[0] == ()
