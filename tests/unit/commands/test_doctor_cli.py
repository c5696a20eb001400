"""``railscope doctor`` as an operator meets it: bad input gives one clear line and an exit status,
never a traceback; the live run works on a machine without any ConnectX NIC."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.findings import Diagnosis, Finding, RailRow
from agent.report.text import render

IMAGES = Path(__file__).resolve().parents[2] / "images"
BASE = IMAGES / "spectrumx-2rail-healthy"


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", "doctor", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def assert_clean_error(res: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("railscope")]
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0]


@pytest.fixture
def image(tmp_path: Path) -> Path:
    dst = tmp_path / "node"
    shutil.copytree(BASE, dst, symlinks=True)
    return dst


def test_corrupt_json_command_output_is_not_available(image: Path) -> None:
    (image / "cmd" / "devlink_-j_dev_show.stdout").write_text('{"dev": {"pci/0000:0c:00.0": ')
    (image / "cmd" / "rdma_-j_link_show.stdout").write_bytes(b"\x00\xff garbage")
    res = doctor("--from", str(image), "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["rails"]) == 2
    sources = " ".join(u["source"] + " " + u["reason"] for u in doc["unavailable"])
    assert "devlink" in sources and "rdma" in sources


def test_truncated_sysfs_files_raise_nothing(image: Path) -> None:
    pf = image / "fs/sys/devices/pci0000:8c/0000:8c:01.0/0000:8d:00.0"
    (pf / "sriov_numvfs").write_text("")
    (pf / "net/net_rail1/speed").write_text("")
    (image / "fs/proc/sys/kernel/osrelease").write_text("6.8.")
    res = doctor("--from", str(image), "--json")
    assert "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    row = doc["rails"][1]
    assert row["speed_mbps"] is None and row["numvfs"] is None
    assert not [f for f in doc["findings"] if f["code"] == "RepresentorStale"]  # unreadable numvfs judges nothing


def test_damaged_history_files_are_reasons(image: Path) -> None:
    (image / "events.json").write_text("{oops")
    (image / "recorder.jsonl").write_text('{"ts": 1, "netdev": "net_rail0", "counters": {}}\nnot json\n')
    (image / "manifest.json").write_text("[1, 2")
    res = doctor("--from", str(image), "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr
    reasons = {u["source"]: u["reason"] for u in json.loads(res.stdout)["unavailable"]}
    assert reasons["events"].startswith("events.json: not JSON")
    assert "line 2" in reasons["recorder"]
    assert reasons["manifest"].startswith("manifest.json")


def test_random_bytes_are_not_an_image(tmp_path: Path) -> None:
    junk = tmp_path / "bundle.tar.gz"
    junk.write_bytes(bytes(range(256)) * 40)
    assert_clean_error(doctor("--from", str(junk)), 3, str(junk))


def test_empty_directory_is_not_an_image(tmp_path: Path) -> None:
    assert_clean_error(doctor("--from", str(tmp_path)), 3, "not a railscope node image")


def test_missing_path(tmp_path: Path) -> None:
    assert_clean_error(doctor("--from", str(tmp_path / "nope")), 3, "no such file")


def test_truncated_tarball(tmp_path: Path) -> None:
    full = tmp_path / "b.tar.gz"
    with tarfile.open(full, "w:gz") as tf:
        tf.add(BASE, arcname="gpu-node-017-bundle")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    assert_clean_error(doctor("--from", str(cut)), 3, str(cut))


@pytest.mark.parametrize("top", [True, False])
def test_tarball_with_or_without_top_directory(tmp_path: Path, top: bool) -> None:
    path = tmp_path / "b.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        if top:
            tf.add(BASE, arcname="gpu-node-017-20261028T142033Z")
        else:
            for child in sorted(BASE.iterdir()):
                tf.add(child, arcname=child.name)
    res = doctor("--from", str(path), "--json")
    assert res.returncode == 0, res.stderr
    assert [r["netdev"] for r in json.loads(res.stdout)["rails"]] == ["net_rail0", "net_rail1"]


def test_bad_usage_exits_3() -> None:
    res = doctor("--expect-eswitch-mode", "sideways")
    assert res.returncode == 3 and "Traceback" not in res.stderr
    res = doctor("--lossless-prio", "9")
    assert res.returncode == 3 and "priority" in res.stderr


def test_bad_kernel_table_exits_3(tmp_path: Path) -> None:
    bad = tmp_path / "k.json"
    bad.write_text('{"rows": [{"driver": 26}]}')
    assert_clean_error(doctor("--from", str(BASE), "--kernel-table", str(bad)), 3, "row 0")
    assert_clean_error(doctor("--from", str(BASE), "--kernel-table", str(tmp_path / "none.json")), 3, "--kernel-table")


def test_host_root_that_is_not_a_directory(tmp_path: Path) -> None:
    assert_clean_error(doctor("--host-root", str(tmp_path / "nope")), 3, "--host-root")


def test_live_on_this_machine_says_what_it_found() -> None:
    res = doctor(env={"NO_COLOR": "1"})
    assert "Traceback" not in res.stderr
    if "no ConnectX NIC found" not in res.stdout:
        pytest.skip("this machine has a ConnectX NIC")
    assert res.returncode == 0
    assert "netdevs:" in res.stdout and "\x1b[" not in res.stdout


def test_json_exit_status_matches_findings() -> None:
    res = doctor("--from", str(IMAGES / "rail-link-down"), "--json")
    doc = json.loads(res.stdout)
    assert res.returncode == 2 and {f["severity"] for f in doc["findings"]} == {"critical"}
    res = doctor("--from", str(IMAGES / "pfc-disabled"))
    assert res.returncode == 1 and "PfcDisabled" in res.stdout and "net_rail1" in res.stdout


def test_doctor_stays_lean() -> None:
    code = ("import sys, io, contextlib\nfrom agent.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    main(['doctor', '--from', {str(BASE)!r}, '--json'])\n"
            "print(sorted(m for m in ('aiohttp', 'prometheus_client', 'boto3', 'botocore') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "[]", res.stderr


def _diag() -> Diagnosis:
    return Diagnosis("n1", "6.8.0-60-generic",
                     (RailRow(0, None, "net_rail0", "rdma_rail0", "0000:0c:00.0", "up", 400000, "ACTIVE"),
                      RailRow(1, None, None, None, "0000:8d:00.0", numvfs=1)),
                     (Finding("RailMissing", "critical", "net_rail1", "rail 1: no netdev"),))


def test_render_colour_only_when_asked() -> None:
    plain, coloured = io.StringIO(), io.StringIO()
    render(_diag(), plain)  # a StringIO is not a terminal
    render(_diag(), coloured, colour=True)
    assert "\x1b[" not in plain.getvalue() and "\x1b[" in coloured.getvalue()
    text = plain.getvalue()
    assert "CRITICAL" in text and "RailMissing" in text and "missing" in text and "400G" in text


def test_no_color_wins_over_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.report.text import use_colour

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())


def test_connectx_without_rails_is_told_apart_from_no_connectx() -> None:
    from agent.commands.doctor import what_was_found
    from agent.model import Link, PciFunction, Snapshot

    mlx = Snapshot(0.0, links=(Link(2, "enp12s0f0np0", "UP", 1, parent_bus="pci", parent_dev="0000:0c:00.0"),),
                   pci=(PciFunction("0000:0c:00.0", vendor="0x15b3"),))
    words = what_was_found(mlx)
    assert words[0].startswith("ConnectX NIC(s) found") and "enp12s0f0np0" in words[1]
    # what a --rail-map would name
    assert "--rail-map 0=0000:0c:00.0" in words[0] and words[-1] == "ConnectX PCI functions: 0000:0c:00.0"
    assert what_was_found(Snapshot(0.0))[:2] == ["no ConnectX NIC found", "netdevs: none besides lo"]
