"""The processes plug-in on a real daemon-named process: its command line is in the bundle redacted,
its environment nowhere, and the bundle replays the ``processes`` source as it was read live."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from agent.capture.plugins import load
from agent.capture.runner import CaptureParams, capture_to_file
from agent.host.live import LiveHost
from agent.host.recorded import open_image
from agent.readers.common import Notes
from agent.readers.processes import read_processes
from tests.support.daemons import INSTALL, can_install, in_user_session


def _installed(src: str, path: str, *argv: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``tests.support.daemons.install`` with a pipe on stdin (the shell's ``read`` blocks on it)."""
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", INSTALL,
                             src, path, *argv], env=env, stdin=subprocess.PIPE)


if not Path("/proc/self/stat").exists():
    pytest.skip("no /proc", allow_module_level=True)


@pytest.mark.skipif(not can_install() or in_user_session(), reason="needs root and unshare outside a user's session")
def test_a_daemons_command_line_is_redacted_and_its_environment_never_read(tmp_path: Path) -> None:
    # sh at ovs-vswitchd's install path (a daemon is confirmed by its executable and cgroup, not its
    # name), blocked in `read` on a pipe: ovs-vswitchd with a secret in its arguments and in its environment.
    proc = _installed(shutil.which("sh") or "/bin/sh", "/usr/sbin/ovs-vswitchd", "-c", "read x", "ovs-vswitchd",
                      "--token=s3cr3t-arg", "--pidfile", env={**os.environ, "OVS_TOKEN": "s3cr3t-env"})
    try:
        for _ in range(500):
            if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "ovs-vswitchd":
                break
            time.sleep(0.01)
        live = [p for p in read_processes(LiveHost("/"), Notes()) if p.pid == proc.pid]
        assert len(live) == 1
        res = capture_to_file(LiveHost("/"), str(tmp_path / "out") + "/",
                              CaptureParams(node="n", nice=0, recorder_gap_s=0),
                              plugin_modules=load(("replay", "processes")))
    finally:
        proc.kill()
        proc.wait(10)
    assert res.path is not None
    with tarfile.open(res.path) as tf:
        names = tf.getnames()
        blobs = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert not [n for n in names if n.endswith("/environ")]
    assert not [n for n, data in blobs.items() if b"s3cr3t" in data], "a secret of the process reached the bundle"
    table = next(data for n, data in blobs.items() if n.endswith("processes/daemons.txt")).decode()
    row = next(line for line in table.splitlines() if f" {proc.pid} " in line)
    # the plug-in keeps option names only; the runner's secret redaction then marks the token's place
    assert row.startswith("ovs-vswitchd") and "  ovs-vswitchd -c … … --token=" in row and row.endswith(" --pidfile")
    assert any(n.endswith(f"fs/proc/{proc.pid}/status") for n in names)
    host = open_image(res.path)
    try:
        replayed = [p for p in read_processes(host, Notes()) if p.pid == proc.pid]
    finally:
        host.close()
    assert [(p.daemon, p.name, p.start_time, p.ppid) for p in replayed] == \
        [(p.daemon, p.name, p.start_time, p.ppid) for p in live]


@pytest.mark.parametrize(("argv", "secret"), [
    (b"ovs-vswitchd --db-password=argv0-s3cret unix:/run/db.sock\0--pidfile\0", b"argv0-s3cret"),  # setproctitle
    (b"/usr/sbin/ovsdb-server\0-pglued-s3cret\0--remote=punix:/run/db.sock\0", b"glued-s3cret"),
    (b"/usr/bin/ipmi-helper\0-Uadmin\0-Pshort-s3cret\0-v\0", b"short-s3cret"),
])
def test_argv0_keeps_its_program_and_a_short_option_its_letter(argv: bytes, secret: bytes) -> None:
    from agent.capture.plugins.processes import redact_cmdline

    out = redact_cmdline(argv)
    assert secret.decode() not in out, out
    assert out.split()[0] in ("ovs-vswitchd", "ovsdb-server", "ipmi-helper")
