"""Every check module declares its checks and the codes they emit; run_checks finds them all.

The codes a check declares are held against what it emits on every node image of the suite (with the
image's own events and flight recorder), so a check that starts emitting a code it does not declare
fails here; the declared codes together are every snapshot code of ``agent.findings.CODES``.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import agent.analysis.checks as checks_pkg
from agent.analysis.checks import CHECKS, REFINES, Check, Inputs, Refine, discover
from agent.analysis.topology import build_topology
from agent.cli import build_parser
from agent.config import Expectations
from agent.expectations import expectations_from_args
from agent.findings import CODES, EVENT_CODES
from agent.offline import open_input
from agent.readers.history import load_history
from agent.readers.kernel_table import load_kernel_table
from agent.readers.snapshot import take_snapshot

IMAGES = Path(__file__).resolve().parents[3] / "images"
ALL = sorted(p.name for p in IMAGES.iterdir() if (p / "expected.json").is_file())


def test_every_module_that_declares_checks_is_run() -> None:
    declared = []
    for m in pkgutil.iter_modules(checks_pkg.__path__):
        if m.name.startswith("_"):
            continue
        declared.extend(getattr(importlib.import_module(f"agent.analysis.checks.{m.name}"), "CHECKS", ()))
    assert {c for c in declared if isinstance(c, Check)} == set(CHECKS)
    assert {r for r in declared if isinstance(r, Refine)} == set(REFINES)
    assert discover() == (CHECKS, REFINES)


def test_the_declared_codes_are_every_code() -> None:
    declared = {code for c in CHECKS for code in c.codes}
    assert declared <= set(CODES) | set(EVENT_CODES)
    assert set(CODES) <= declared, sorted(set(CODES) - declared)


@pytest.mark.parametrize("name", ALL)
def test_a_check_emits_only_the_codes_it_declares(name: str) -> None:
    image = IMAGES / name
    args = json.loads((image / "expected.json").read_text()).get("args", [])
    # judged with the image's expectation flags, as doctor judges it
    exp = expectations_from_args(build_parser().parse_args(["doctor", "--from", str(image), *args])) if args \
        else Expectations()
    host = open_input(str(image))
    try:
        snap = take_snapshot(host)
        hist = load_history(host)
    finally:
        host.close()
    topo = build_topology(snap, exp)
    inputs = Inputs(snap, topo, exp, kernel_table=load_kernel_table(None), events=hist.events,
                    recorder=hist.recorder, capture_time=hist.capture_time)
    for c in CHECKS:
        emitted = {f.code for f in c.run(inputs)}
        assert emitted <= set(c.codes), f"{c.run.__module__} emitted {sorted(emitted - set(c.codes))} undeclared"
