"""The alert rules in deploy/prometheus: promtool accepts them, their unit tests pass, they only use
series the agent exports, and every alert has a runbook, a firing case and a not-firing case; every
node-scoped alert is silenced by maintenance, in its expression and in a test."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest
import yaml

from agent.findings import Diagnosis, Finding
from agent.metrics.exposition import render
from agent.metrics.state import HungSource, SourceStatus
from tests.support.metrics_expo import DAEMON_PROCESSES, ROOT, have, names, state_for, with_degradation
from tests.support.metrics_synth import synthetic_snapshot

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
@pytest.mark.slow
def test_promtool_rule_unit_tests(suite) -> None:
    res = _promtool("test", "rules", str(suite))
    assert res.returncode == 0, res.stdout + res.stderr


def test_rules_use_only_series_the_agent_exports() -> None:
    snap = with_degradation(synthetic_snapshot(1, 2))
    snap = dataclasses.replace(snap, processes=DAEMON_PROCESSES)
    st = state_for(snap, diagnosis=Diagnosis("n", "k", (), (Finding("RailMissing", "critical", "net_rail3", ""),)),
                   sources=(SourceStatus("links", True),), hung=(HungSource("ethtool", "net_rail0"),),
                   event_codes=("LinkFlapping",), daemon_restarts={"ovs-vswitchd": 0})
    exported = names(render(st, clock=lambda: snap.taken_at))
    used = set(re.findall(r"\brailscope_[a-z0-9_]+", RULES.read_text()))
    assert used, "no railscope series in the rules"
    assert used <= exported | MAINTENANCE | PEER | COLLECTOR, sorted(used - exported - MAINTENANCE - PEER - COLLECTOR)


def _collector_names() -> set[str]:
    """The collector's own series (railscope.collector): what its /metrics serves."""
    from collector.metrics import CollectorMetrics

    return set(re.findall(r"^(railscope_[a-z0-9_]+)", CollectorMetrics().render().decode(), re.M))


COLLECTOR = _collector_names()


#: served by the lldp source, one series per rail with an LLDP neighbour (the synthetic node has none)
PEER = {"railscope_rail_peer_info"}


def _maintenance_names() -> set[str]:
    """Served beside the node's own series by the agent's Node watch (agent/service/maintenance.py)."""
    from agent.service.events import EventLog
    from agent.service.maintenance import ApiConfig, MaintenanceMetrics, NodeWatch

    watch = NodeWatch(ApiConfig("http://127.0.0.1:1"), "n")
    watch.allocatable = {"nvidia.com/rail0": 1}  # read from status.allocatable
    col = MaintenanceMetrics(watch, EventLog())
    return {s.name for fam in col.collect() for s in fam.samples}


MAINTENANCE = _maintenance_names()
MAINTENANCE_SUITE = ROOT / "deploy" / "prometheus" / "tests" / "railscope-maintenance-test.yaml"


def _alerts() -> dict[str, tuple[str, dict]]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: (g["name"], r) for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _cases(suites) -> dict[str, list[list]]:
    out: dict[str, list[list]] = {}
    for suite in suites:
        for test in yaml.safe_load(suite.read_text())["tests"]:
            for case in test.get("alert_rule_test", ()):
                out.setdefault(case["alertname"], []).append(case.get("exp_alerts") or [])
    return out


def test_every_alert_has_a_runbook_and_a_firing_and_a_quiet_case() -> None:
    cases = _cases(RULE_TESTS)
    for name, (_group, rule) in _alerts().items():
        assert rule["annotations"].get("runbook"), f"{name}: no runbook annotation"
        assert any(cases.get(name, ())), f"{name}: no test where it fires"
        assert any(not c for c in cases.get(name, ())), f"{name}: no test where it stays quiet"


def test_node_scoped_alerts_keep_node_and_go_quiet_in_maintenance() -> None:
    maintenance = _cases([MAINTENANCE_SUITE])
    node_scoped = {n: r for n, (g, r) in _alerts().items() if g == "railscope.alerts"}
    assert len(node_scoped) >= 18
    for name, rule in node_scoped.items():
        expr = " ".join(rule["expr"].split())
        assert re.search(r"unless on\(node\) (max_over_time\()?railscope_node_maintenance(\[\w+\]\))? == 1$", expr), name
        assert "by (" not in expr and "without" not in expr, f"{name} aggregates node away"
        got = maintenance.get(name, [])
        assert [] in got and any(got), f"{name}: the maintenance suite must show it quiet, then firing"
        for alerts in got:
            assert all(a["exp_labels"].get("node") for a in alerts), name
    for name, (group, rule) in _alerts().items():
        if group == "railscope.pool":
            assert "by (cluster, pool" in rule["expr"], f"{name}: pool-wide alerts group by pool"
