"""DESIGN §1 for the wire format and the collector, transitively: ``proto`` imports neither ``agent``
nor ``collector``; ``collector`` never the live host, the capture runner or the agent service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import importlib, json, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
print(json.dumps(sorted(sys.modules)))
"""

FORBIDDEN_FOR_COLLECTOR = ("agent.host.live", "agent.service", "agent.capture", "pyroute2")


def loaded(*modules: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_proto_imports_neither_agent_nor_collector() -> None:
    mods = loaded("proto.frames", "proto.keys")
    assert [m for m in mods if m.split(".")[0] in ("agent", "collector")] == []


def test_collector_stays_off_the_live_node() -> None:
    mods = loaded("collector.app", "collector.storage.local", "collector.storage.s3")
    bad = [m for m in mods if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_FOR_COLLECTOR)]
    assert bad == []


def test_the_uploader_needs_no_collector() -> None:
    mods = loaded("agent.capture.upload")
    assert [m for m in mods if m.split(".")[0] == "collector"] == []
