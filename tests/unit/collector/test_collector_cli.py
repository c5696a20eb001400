"""``railscope collector`` and ``railscope bundles``: flags map onto settings; bad usage exits 3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import build_parser
from agent.commands.collector import settings_from_args
from collector.config import SettingsError, parse_store

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_flags_map_onto_settings(tmp_path: Path) -> None:
    args = build_parser("collector").parse_args([
        "collector", "--listen", "0.0.0.0", "--port", "9000", "--store", "s3://bkt/railscope/prod",
        "--s3-endpoint-url", "http://127.0.0.1:8333", "--max-bundle-size", "2G", "--max-inflight", "3",
        "--min-rate", "1M", "--stall-timeout", "2m", "--part-size", "16M", "--insecure-dev",
        "--agent-service-account", "system:serviceaccount:ns:agent"])
    s = settings_from_args(args)
    assert (s.listen, s.port, s.store.kind, s.store.bucket, s.store.prefix) == ("0.0.0.0", 9000, "s3", "bkt",
                                                                              "railscope/prod")
    assert (s.max_bundle_bytes, s.max_inflight, s.min_rate_bps, s.stall_timeout_s, s.part_bytes) == (
        2 << 30, 3, 1 << 20, 120.0, 16 << 20)
    assert s.insecure_dev and s.agent_service_accounts == ("system:serviceaccount:ns:agent",)


@pytest.mark.parametrize("store", ["s3://", "s3://bkt/../x", "ftp://x", ""])
def test_bad_stores_are_refused(store: str) -> None:
    with pytest.raises(SettingsError):
        parse_store(store)


def test_a_part_below_5_mib_is_refused() -> None:
    args = build_parser("collector").parse_args(["collector", "--part-size", "1M", "--insecure-dev"])
    with pytest.raises(SettingsError, match="5242880"):
        settings_from_args(args)


def test_the_collector_refuses_to_start_without_a_token_source(tmp_path: Path) -> None:
    res = _cli("collector", "--store", str(tmp_path / "s"), "--port", "1")
    assert res.returncode == 3 and "--insecure-dev" in res.stderr


def test_bundles_needs_a_collector_and_an_action() -> None:
    assert _cli("bundles", "ls").returncode == 3
    assert _cli("bundles", "--collector", "http://127.0.0.1:9").returncode == 3
    res = _cli("bundles", "--collector", "http://127.0.0.1:9", "ls")
    assert res.returncode == 1 and "cannot reach" in res.stderr


def test_the_collector_logs_one_json_object_per_line_like_the_agent(tmp_path: Path) -> None:
    """The collector process's log, start to stop, is JSON lines with the agent's keys (ts, level, logger,
    msg): one log pipeline parses both."""
    import json
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "collector", "--store", str(tmp_path / "store"),
                             "--listen", "127.0.0.1", "--port", str(port), "--insecure-dev", "--log-level", "debug"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "the collector logged nothing"
    docs = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(d) for d in docs), docs
    assert any(d["logger"].startswith("railscope.collector") for d in docs), docs
