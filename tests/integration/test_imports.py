"""What a command imports: ``railscope doctor`` must not pay for pyroute2, aiohttp or prometheus_client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("pyroute2", "aiohttp", "prometheus_client")

PROBE = f"""
import contextlib, io, json, sys
import agent.cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = agent.cli.main(sys.argv[1:])
print(json.dumps({{"rc": rc, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})}}))
"""


def probe(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_doctor_from_an_image_imports_no_heavy_module(example_image: Path) -> None:
    got = probe("doctor", "--json", "--from", str(example_image))
    assert got == {"rc": 0, "heavy": []}


def test_doctor_live_imports_no_heavy_module() -> None:
    got = probe("doctor", "--json")
    assert got["rc"] in (0, 1, 2) and got["heavy"] == []


def test_record_imports_no_heavy_module(tmp_path: Path) -> None:
    got = probe("record", "-o", str(tmp_path / "img"))
    assert got == {"rc": 0, "heavy": []}


def test_capture_imports_no_heavy_module(tmp_path: Path) -> None:
    got = probe("capture", "-o", str(tmp_path) + "/", "--recorder-gap", "0", "--deadline", "60")
    assert got == {"rc": 0, "heavy": []}
