"""``railscope snapshot --cluster`` and ``railscope diff`` of two cluster snapshots, as whole processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.support.rollout import ROOT, command, standin


def snap(url: str, tf: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", "snapshot", "--cluster", "-o", str(out), "--api-server",
                           url, "--api-token-file", tf], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def diff(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    return subprocess.run([sys.executable, "-m", "agent.cli", "diff", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


def test_snapshot_is_one_verifiable_file_and_holds_no_secret(tmp_path: Path) -> None:
    out = tmp_path / "before.tar.gz"
    with standin(tmp_path, "no-spectrum-x") as (url, tf, p):
        res = snap(url, tf, out)
        counts = json.loads(command(p, "count"))
    assert res.returncode == 0, res.stderr
    assert "skipped (not in this cluster): spectrumxrailpoolconfigs.spectrumx.nvidia.com" in res.stdout
    hexd, name = (tmp_path / "before.tar.gz.sha256").read_text().split()
    assert name == "before.tar.gz" and hexd == hashlib.sha256(out.read_bytes()).hexdigest()
    with tarfile.open(out) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("railscope-cluster/manifest.json"))  # type: ignore[arg-type]
    assert names[0] == "railscope-cluster/manifest.json"
    assert "railscope-cluster/objects/nicdevices.jsonl" in names and "railscope-cluster/objects/crds.jsonl" in names
    assert manifest["charts"] == ["network-operator-25.4.0"] and manifest["counts"]["nicdevices"] == 32
    assert not any(k.startswith(("write ", "get ")) or "secrets" in k for k in counts), counts


def test_diff_of_two_snapshots_names_changes_and_regressions(tmp_path: Path) -> None:
    before, after = tmp_path / "before.tar.gz", tmp_path / "after.tar.gz"
    with standin(tmp_path, "healthy") as (url, tf, _p):
        assert snap(url, tf, before).returncode == 0
    with standin(tmp_path, "ondelete-half") as (url, tf, _p):
        assert snap(url, tf, after).returncode == 0
    res = diff(str(before), str(after))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "REGRESSION convergence Node/gpu-node-00002 lost its convergence: in-progress driver drain-required" \
        in res.stdout
    assert "change     label       Node/gpu-node-00003: nvidia.com/ofed-driver-upgrade-state upgrade-done -> " \
           "upgrade-required" in res.stdout
    res = diff("--json", str(before), str(before))
    assert res.returncode == 0 and json.loads(res.stdout) == {"schema": "railscope.cluster-diff/v1",
                                                              "regressions": [], "changes": []}
    # a snapshot whose digest no longer matches is refused
    data = bytearray(after.read_bytes())
    data[-5] ^= 1
    after.write_bytes(bytes(data))
    res = diff(str(before), str(after))
    assert res.returncode == 3 and "sha256 does not match" in res.stderr


def test_rails_lost_between_snapshots(tmp_path: Path) -> None:
    before, after = tmp_path / "b.tar.gz", tmp_path / "a.tar.gz"
    with standin(tmp_path, "healthy") as (url, tf, _p):
        assert snap(url, tf, before).returncode == 0
    with standin(tmp_path, "rails-zero") as (url, tf, _p):
        assert snap(url, tf, after).returncode == 0
    res = diff(str(before), str(after))
    assert res.returncode == 1
    assert "REGRESSION resource    Node/gpu-node-00001 lost its rails: nvidia.com/rail5 127 -> 0" in res.stdout


def test_the_log_tails_of_troubled_pods_where_the_serviceaccount_may_read_them(tmp_path: Path) -> None:
    """A crashlooping driver pod's log tail is kept; a 403 on pods/log is skipped and named, never an error."""
    pod = "mofed-ubuntu22.04-7c9d8c6b5-ds-00001"
    out, refused = tmp_path / "with-logs.tar.gz", tmp_path / "no-logs.tar.gz"
    with standin(tmp_path, "healthy") as (url, tf, p):
        assert command(p, f"log {pod} c waiting-for-mlx5_core unload-failed:module-in-use") == "ok"
        res = snap(url, tf, out)
        assert res.returncode == 0, res.stderr
        assert "1 log tail(s)" in res.stdout
        assert command(p, "forbid pods/log") == "ok"
        res2 = snap(url, tf, refused)
        counts = json.loads(command(p, "count"))
    with tarfile.open(out) as tar:
        log = tar.extractfile(f"railscope-cluster/logs/{pod}/c.log").read().decode()  # type: ignore[union-attr]
        manifest = json.load(tar.extractfile("railscope-cluster/manifest.json"))  # type: ignore[arg-type]
    assert log == "waiting-for-mlx5_core\nunload-failed:module-in-use\n"
    assert manifest["logs"] == 1 and "pods/log (forbidden)" not in manifest["skipped"]
    assert res2.returncode == 0, res2.stderr
    assert "skipped (this ServiceAccount may not read them): pods/log" in res2.stdout
    with tarfile.open(refused) as tar:
        manifest = json.load(tar.extractfile("railscope-cluster/manifest.json"))  # type: ignore[arg-type]
        assert not [n for n in tar.getnames() if "/logs/" in n]
    assert manifest["logs"] == 0 and "pods/log (forbidden)" in manifest["skipped"]
    # one log request per troubled container, the tail only; no secrets, no writes
    assert counts["get pods/log"] == 2 and not any(k.startswith("write ") or "secrets" in k for k in counts)
