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


#: The rail signals Spectrum-X operators look at first: each a row of the dashboard whose panels read these
#: series (every one a family the agent exports: METRICS.md, the golden expositions).
SIGNAL_ROWS = {
    "ECN / CNP": {"railscope_rdma_np_ecn_marked_roce_packets_total", "railscope_rdma_np_cnp_sent_total",
                  "railscope_rdma_rp_cnp_handled_total", "railscope_rdma_rp_cnp_ignored_total",
                  "railscope_prio_ecn_marked_packets_total"},
    "RoCE retransmits and out-of-sequence": {"railscope_rdma_out_of_sequence_total",
                                             "railscope_rdma_packet_seq_err_total",
                                             "railscope_rdma_local_ack_timeout_err_total",
                                             "railscope_rdma_duplicate_request_total",
                                             "railscope_rdma_roce_adp_retrans_total"},
    "BER / FEC": {"railscope_phy_fec_corrected_total", "railscope_phy_received_total",
                  "railscope_phy_symbol_errors_total", "railscope_phy_lane_errors_total"},
    "Optics": {"railscope_optics_rx_power_watts", "railscope_optics_rx_power_threshold_watts",
               "railscope_optics_temperature_celsius", "railscope_optics_temperature_threshold_celsius",
               "railscope_finding"},
    "Temperature": {"railscope_nic_temperature_celsius", "railscope_nic_temperature_critical_celsius"},
    "PCIe": {"railscope_pcie_link_speed_transfers_per_second", "railscope_pcie_link_max_speed_transfers_per_second",
             "railscope_pcie_link_width_lanes", "railscope_pcie_link_max_width_lanes",
             "railscope_pcie_aer_correctable_errors_total", "railscope_pcie_aer_nonfatal_errors_total",
             "railscope_pcie_aer_fatal_errors_total"},
}

#: The signal families of the fleet tables (the ``family`` label each of their rows carries).
FAMILIES = {"link", "flaps", "PFC", "lossless drops", "ECN / CNP", "RoCE transport", "BER / FEC", "optics",
            "temperature", "PCIe", "findings"}


def _rows(dash: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each row panel's title and the panels under it (panels follow their row in the list)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    current = None
    for p in dash["panels"]:
        if p["type"] == "row":
            current = rows.setdefault(p["title"], [])
        elif current is not None:
            current.append(p)
    return rows


def test_one_row_per_rail_signal_family_reading_its_series() -> None:
    rows = _rows(dashboard())
    for want, names in SIGNAL_ROWS.items():
        (title,) = [t for t in rows if t.startswith(want)]
        read = {n for p in rows[title] for t in p.get("targets", []) for n in metric_names(t["expr"])}
        assert names <= read, (want, sorted(names - read))
        assert all(p["description"] for p in rows[title]), title
    assert {n for names in SIGNAL_ROWS.values() for n in names} <= known_names()


def _fleet(title: str) -> dict[str, Any]:
    (panel,) = [p for p in dashboard()["panels"] if p["title"].startswith(title)]
    return panel


def _signal_rule() -> str:
    rules = yaml.safe_load(RULES.read_text())
    (expr,) = [r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("record") == "railscope:rail_signal:severity"]
    return expr


def test_the_fleet_tables_put_the_worst_rails_first_and_say_why() -> None:
    for title in ("Worst state per rail", "Rail signals"):
        panel = _fleet(title)
        (target,) = panel["targets"]
        expr = target["expr"]
        # worst first: the query sorts by severity, and so does the table
        assert expr.startswith("sort_desc(") and target["instant"] and target["format"] == "table", title
        assert "railscope:rail_signal:severity{" in expr, title
        assert panel["options"]["sortBy"] == [{"displayName": "severity", "desc": True}], title
        assert not [t for t in panel.get("transformations", []) if t["id"] == "groupingToMatrix"], title
        # severity cells read as words
        (mapping,) = [o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "severity"]
        texts = {v["text"] for m in next(p for p in mapping["properties"] if p["id"] == "mappings")["value"]
                 for v in m["options"].values()}
        assert texts == {"ok", "info", "warning", "critical"}, title
    # one row per rail: its worst signal, a rail with none reads ok
    worst = _fleet("Worst state per rail")["targets"][0]["expr"]
    assert worst.startswith("sort_desc(topk by (cluster, node, rail) (1,") and '"reason", "ok"' in worst
    # one row per rail and signal family: the recording rule keeps the worst reason of each family
    rule = _signal_rule()
    assert rule.startswith("topk by (cluster, node, rail, family) (1,")
    families = set(re.findall(r'"family", "([^"$]+)"', rule))
    assert families >= FAMILIES, sorted(FAMILIES - families)
    # each row says its reason: the finding's code where a finding is the reason
    assert '"reason", "$1", "code", "(.+)"' in rule
    # the rule reads the lossless priority the chart rewrites (prio="3" -> agent.losslessPrio)
    assert 'prio="3"' in rule and "$" not in rule.replace('"$1"', "")


def test_the_cluster_variable_works_without_a_cluster_label() -> None:
    """The chart's ServiceMonitor sets ``node`` but no ``cluster``: the variable defaults to All, whose value
    (``.*``) also matches series without the label, and every query matches it as a regular expression."""
    (var,) = [v for v in dashboard()["templating"]["list"] if v["name"] == "cluster"]
    assert var["includeAll"] and var["allValue"] == ".*"
    assert var["current"] == {"text": "All", "value": "$__all"}
    for title, expr in targets(dashboard()):
        assert 'cluster="$cluster"' not in expr and "cluster!" not in expr, title
        assert "$cluster" not in expr or 'cluster=~"$cluster"' in expr, title
