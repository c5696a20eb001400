"""A daemon's own captures, read back from what they stored: ``railscope agent --capture-on`` in a
network namespace with veth rails, the rail flapped for real, the spooled bundle opened.

Each file step of the capture plans (``/proc/cmdline``, ``/etc/modprobe.d/*`` ...) must be in the
bundle with its bytes, the same as ``railscope capture`` stores them, never a failed step.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from .test_agent_netns import StartAgent, _spooled, flap, start_agent, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow]

__all__ = ["start_agent"]  # the fixture, used by name


def _manifest(bundle: Path) -> tuple[dict, dict[str, int]]:
    """The bundle's manifest and the size of each member (path inside the bundle -> bytes)."""
    with tarfile.open(bundle) as tf:
        sizes = {m.name.split("/", 1)[1]: m.size for m in tf.getmembers() if m.isfile() and "/" in m.name}
        top = bundle.name[: -len(".tar.gz")]
        doc = json.loads(tf.extractfile(f"{top}/manifest.json").read())  # type: ignore[union-attr]
    return doc, sizes


def test_an_event_capture_stores_every_file_step_with_its_bytes(start_agent: StartAgent, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    agent = start_agent("--capture-on", "LinkFlapping", "--spool", str(spool))
    for _ in range(3):
        flap(agent.rails, 0)
    bundles = wait_for(lambda: _spooled(spool), timeout=90, step=0.2)
    assert len(bundles) == 1, agent.log_path.read_text()[-3000:]
    failed_logs = [x for x in agent.logs() if x.get("msg") == "capture step failed"]
    assert failed_logs == [], failed_logs[:3]
    doc, sizes = _manifest(bundles[0])
    items = {it["path"]: it for it in doc["items"]}
    failed = {p: it["reason"] for p, it in items.items() if str(it.get("reason") or "").startswith("failed")}
    assert failed == {}
    # Every node has a kernel command line; the plug-in's file step stores it, bytes and all.
    cmdline = items.get("fs/proc/cmdline")
    assert cmdline is not None and not cmdline.get("skipped"), cmdline
    assert cmdline["bytes"] > 0 and sizes["fs/proc/cmdline"] == cmdline["bytes"]
    # Every file item that is not skipped has its bytes in the bundle, and they are not all empty.
    files = [it for it in doc["items"] if it["kind"] == "file" and not it.get("skipped")]
    assert files
    for it in files:
        if it["path"] in sizes:
            assert sizes[it["path"]] == it["bytes"], it
    plugin_files = [it for it in files if it.get("plugin") not in (None, "replay") and it["path"] in sizes]
    assert plugin_files and any(sizes[it["path"]] > 0 for it in plugin_files)
