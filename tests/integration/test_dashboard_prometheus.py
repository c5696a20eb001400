"""Every panel of the Grafana dashboard, evaluated by a real Prometheus that scraped a running agent, the
agent's exposition of recorded ConnectX nodes, and a running collector, with the shipped rules loaded.

The agent runs in a node namespace with veth rails, captures on LinkFlapping and uploads to a collector
(an embedded store, ``--insecure-dev``); Debian's ``prometheus`` scrapes both every second. Rail 0 is
flapped three times, so the agent raises the event, a finding, a capture and an upload. Veth rails have
no PFC, RDMA, PHY, optics, hwmon or PCIe counters: beside the live agent, Prometheus scrapes the
exposition ``railscope metrics --from`` renders (the agent's own renderer) of recorded node images — every
degradation source read and in range, a degrading link, an optic beyond its alarm, a NIC at its crit, a
PCIe link trained low, a rail down, LLDP neighbours — as the nodes ``gpu-*``. No target carries a
``cluster`` label, as the chart's ServiceMonitor sets none.

Each query of deploy/grafana/railscope-rails.json runs with the dashboard's variables at their "All"
values: none may fail, and every query must answer with data unless ``NEEDS_LIVE_FAULT`` names it with the
fault it waits for. The fleet tables must put the worst rails first, each with its family and reason.
The evaluation time of each query (Prometheus' own ``evalTotalTime``) is printed (``-s``) for the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.support.agent_netns import PORT, StartAgent, flap, get, wait_for
from tests.support.collector_env import Collector, free_port
from tests.support.dashboard import (
    IMAGE_NODES,
    dashboard,
    image_expositions,
    panel_targets,
    substitute,
)
from tests.support.netns import RailNetns

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"

pytestmark = [pytest.mark.netns, pytest.mark.slow]

#: (panel title prefix, refId) -> the fault the query waits for: these may answer nothing here.
NEEDS_LIVE_FAULT = {
    ("Rails down and paused per leaf", "A"): "a rail down whose leaf LLDP names "
                                             "(tests/integration/test_dashboard_leaves_prometheus.py has one)",
    ("Rails down and paused per leaf", "B"): "a rail its leaf holds off with pause (the leaves test has one)",
    ("Leaf view", "D"): "a rail its leaf holds off with pause (the leaves test has one)",
    ("Collector requests refused", "B"): "a request the collector refuses (its series start at the first refusal)",
    ("Leaf view", "F"): "PHY counters that move on a rail whose leaf LLDP names (the leaves test has them)",
}


def _needs(title: str, ref: str) -> str | None:
    return next((why for (t, r), why in NEEDS_LIVE_FAULT.items() if title.startswith(t) and r == ref), None)


class _Expositions(BaseHTTPRequestHandler):
    """Serves /<node> with that node image's exposition."""

    bodies: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.bodies.get(self.path.strip("/"))
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


def test_every_panel_query_runs_on_a_real_prometheus(start_agent: StartAgent, rails: RailNetns,
                                                     tmp_path: Path) -> None:
    prom_bin = "/usr/bin/prometheus"
    if not os.access(prom_bin, os.X_OK):
        pytest.skip("Prometheus is not installed at /usr/bin/prometheus (Debian package prometheus)")
    # the images' expositions render while the collector and the agent start
    rendered: dict[str, bytes] = {}
    renderer = threading.Thread(target=lambda: rendered.update(image_expositions(sys.executable)), daemon=True)
    renderer.start()
    col = Collector(tmp_path, str(tmp_path / "store"), "--insecure-dev", "--listen", "0.0.0.0")
    col.start()
    agent = None
    prom = None
    servers: list[ThreadingHTTPServer] = []
    try:
        # the management veth the fixture made: the agent listens on the node's end, the test's end is the
        # one before it (a /30)
        (link,) = json.loads(subprocess.run(["ip", "-n", rails.node, "-j", "addr", "show", "mgmt0"], capture_output=True,
                                            text=True, check=True, timeout=30).stdout)
        node_ip = next(a["local"] for a in link["addr_info"] if a["family"] == "inet")
        host = node_ip.rsplit(".", 1)[0] + "." + str(int(node_ip.rsplit(".", 1)[1]) - 1)
        agent = start_agent("--capture-on", "LinkFlapping", "--spool", str(tmp_path / "spool"), "--node", "test-node",
                            "--recorder-window", "1m", "--collector", f"http://{host}:{col.port}")
        renderer.join(120)
        assert set(rendered) == set(IMAGE_NODES), sorted(rendered)
        _Expositions.bodies = rendered
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Expositions)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        images = "".join(f"      - targets: ['127.0.0.1:{server.server_address[1]}']\n"
                         f"        labels: {{node: {node}, __metrics_path__: /{node}}}\n" for node in IMAGE_NODES)
        port = free_port()
        # no cluster label anywhere: the chart's ServiceMonitor sets none
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
            f"rule_files: ['{RULES}']\n"
            "scrape_configs:\n"
            "  - job_name: railscope\n    static_configs:\n"
            f"      - targets: ['{agent.addr}:{PORT}']\n        labels: {{node: test-node}}\n" + images +
            "  - job_name: railscope-collector\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{col.port}']\n")
        log = open(tmp_path / "prometheus.log", "wb")
        prom = subprocess.Popen([prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)

        def query(q: str) -> dict:
            status, body = get(f"http://127.0.0.1:{port}/api/v1/query?" +
                               urllib.parse.urlencode({"query": q, "stats": "all"}), timeout=30)
            doc = json.loads(body)
            assert status == 200 and doc["status"] == "success", (q, doc)
            return doc["data"]

        def ready() -> bool:
            try:
                return len(query('up{job=~"railscope.*"} == 1')["result"]) == 2 + len(IMAGE_NODES)
            except (OSError, AssertionError):
                return False

        assert wait_for(ready, 30, 0.5), (tmp_path / "prometheus.log").read_text()[-2000:]
        time.sleep(3)
        for _ in range(3):
            flap(agent.rails, 0)
        stored = wait_for(lambda: list((tmp_path / "store").rglob("*.tar.gz")), 90, 0.5)
        assert stored, agent.log_path.read_text()[-3000:]
        time.sleep(8)  # a few scrapes after the upload, so rates and increases have two samples

        timings = []
        empty = []
        panels = panel_targets(dashboard())
        for title, ref, expr in panels:
            q = substitute(expr)
            assert "$" not in q.replace("$1", ""), f"{title}: a variable left: {q}"
            t0 = time.monotonic()
            data = query(q)
            wall = time.monotonic() - t0
            timings.append((data["stats"]["timings"]["evalTotalTime"], wall, title))
            if not data["result"] and not _needs(title, ref):
                empty.append((title, ref, q[:300]))
            if data["result"] and _needs(title, ref):
                print(f"named as needing a live fault but answered: {title} {ref}")
        assert not empty, f"queries that answered nothing: {empty}"
        assert all(any(t.startswith(title) and r == ref for t, r, _e in panels) for title, ref in NEEDS_LIVE_FAULT)

        def rows(title: str) -> list[dict]:
            (expr,) = [e for t, _r, e in panels if t.startswith(title)]
            return [{**r["metric"], "severity": float(r["value"][1])} for r in query(substitute(expr))["result"]]

        worst = rows("Worst state per rail")
        # worst first, one row per rail, every rail of every target
        assert [r["severity"] for r in worst] == sorted((r["severity"] for r in worst), reverse=True), worst
        by_rail = {(r["node"], r["rail"]): r for r in worst}
        assert len(by_rail) == len(worst) == 2 + 2 * len(IMAGE_NODES), worst
        assert worst[0]["severity"] == 3, worst[:3]
        # each says why: the flapped rail by its flaps at least (a warning), the images by their faults
        assert by_rail[("test-node", "0")]["severity"] >= 2, by_rail[("test-node", "0")]
        assert (by_rail[("gpu-ber", "1")]["family"], by_rail[("gpu-ber", "1")]["severity"]) == ("BER / FEC", 3)
        assert by_rail[("gpu-down", "0")]["reason"] in ("down", "RailLinkDown"), by_rail[("gpu-down", "0")]
        assert by_rail[("gpu-healthy", "0")]["reason"] == "ok" and by_rail[("gpu-healthy", "0")]["severity"] == 0
        signals = rows("Rail signals")
        assert [r["severity"] for r in signals] == sorted((r["severity"] for r in signals), reverse=True), signals
        keys = [(r["node"], r["rail"], r["family"]) for r in signals]
        assert len(keys) == len(set(keys)), keys  # one row per rail and signal family
        families = {(r["node"], r["rail"], r["family"]): r for r in signals}
        # the flapped rail: its flaps, and the PfcDisabled warning every veth rail carries (no PFC counters)
        assert families[("test-node", "0", "flaps")]["reason"] == "carrier lost in the last 10 min", signals
        assert ("test-node", "1", "flaps") not in families, signals
        assert families[("test-node", "1", "PFC")]["reason"] == "PfcDisabled", signals
        assert families[("gpu-optics", "0", "optics")]["severity"] == 3, signals
        assert families[("gpu-temp", "1", "temperature")]["severity"] == 2, signals  # at its crit: the agent's warning
        assert families[("gpu-pcie", "0", "PCIe")]["severity"] == 2, signals
        assert not [k for k in keys if k[0] == "gpu-healthy"], signals
        print("\ndashboard query evaluation (Prometheus evalTotalTime s, wall s, panel):")
        for ev, wall, title in sorted(timings, reverse=True):
            print(f"  {ev:.6f}  {wall:.4f}  {title}")
        print(f"  total eval {sum(t[0] for t in timings):.6f} s over {len(timings)} queries")
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(15)
            except subprocess.TimeoutExpired:
                prom.kill()
        for server in servers:
            server.shutdown()
        col.stop()
