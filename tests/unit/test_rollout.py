"""The pure verdict (agent/analysis/rollout.py): times, the stuck clock, the clause order."""

from __future__ import annotations

import calendar
import time

from agent.analysis import rollout
from agent.analysis.rollout import ClusterView, judge, parse_time


def test_times() -> None:
    assert parse_time("2026-03-01T12:00:00Z") == calendar.timegm((2026, 3, 1, 12, 0, 0, 0, 0, 0))
    assert parse_time("2026-03-01T12:00:00.123456+02:00") == calendar.timegm((2026, 3, 1, 10, 0, 0, 0, 0, 0))
    assert parse_time("1727183014") == 1727183014.0  # the upgrade annotations: unix seconds
    assert parse_time("null") is None and parse_time("") is None and parse_time("yesterday") is None
    for t in (0, 951782400, 1709251199, 4102444800, 1727183014):  # leap days, far ends
        assert rollout._iso(t) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _view(**node_labels: str) -> ClusterView:
    v = ClusterView()
    v.put("nodes", {"metadata": {"name": "n1", "labels": dict(node_labels)}, "status": {"allocatable": {}}})
    return v


def test_the_watchers_clock_makes_a_step_stuck_and_a_new_step_starts_again() -> None:
    seen: dict = {}
    v = _view(**{rollout.UPGRADE_LABEL: "drain-required"})
    assert judge(v, 1000.0, first_seen=seen).nodes[0].verdict == "in-progress"
    r = judge(v, 1000.0 + 1801, first_seen=seen)
    assert (r.nodes[0].verdict, r.nodes[0].since) == ("stuck", 1000.0)
    v = _view(**{rollout.UPGRADE_LABEL: "pod-restart-required"})
    r = judge(v, 4000.0, first_seen=seen)
    assert (r.nodes[0].verdict, r.nodes[0].since) == ("in-progress", 4000.0)
    assert list(seen) == [("n1", "driver pod-restart-required")]


def test_no_label_is_upgrades_off_and_converged_mofed_wait_is_not() -> None:
    assert judge(_view(), 0.0).nodes[0].verdict == "converged"
    r = judge(_view(**{rollout.MOFED_WAIT: "true"}), 0.0)
    assert (r.nodes[0].verdict, r.nodes[0].step, r.exit_code) == ("in-progress", "mofed.wait", 1)


def test_a_critical_finding_of_the_nodes_agent_holds_the_node() -> None:
    diag = {"n1": {"findings": [{"code": "RailLinkDown", "severity": "critical", "subject": "eth_r3"}]}}
    r = judge(_view(), 0.0, diagnoses=diag)
    assert (r.nodes[0].verdict, r.nodes[0].reason) == ("in-progress", "the node's agent: RailLinkDown eth_r3")
