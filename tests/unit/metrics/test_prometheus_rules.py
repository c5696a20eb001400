"""The alert rules in deploy/prometheus: promtool accepts them, their unit tests pass, and they only
use series the agent exports."""

from __future__ import annotations

import re
import subprocess

import pytest
from metrics_expo import ROOT, have, names, state_for
from metrics_synth import synthetic_snapshot

from agent.findings import Diagnosis, Finding
from agent.metrics.exposition import render
from agent.metrics.state import HungSource, SourceStatus

RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"
RULE_TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yaml"))

needs_promtool = pytest.mark.skipif(not have("promtool"), reason="promtool is not installed (Debian 'prometheus')")


def _promtool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *argv], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT)


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    res = _promtool("check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
@pytest.mark.parametrize("suite", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests(suite) -> None:
    res = _promtool("test", "rules", str(suite))
    assert res.returncode == 0, res.stdout + res.stderr


def test_rules_use_only_series_the_agent_exports() -> None:
    snap = synthetic_snapshot(1, 2)
    st = state_for(snap, diagnosis=Diagnosis("n", "k", (), (Finding("RailMissing", "critical", "net_rail3", ""),)),
                   sources=(SourceStatus("links", True),), hung=(HungSource("ethtool", "net_rail0"),),
                   event_codes=("LinkFlapping",))
    exported = names(render(st, clock=lambda: snap.taken_at))
    used = set(re.findall(r"\brailscope_[a-z0-9_]+", RULES.read_text()))
    assert used, "no railscope series in the rules"
    assert used <= exported, sorted(used - exported)
