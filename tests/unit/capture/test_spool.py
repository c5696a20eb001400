"""The node spool: 0700, sidecars with the upload metadata, the cap drops the oldest first with a
log line and a count, and what is in it survives a restart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from agent.capture.plugin import Generated, Plugin
from agent.capture.runner import CaptureParams
from agent.capture.spool import Spool
from agent.host.live import LiveHost
from tests.support.capture_kit import plugin


def _plan(size: int) -> list:
    # incompressible bytes, so the bundle's size is about ``size``
    return [plugin(Plugin("t", 1, (Generated("blob.bin", lambda ctx: os.urandom(size)),)))]


def _capture(spool: Spool, tmp_path: Path, incident: str, size: int = 100_000):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    params = CaptureParams(node="node-a", cluster="lab", incident=incident, reason="LinkFlapping", nice=0,
                           name=f"node-a-{incident}")
    return spool.capture(LiveHost(str(root)), params, plugin_modules=_plan(size))


def test_spool_holds_bundles_with_their_sidecars(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"), 10 << 20)
    assert stat.S_IMODE(os.stat(spool.root).st_mode) == 0o700
    entry = _capture(spool, tmp_path, "inc-1")
    meta = json.loads(Path(entry.sidecar).read_text())
    assert {k: meta[k] for k in ("node", "cluster", "incident", "reason")} == \
        {"node": "node-a", "cluster": "lab", "incident": "inc-1", "reason": "LinkFlapping"}
    assert meta["bundle"] and meta["agent"] and meta["bytes"] == os.path.getsize(entry.bundle)
    # the uploader reads the sidecar as the hello frame
    from proto.frames import Hello

    hello = Hello.from_json(meta)
    assert (hello.node, hello.cluster, hello.incident) == ("node-a", "lab", "inc-1") and hello.created > 1.6e9
    check = subprocess.run(["sha256sum", "-c", os.path.basename(entry.sha256_file)], cwd=spool.root,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    assert b"".join(entry.chunks(4096)) == Path(entry.bundle).read_bytes()
    assert sorted(os.listdir(spool.root)) == ["node-a-inc-1.json", "node-a-inc-1.tar.gz", "node-a-inc-1.tar.gz.sha256"]


def test_the_cap_drops_the_oldest_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spool = Spool(str(tmp_path / "spool"), 250_000)
    for n in range(1, 4):
        _capture(spool, tmp_path, f"inc-{n}")
    names = [e.name for e in spool.entries()]
    assert names == ["node-a-inc-2", "node-a-inc-3"]  # three of ~100 kB do not fit in 250 kB
    assert spool.dropped_total == 1 and spool.total_bytes() <= 250_000
    assert not (tmp_path / "spool/node-a-inc-1.tar.gz").exists()
    assert not (tmp_path / "spool/node-a-inc-1.tar.gz.sha256").exists()
    drops = [r for r in caplog.records if "dropped the oldest" in r.getMessage()]
    assert len(drops) == 1 and drops[0].bundle == "node-a-inc-1"  # type: ignore[attr-defined]


def test_the_spool_survives_a_restart_and_cleans_what_a_crash_left(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"), 10 << 20)
    _capture(spool, tmp_path, "inc-1")
    (tmp_path / "spool/.railscope-abc.tar.gz.part").write_bytes(b"half")
    (tmp_path / "spool/.railscope-capture-xyz").mkdir()
    (tmp_path / "spool/orphan.tar.gz").write_bytes(b"no sidecar")
    os.chmod(tmp_path / "spool", 0o755)
    again = Spool(str(tmp_path / "spool"), 10 << 20)
    assert [e.name for e in again.entries()] == ["node-a-inc-1"]
    assert sorted(os.listdir(again.root)) == ["node-a-inc-1.json", "node-a-inc-1.tar.gz", "node-a-inc-1.tar.gz.sha256"]
    assert stat.S_IMODE(os.stat(again.root).st_mode) == 0o700
    again.remove(again.entries()[0])
    assert os.listdir(again.root) == []
