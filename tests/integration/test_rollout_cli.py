"""``railscope rollout`` as a whole process against the API stand-in (in a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.rollout import ROOT, command, standin


def railscope(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", "rollout", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.parametrize(("scenario", "code", "line"), [
    ("healthy", 0, "rollout: converged"),
    ("ondelete-half", 1, "rollout: in progress (2 in-progress)"),
    ("validation-2h", 2, "rollout: stuck or failed (1 stuck)"),
    ("operator-conflicts", 0, "finding warning OperatorConfigConflict SriovOperatorConfig/"),
])
def test_text_and_exit(tmp_path: Path, scenario: str, code: int, line: str) -> None:
    with standin(tmp_path, scenario) as (url, tf, p):
        res = railscope("--api-server", url, "--api-token-file", tf)
        counts = json.loads(command(p, "count"))
    assert res.returncode == code, res.stdout + res.stderr
    assert line in res.stdout
    lines = res.stdout.splitlines()
    assert lines[-1].startswith("rollout: ")
    if scenario == "ondelete-half":
        assert lines[0].startswith("in-progress gpu-node-0000") and "doca-driver:24.10" in lines[0]
        assert "2 of 4 nodes converged" in res.stdout
    # one LIST per kind, nothing per node, nothing written
    assert all(n == 1 for k, n in counts.items() if k.startswith("list ")), counts
    assert not any(k.startswith(("get ", "write ", "watch ")) for k in counts), counts


def test_json_document(tmp_path: Path) -> None:
    with standin(tmp_path, "no-spectrum-x") as (url, tf, _p):
        res = railscope("--api-server", url, "--api-token-file", tf, "--json", "--node", "gpu-node-00002")
    doc = json.loads(res.stdout)
    assert res.returncode == 0
    assert doc["schema"] == "railscope.rollout/v1"
    assert doc["nodes"] == [{"node": "gpu-node-00002", "verdict": "converged", "step": "", "since": None,
                             "reason": ""}]
    assert {c["kind"] for c in doc["components"]} == {"NicClusterPolicy", "DaemonSet"}
    assert doc["findings"] == [] and doc["skipped"] == ["spectrumxrailpoolconfigs.spectrumx.nvidia.com"]


def test_wait_returns_when_the_last_node_converges(tmp_path: Path) -> None:
    with standin(tmp_path, "old-rail-generation") as (url, tf, p):
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "rollout", "--api-server", url, "--api-token-file",
                                 tf, "--wait", "--timeout", "60s"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert proc.poll() is None, "returned while a node is in progress"
        assert command(p, "converge-railpool") == "ok"
        out, err = proc.communicate(timeout=60)
        counts = json.loads(command(p, "count"))
    assert proc.returncode == 0, out + err
    assert "3/4 converged, 1 in-progress" in err
    assert "rollout: converged" in out
    assert all(n == 1 for k, n in counts.items() if k.startswith("list ")), counts


def test_no_api_server_and_bad_usage_exit_3(tmp_path: Path) -> None:
    res = railscope()  # not in a pod, no --api-server
    assert res.returncode == 3 and "no API server" in res.stderr
    res = railscope("--api-server", "http://127.0.0.1:9", "--api-token-file", str(tmp_path / "none"))
    assert res.returncode == 3, res.stderr
    res = railscope("--api-token-file", "x")
    assert res.returncode == 3 and "go with --api-server" in res.stderr
    res = railscope("--timeout", "5m")
    assert res.returncode == 3 and "--timeout goes with --wait" in res.stderr


@pytest.mark.parametrize(("scenario", "node", "code", "line"), [
    ("healthy", "gpu-node-00001", 0, "ok    rollout    converged"),
    ("upgrade-failed", "gpu-node-00001", 1, "FAIL  rollout    failed: driver upgrade-failed: Node/gpu-node-00001"),
])
def test_preflight_gains_the_nodes_rollout_verdict(tmp_path: Path, scenario: str, node: str, code: int,
                                                   line: str) -> None:
    image = ROOT / "tests" / "images" / "spectrumx-2rail-healthy"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    with standin(tmp_path, scenario) as (url, tf, p):
        res = subprocess.run([sys.executable, "-m", "agent.cli", "preflight", "--from", str(image), "--node", node,
                              "--api-server", url, "--api-token-file", tf, "--rollout"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, env=env)
        counts = json.loads(command(p, "count"))
    assert res.returncode == code, res.stdout + res.stderr
    assert line in res.stdout
    assert counts.get("list nodes") == 1 and not any(k.startswith("write ") for k in counts)


def _preflight(*args: str) -> subprocess.CompletedProcess[str]:
    image = ROOT / "tests" / "images" / "spectrumx-2rail-healthy"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", "preflight", "--from", str(image), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)


def test_preflight_judges_the_rollout_whenever_an_api_server_is_given(tmp_path: Path) -> None:
    """No --rollout: the API server given is enough; without one the check is named as skipped."""
    with standin(tmp_path, "upgrade-failed") as (url, tf, p):
        res = _preflight("--node", "gpu-node-00001", "--api-server", url, "--api-token-file", tf)
        assert res.returncode == 1, res.stdout + res.stderr
        assert "FAIL  rollout    failed: driver upgrade-failed: Node/gpu-node-00001" in res.stdout
        # a ServiceAccount that may not read the operators' objects (the agent's): skipped, named
        assert command(p, "forbid nodes pods nicdevices") == "ok"
        res = _preflight("--node", "gpu-node-00001", "--api-server", url, "--api-token-file", tf)
        assert "skip  rollout    this ServiceAccount may not read the operators' objects (forbidden: nodes, pods, " \
               "nicdevices.configuration.net.nvidia.com)" in res.stdout, res.stdout
        res = _preflight("--node", "gpu-node-00001", "--api-server", url, "--api-token-file", tf, "--rollout")
        assert res.returncode == 1 and "FAIL  rollout    this ServiceAccount may not read" in res.stdout
    res = _preflight("--node", "gpu-node-00001")
    assert res.returncode == 0 and "skip  rollout    no API server (not in a pod; --api-server)" in res.stdout
    assert "1 check(s) ok" not in res.stdout
    res = _preflight("--node", "gpu-node-00001", "--rollout")  # asked for: the alias requires it
    assert res.returncode == 1 and "FAIL  rollout    no API server" in res.stdout
    # an address where nothing answers: named as skipped, unless asked for
    res = _preflight("--node", "gpu-node-00001", "--api-server", "http://127.0.0.1:9", "--api-token-file",
                     str(tmp_path / "token"))
    assert "skip  rollout    the API server cannot be read" in res.stdout, res.stdout  # (resources fails there)
