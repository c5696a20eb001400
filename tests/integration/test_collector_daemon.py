"""The agent daemon empties its spool into the collector: nothing leaves the spool while the
collector is away, the spool survives an agent restart, and each bundle lands exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.collector_env import ROOT, Collector, free_port
from tests.support.netns import RailNetns

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, files, spool_bundle, write_tokens  # isort: skip

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def _agent(rails: RailNetns, tmp_path: Path, spool: Path, url: str, token: Path, n: int) -> subprocess.Popen:
    argv = ["ip", "netns", "exec", rails.node, sys.executable, "-m", "agent.cli", "agent", "--listen", "10.99.0.1",
            "--port", str(free_port()), "--rails", "2", "--spool", str(spool), "--collector", url,
            "--collector-token-file", str(token), "--upload-interval", "1s"]
    log = open(tmp_path / f"agent-{n}.log", "wb")  # the child holds it
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_the_daemon_drains_its_spool_once_the_collector_is_there(rails: RailNetns, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    now = time.time()
    for i in range(3):
        spool_bundle(spool, replace(HELLO, bundle=f"bspool{i}"), os.urandom(100_000), now - 10 + i)
    token = tmp_path / "token"
    token.write_text(AGENT_TOKEN + "\n")
    token.chmod(0o600)  # a token file readable by others is refused
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, str(tmp_path / "store"), tokens=tokens, netns=rails.node)

    agent = _agent(rails, tmp_path, spool, col.url, token, 0)
    try:
        time.sleep(4)  # several upload rounds against a collector that is not there
        assert agent.poll() is None, (tmp_path / "agent-0.log").read_text()[-2000:]
        assert len(list(spool.glob("*.tar.gz"))) == 3
    finally:
        _stop(agent)
    col.start()
    agent = _agent(rails, tmp_path, spool, col.url, token, 1)  # the spool survived the restart
    try:
        deadline = time.monotonic() + 30
        while list(spool.glob("*.tar.gz")) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        _stop(agent)
        col.stop()
    assert list(spool.glob("*.tar.gz")) == [], (tmp_path / "agent-1.log").read_text()[-2000:]
    stored = [f for f in files(tmp_path / "store") if f.endswith(".tar.gz")]
    assert sorted(Path(f).name.split("-")[-1] for f in stored) == [f"bspool{i}.tar.gz" for i in range(3)]
