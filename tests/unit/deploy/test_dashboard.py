"""The Grafana dashboard (deploy/grafana/railscope-rails.json): every query names only metrics the agent
and the collector export (their golden expositions, the agent's catalogue, the daemon's own families and
the recording rules), the chart ships the same JSON as a ConfigMap for Grafana's sidecar, and the
collector's exposition is golden too (``RAILSCOPE_UPDATE_GOLDEN=1`` regenerates it). Each panel's PromQL
runs against a real Prometheus in tests/integration/test_dashboard_prometheus.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from collector.metrics import CollectorMetrics
from tests.support.chart import CHART, render
from tests.support.dashboard import DASHBOARD, dashboard, metric_names, targets

ROOT = Path(__file__).resolve().parents[3]
CHART_COPY = CHART / "files" / "railscope-rails.json"
AGENT_GOLDEN = ROOT / "tests" / "golden" / "spectrumx-2rail-healthy.prom"
COLLECTOR_GOLDEN = ROOT / "tests" / "golden" / "collector.prom"
CATALOGUE = ROOT / "deploy" / "prometheus" / "METRICS.md"
RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"


def _sample_names(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)} | {
        m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", text, re.M)}


def collector_exposition() -> str:
    """A fresh collector's /metrics without the _created samples (a time, different each run)."""
    text = CollectorMetrics().render().decode()
    return "".join(line + "\n" for line in text.splitlines() if not re.match(r"\S+_created[{ ]", line))


def daemon_families() -> set[str]:
    """Families only a running agent serves (captures, spool), from the daemon's own collectors."""
    names = set()
    for p in (ROOT / "agent" / "service").glob("*.py"):
        text = p.read_text(encoding="utf-8")
        for kind, name in re.findall(r'(Counter|Gauge|_counter|_gauge)(?:MetricFamily)?\(\s*"(railscope_[a-z0-9_]+)"', text):
            names.add(name + "_total" if kind in ("Counter", "_counter") else name)
    return names


def known_names() -> set[str]:
    names = _sample_names(AGENT_GOLDEN.read_text()) | _sample_names(COLLECTOR_GOLDEN.read_text())
    for m in re.finditer(r"^\| `(railscope_[a-z0-9_]+)` \| (\w+) \|", CATALOGUE.read_text(), re.M):
        names |= {m.group(1), m.group(1) + "_total"} if m.group(2) == "counter" else {m.group(1)}
    rules = yaml.safe_load(RULES.read_text())
    names |= {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    return names | daemon_families()


def test_the_collector_exposition_is_golden() -> None:
    got = collector_exposition()
    if os.environ.get("RAILSCOPE_UPDATE_GOLDEN") == "1":
        COLLECTOR_GOLDEN.write_text(got)
    assert COLLECTOR_GOLDEN.read_text() == got, "RAILSCOPE_UPDATE_GOLDEN=1 regenerates tests/golden/collector.prom"


def test_the_name_extraction() -> None:
    assert metric_names('sum by (le) (rate(railscope_x_bucket{job=~"railscope_y"}[1m])) / railscope:r:rate2m') == {
        "railscope_x_bucket", "railscope:r:rate2m"}


def test_every_query_reads_metrics_the_agent_or_the_collector_export() -> None:
    known = known_names()
    assert {"railscope_rail_up", "railscope_collector_bundles_stored_total", "railscope_captures_total"} <= known
    unknown = {}
    for title, expr in targets(dashboard()):
        names = metric_names(expr)
        assert names, f"{title}: a query that reads no railscope metric"
        if names - known:
            unknown[title] = sorted(names - known)
    assert not unknown, f"queries name metrics nobody exports: {unknown}"


def test_the_dashboard_covers_the_views() -> None:
    dash = dashboard()
    titles = [p["title"] for p in dash["panels"]]
    for want in ("Worst state per rail", "Findings by code", "Representors against VFs", "Carrier losses",
                 "Captures by trigger", "Collector ingest", "Collector requests refused", "Leaf view"):
        assert any(t.startswith(want) for t in titles), want
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    for _title, expr in targets(dash):
        used = set(re.findall(r"\$(\w+)", expr)) - {"__rate_interval", "__interval", "__range", "1"}
        assert used <= names, (expr, used - names)


def test_the_chart_ships_the_same_dashboard_for_the_sidecar(chart: Any) -> None:
    assert CHART_COPY.read_text() == DASHBOARD.read_text(), \
        "cp deploy/grafana/railscope-rails.json deploy/helm/railscope/files/"
    assert "ConfigMap" not in {d["kind"] for d in render(chart) if d["metadata"]["name"].endswith("-dashboard")}
    docs = render(chart, {"grafanaDashboard": {"enabled": True, "namespace": "monitoring",
                                               "annotations": {"grafana_folder": "Network"}}})
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rs-railscope-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Network"}
    assert json.loads(cm["data"]["railscope-rails.json"]) == dashboard()
