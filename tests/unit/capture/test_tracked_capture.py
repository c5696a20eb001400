"""A capture through the daemon's worker-thread host (``TrackedHost`` over a live host): the file
steps read the node through it as they do through the live host itself."""

from __future__ import annotations

import io
from pathlib import Path

from agent.capture.plugin import File, Plugin
from agent.capture.runner import CaptureParams, capture
from agent.host.firmware import FirmwareGate
from agent.host.live import LiveHost
from agent.service.tracked_host import Progress, TrackedHost
from tests.support.capture_kit import items, members, plugin


def test_file_steps_through_the_daemons_host_store_their_bytes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc/cmdline").write_bytes(b"BOOT_IMAGE=/vmlinuz ro quiet\n")
    (root / "etc/modprobe.d").mkdir(parents=True)
    (root / "etc/modprobe.d/mlx5.conf").write_bytes(b"options mlx5_core prof_sel=2\n")
    (root / "etc/udev/rules.d/sub").mkdir(parents=True)
    (root / "etc/udev/rules.d/sub/70-net.rules").write_bytes(b'SUBSYSTEM=="net"\n')
    plugins = [plugin(Plugin("t", 1, (File("/proc/cmdline", 4096), File("/etc/modprobe.d/*", 4096),
                                  File("/etc/udev/**/*.rules", 4096))))]
    host = TrackedHost(LiveHost(str(root)), Progress(), FirmwareGate())
    out = io.BytesIO()
    capture(host, out, CaptureParams(node="n", nice=0, recorder_gap_s=0), plugin_modules=plugins, staging_dir=str(tmp_path))
    got, listed = members(out.getvalue()), items(out.getvalue())
    failed = {p: i["reason"] for p, i in listed.items() if "failed" in str(i.get("reason"))}
    assert failed == {}
    assert got["fs/proc/cmdline"] == b"BOOT_IMAGE=/vmlinuz ro quiet\n"
    assert got["fs/etc/modprobe.d/mlx5.conf"] == b"options mlx5_core prof_sel=2\n"
    assert got["fs/etc/udev/rules.d/sub/70-net.rules"] == b'SUBSYSTEM=="net"\n'
    assert listed["fs/proc/cmdline"]["bytes"] == len(got["fs/proc/cmdline"])
