"""``railscope events`` reads a running agent's event log over its data socket, as ``kubectl exec
<pod> -- railscope events`` does in the agent's pod."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_netns import StartAgent, flap, wait_for

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]


def _events(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAILSCOPE_")}
    return subprocess.run([sys.executable, "-m", "agent.cli", "events", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **(env or {})})


def test_events_reads_the_agents_log_over_its_socket(start_agent: StartAgent, tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    agent = start_agent("--data-socket", str(sock))
    for _ in range(3):
        flap(agent.rails, 0)
    assert wait_for(lambda: [e for e in agent.events() if e["code"] == "LinkFlapping"], timeout=10)

    # the pod's environment names the socket: no flag needed
    res = _events("--json", "--code", "LinkFlapping", env={"RAILSCOPE_DATA_SOCKET": str(sock)})
    assert res.returncode == 0, res.stderr
    events = json.loads(res.stdout)["events"]
    assert [(e["code"], e["subject"]) for e in events] == [("LinkFlapping", "net_rail0")]

    res = _events("--agent", f"unix:{sock}", "--since", "10m")
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stdout.splitlines() if "LinkFlapping" in x]
    assert "WARNING" in line and "net_rail0" in line and line[:4].isdigit()
    assert _events("--agent", f"unix:{sock}", "--code", "PfcStorm").stdout.strip() == "no events"

    gone = _events("--agent", f"unix:{tmp_path / 'nothing.sock'}")
    assert gone.returncode == 1 and "railscope events:" in gone.stderr and "Traceback" not in gone.stderr
