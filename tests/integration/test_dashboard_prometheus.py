"""Every panel of the Grafana dashboard, evaluated by a real Prometheus that scraped a running agent
and a running collector.

The agent runs in a node namespace with veth rails, captures on LinkFlapping and uploads to a collector
(an embedded store, ``--insecure-dev``); Debian's ``prometheus`` scrapes both every second. Rail 0 is
flapped three times, so the agent raises the event, a finding, a capture and an upload. Then each query
of deploy/grafana/railscope-rails.json runs with the dashboard's variables at their "All" values: none may
fail, and every query whose metrics have series must answer with data (veth rails have no PFC or RDMA
counters: those panels are legitimately empty here). The worst-state map must show the flapped rail.
The evaluation time of each query (Prometheus' own ``evalTotalTime``) is printed (``-s``) for the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.support.agent_netns import PORT, StartAgent, flap, get, wait_for
from tests.support.collector_env import Collector, free_port
from tests.support.netns import RailNetns

ROOT = Path(__file__).resolve().parents[2]
from tests.support.dashboard import dashboard, metric_names, substitute, targets  # noqa: E402

pytestmark = [pytest.mark.netns, pytest.mark.slow]

def test_every_panel_query_runs_on_a_real_prometheus(start_agent: StartAgent, rails: RailNetns,
                                                     tmp_path: Path) -> None:
    prom_bin = "/usr/bin/prometheus"
    if not os.access(prom_bin, os.X_OK):
        pytest.skip("Prometheus is not installed at /usr/bin/prometheus (Debian package prometheus)")
    col = Collector(tmp_path, str(tmp_path / "store"), "--insecure-dev", "--listen", "0.0.0.0")
    col.start()
    agent = None
    prom = None
    try:
        # the management veth the fixture made: the agent listens on the node's end, the test's end is the
        # one before it (a /30)
        (link,) = json.loads(subprocess.run(["ip", "-n", rails.node, "-j", "addr", "show", "mgmt0"], capture_output=True,
                                            text=True, check=True, timeout=30).stdout)
        node_ip = next(a["local"] for a in link["addr_info"] if a["family"] == "inet")
        host = node_ip.rsplit(".", 1)[0] + "." + str(int(node_ip.rsplit(".", 1)[1]) - 1)
        agent = start_agent("--capture-on", "LinkFlapping", "--spool", str(tmp_path / "spool"), "--node", "test-node",
                            "--recorder-window", "1m", "--collector", f"http://{host}:{col.port}")
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n"
            "  - job_name: railscope\n    static_configs:\n"
            f"      - targets: ['{agent.addr}:{PORT}']\n        labels: {{node: test-node, cluster: lab}}\n"
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
                return len(query('up{job=~"railscope.*"} == 1')["result"]) == 2
            except (OSError, AssertionError):
                return False

        assert wait_for(ready, 30, 0.5), (tmp_path / "prometheus.log").read_text()[-2000:]
        time.sleep(3)
        for _ in range(3):
            flap(agent.rails, 0)
        stored = wait_for(lambda: list((tmp_path / "store").rglob("*.tar.gz")), 90, 0.5)
        assert stored, agent.log_path.read_text()[-3000:]
        time.sleep(8)  # a few scrapes after the upload, so rates and increases have two samples

        exists = {}
        timings = []
        empty_with_data = []
        for title, expr in targets(dashboard()):
            q = substitute(expr)
            assert "$" not in q.replace("$1", ""), f"{title}: a variable left: {q}"
            for name in metric_names(q):
                if name not in exists:
                    exists[name] = bool(query(f"count({{__name__={json.dumps(name)}}})")["result"])
            t0 = time.monotonic()
            data = query(q)
            wall = time.monotonic() - t0
            timings.append((data["stats"]["timings"]["evalTotalTime"], wall, title))
            if all(exists[n] for n in metric_names(q)) and not data["result"]:
                empty_with_data.append((title, q))
        assert not empty_with_data, f"queries answered nothing although their series exist: {empty_with_data}"

        (worst_expr,) = [e for t, e in targets(dashboard()) if t.startswith("Worst state per rail")]
        cells = {(r["metric"]["node"], r["metric"]["rail"]): float(r["value"][1])
                 for r in query(substitute(worst_expr))["result"]}
        signals = [(r["metric"].get("rail"), r["metric"].get("signal"), r["value"][1]) for r in query(
            substitute(worst_expr).replace("max by (cluster, node, rail) (", "max by (cluster, node, rail, signal) (", 1)
        )["result"] if r["value"][1] != "0"]
        # the flapped rail is a warning at least, by its flaps; rail 1 did not flap (veth rails have no PFC
        # counters, so both carry the PfcDisabled warning through the findings signal)
        assert cells[("test-node", "0")] >= 2 and ("0", "flaps", "2") in signals, (cells, signals)
        assert not [x for x in signals if x[:2] == ("1", "flaps")], signals
        assert cells[("test-node", "1")] == 2 and ("1", "findings", "2") in signals, (cells, signals)
        flaps = next(e for t, e in targets(dashboard()) if t.startswith("Carrier losses"))
        assert query(substitute(flaps))["result"]
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
        col.stop()
