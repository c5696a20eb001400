"""The kernel lab tier: one guest boot per session runs every scenario; the tests judge its results.

``scripts/klab/run-tier.sh`` builds the lab (cached in ``KLAB_WORK``), boots a real Debian 6.1 kernel
under QEMU with netdevsim, rdma_rxe and nlmon, and runs ``tests/klab/guest_scenarios.py`` inside it.
The guest only records; every assertion is made here, on the host, from ``results.json`` and the
files beside it (the live doctor's JSON, the node image the guest recorded).

Environment:
- ``RAILSCOPE_KLAB=0`` skips the tier;
- ``RAILSCOPE_KLAB_RESULTS=<dir>`` judges the results of an earlier run instead of booting
  (``$KLAB_WORK/results`` after ``scripts/klab/run-tier.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_TIER = ROOT / "scripts" / "klab" / "run-tier.sh"
LAB_SCRIPT = Path(os.environ.get("KLAB_LAB", ROOT.parent / "shared" / "klab" / "run-lab.sh"))


@dataclass(frozen=True)
class LabRun:
    """What one guest run left: ``results.json`` and the files the scenarios wrote."""

    path: Path
    results: dict[str, Any]

    def scenario(self, name: str) -> dict[str, Any]:
        """The data a scenario recorded; fails the test with the guest's traceback when it broke."""
        entry = self.results.get("scenarios", {}).get(name)
        if entry is None:
            pytest.fail(f"the guest did not run scenario {name!r} (see {self.path / 'guest.log'})")
        if not entry.get("ok"):
            pytest.fail(f"guest scenario {name!r} failed:\n{entry.get('error')}")
        return entry["data"]


def _load(path: Path) -> LabRun:
    results = path / "results.json"
    if not results.is_file():
        pytest.fail(f"no results.json in {path}")
    return LabRun(path, json.loads(results.read_text()))


@pytest.fixture(scope="session")
def klab(tmp_path_factory: pytest.TempPathFactory) -> LabRun:
    reuse = os.environ.get("RAILSCOPE_KLAB_RESULTS")
    if reuse:
        return _load(Path(reuse))
    if os.environ.get("RAILSCOPE_KLAB", "").lower() in ("0", "no", "off", "skip"):
        pytest.skip("RAILSCOPE_KLAB=0: kernel lab tier switched off")
    if os.geteuid() != 0:
        pytest.skip("the kernel lab needs root (9p passthrough of /usr and /etc, apt for qemu)")
    if not LAB_SCRIPT.is_file():
        pytest.skip(f"no kernel lab script at {LAB_SCRIPT} (set KLAB_LAB)")
    out = tmp_path_factory.mktemp("klab") / "results"
    env = dict(os.environ, KLAB_RESULTS=str(out), KLAB_LAB=str(LAB_SCRIPT))
    proc = subprocess.run(["bash", str(RUN_TIER)], env=env, capture_output=True, text=True, timeout=1500)
    if proc.returncode == 2:
        pytest.skip(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "kernel lab not available")
    if proc.returncode != 0:
        pytest.fail(f"scripts/klab/run-tier.sh failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")
    return _load(out)
