"""The dashboard's leaf view, evaluated by a real Prometheus running the shipped rules.

Debian's ``prometheus`` scrapes an exposition of six nodes' rails (``honor_labels``: the ``node`` label is
in the exposition, as the ServiceMonitor's target labels would set it) with each rail's LLDP neighbour in
``railscope_rail_peer_info``: leaf-a07 lost three of its five rails and holds gpu-007 off with pause,
gpu-004 sends pause towards it most of the time (the storm's source), leaf-b02 is healthy. Prometheus
evaluates deploy/prometheus/railscope-rules.yaml; every query of the leaf view (the dashboard's "Leaves"
row) must answer with data, and the leaf table must name leaf-a07 with its rails down and paused.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.agent_netns import get, wait_for
from tests.support.collector_env import free_port
from tests.support.dashboard import dashboard, substitute

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"

pytestmark = [pytest.mark.slow]

#: node -> (leaf, port, rail up, rx pause share, tx pause share)
RAILS = {
    "gpu-001": ("leaf-a07", "swp1", 0, 0.0, 0.0),
    "gpu-002": ("leaf-a07", "swp2", 0, 0.0, 0.0),
    "gpu-003": ("leaf-a07", "swp3", 0, 0.0, 0.0),
    "gpu-004": ("leaf-a07", "swp4", 1, 0.0, 0.9),
    "gpu-005": ("leaf-b02", "swp1", 1, 0.0, 0.0),
    "gpu-006": ("leaf-b02", "swp2", 1, 0.0, 0.0),
    "gpu-007": ("leaf-a07", "swp7", 1, 0.7, 0.0),
}


def exposition(elapsed: float) -> str:
    out = ["# TYPE railscope_rail_peer_info gauge", "# TYPE railscope_rail_up gauge",
           "# TYPE railscope_pfc_pause_duration_seconds_total counter",
           "# TYPE railscope_rail_carrier_down_changes_total counter",
           "# TYPE railscope_phy_received_total counter", "# TYPE railscope_phy_fec_corrected_total counter"]
    for node, (leaf, port, up, rx, tx) in RAILS.items():
        base = f'node="{node}",rail="0",plane="0",device="net_rail0"'
        out.append(f'railscope_rail_peer_info{{{base},peer_system="{leaf}",peer_port="{port}"}} 1')
        out.append(f"railscope_rail_up{{{base}}} {up}")
        out.append(f'railscope_rail_carrier_down_changes_total{{{base}}} {0 if up else int(elapsed // 2)}')
        out.append(f"railscope_phy_received_total{{{base}}} {int(elapsed * 4e11)}")
        out.append(f"railscope_phy_fec_corrected_total{{{base}}} {int(elapsed * 4e11 * (1e-5 if up else 3e-4))}")
        for direction, share in (("rx", rx), ("tx", tx)):
            out.append(f'railscope_pfc_pause_duration_seconds_total{{{base},direction="{direction}",prio="3"}} '
                       f"{share * elapsed:.3f}")
    return "\n".join(out) + "\n"


def leaf_panels() -> list[tuple[str, str]]:
    panels = dashboard()["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"].startswith("Leaves"))
    out = []
    for p in panels[start + 1:]:
        if p["type"] == "row":
            break
        out += [(p["title"], t["expr"]) for t in p.get("targets", [])]
    return out


def test_the_leaf_view_answers_on_a_real_prometheus_with_the_shipped_rules(tmp_path: Path) -> None:
    prom_bin = "/usr/bin/prometheus"
    if not os.access(prom_bin, os.X_OK):
        pytest.skip("Prometheus is not installed at /usr/bin/prometheus (Debian package prometheus)")
    t0 = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(time.monotonic() - t0).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n  - job_name: railscope\n    honor_labels: true\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.server_address[1]}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)

    def query(q: str) -> list[dict]:
        status, body = get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=30)
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", (q, doc)
        return doc["data"]["result"]

    def answered(q: str) -> bool:
        try:
            return bool(query(q))
        except (OSError, AssertionError):
            return False

    try:
        panels = leaf_panels()
        assert len(panels) >= 8, panels
        # every leaf record needs two scrapes for its rates, then an evaluation
        assert wait_for(lambda: all(answered(substitute(e)) for _t, e in panels), 60, 1), (
            [(t, e) for t, e in panels if not answered(substitute(e))],
            (tmp_path / "prometheus.log").read_text()[-2000:])
        table = {}
        for _title, expr in panels[:6]:
            for r in query(substitute(expr)):
                table.setdefault(r["metric"]["peer_system"], {})[expr.split("{")[0]] = float(r["value"][1])
        a, b = table["leaf-a07"], table["leaf-b02"]
        assert a["railscope:leaf_rails:count"] == 5 and a["railscope:leaf_rails_down:sum"] == 3, table
        assert b["railscope:leaf_rails_down:sum"] == 0, table
        # a 2m rate over the few seconds scraped so far is below the share itself: compare, not the value
        assert a["railscope:leaf_rx_paused_rails:count2m"] == 1 and "railscope:leaf_rx_paused_rails:count2m" not in b
        assert a["railscope:leaf_tx_pause_ratio:max2m"] > 0 == b["railscope:leaf_tx_pause_ratio:max2m"], table
        assert a["railscope:leaf_carrier_losses:increase5m"] > 0 and b["railscope:leaf_carrier_losses:increase5m"] == 0
    finally:
        prom.terminate()
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
        server.shutdown()
