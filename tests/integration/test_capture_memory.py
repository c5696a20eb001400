"""A capture holding a 300 MiB item keeps the capturing process's peak RSS bounded: the file is
copied, redacted, gzipped and hashed in pieces, never held whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIG = 300 << 20
#: the whole process (interpreter, imports, buffers); the item alone is 300 MiB
RSS_BOUND = 120 << 20

CHILD = """
import json, sys
from types import SimpleNamespace
from agent.capture.plugin import File, Plugin
from agent.capture.runner import CaptureParams, capture_to_file
from agent.host.live import LiveHost
root, out = sys.argv[1], sys.argv[2]
plan = SimpleNamespace(PLUGIN=Plugin("big", 1, (File("/var/log/big.log", 400 << 20),)))
res = capture_to_file(LiveHost(root), out, CaptureParams(node="n", nice=0), plugin_modules=[plan])
item = next(i for i in res.manifest["items"] if i["path"] == "fs/var/log/big.log")
# VmHWM, not getrusage's ru_maxrss: the latter keeps the parent's high-water mark across
# fork + exec (the kernel folds the old mm's peak into the new process), so under a large pytest
# process it measured pytest, not the capture.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"path": res.path, "sha256": res.sha256, "item_bytes": item["bytes"], "maxrss": hwm * 1024}))
"""


def test_a_300_mib_item_keeps_peak_rss_bounded(tmp_path: Path) -> None:
    log = tmp_path / "root/var/log/big.log"
    log.parent.mkdir(parents=True)
    block = b"".join(b"%08d kernel: mlx5_core 0000:0c:00.0: port module event, status plugged\n" % i
                     for i in range(14_000))
    with open(log, "wb") as fh:
        while fh.tell() < BIG:
            fh.write(block[: BIG - fh.tell()])
    res = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "root"), str(tmp_path / "out/")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["item_bytes"] == BIG
    print(f"peak RSS with a {BIG >> 20} MiB item: {got['maxrss'] / (1 << 20):.1f} MiB")
    assert got["maxrss"] < RSS_BOUND, got["maxrss"]
    digest = subprocess.run(["sha256sum", got["path"]], capture_output=True, text=True, check=True).stdout.split()[0]
    assert digest == got["sha256"]
    assert Path(got["path"] + ".sha256").read_text() == f"{digest}  {Path(got['path']).name}\n"
