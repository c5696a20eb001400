"""The Grafana dashboard's queries on a fleet: every query of deploy/grafana/railscope-rails.json,
evaluated by Debian's Prometheus over a synthetic TSDB of N nodes x 8 rails.

The series are the agent's own families with its labels (the per-rail, PFC, discard, carrier, ECN / CNP,
RoCE transport, PHY, optics, NIC temperature, PCIe, finding, representor and event families the panels read), written as OpenMetrics and turned into blocks by
``promtool tsdb create-blocks-from openmetrics``; a few nodes flap, pause and drop, so the queries have
work to do. Each query is an instant query at the last sample, with the variables at "All"; the figure
is Prometheus' own evalTotalTime, median of --runs, and its ratio to the anchor, a plain
``count(railscope_rail_up)`` over the same fleet. The fleet tables read the recording rule
``railscope:rail_signal:severity``; the cost of one evaluation of its expression is the last line.

    python bench/bench_dashboard.py                      # 1,000 nodes, 10 minutes at 30 s
    python bench/bench_dashboard.py --nodes 200 --runs 5

Exit status 0, 1 when a step failed (a query error included).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RAILS = 8
STEP_S = 30


def _write_fleet(path: Path, nodes: int, minutes: int, end: int) -> int:
    """OpenMetrics of the fleet, family by family (promtool wants each family's samples together)."""
    rnd = random.Random(7)
    steps = minutes * 60 // STEP_S + 1
    times = [end - (steps - 1 - i) * STEP_S for i in range(steps)]
    bad = set(rnd.sample(range(nodes), max(1, nodes // 50)))
    lines = 0

    def node_labels(n: int) -> str:
        return f'cluster="fleet",node="gpu-node-{n:04d}",job="railscope",instance="10.0.{n // 250}.{n % 250}:9841"'

    with open(path, "w") as out:
        def family(name: str, kind: str, series) -> None:  # type: ignore[no-untyped-def]
            nonlocal lines
            out.write(f"# TYPE {name} {kind}\n")
            for labels, values in series:
                sample = name + ("_total" if kind == "counter" else "")
                for t, v in zip(times, values, strict=True):
                    out.write(f"{sample}{{{labels}}} {v} {t}\n")
                    lines += 1

        def rails(extra: str = ""):  # type: ignore[no-untyped-def]
            for n in range(nodes):
                for r in range(RAILS):
                    yield n, r, f'{node_labels(n)},device="net_rail{r}",plane="",rail="{r}"{extra}'

        family("railscope_rail_up", "gauge", ((lab, [0 if n in bad and r == 3 and i > steps // 2 else 1
                                                     for i in range(steps)]) for n, r, lab in rails()))
        family("railscope_rail_info", "gauge", ((lab + f',pci="0000:{r:02x}:00.0",rdma="rdma_rail{r}"', [1] * steps)
                                                for n, r, lab in rails()))
        family("railscope_rail_carrier_down_changes", "counter",
               ((lab, [1 + (i if n in bad and r == 1 else 0) for i in range(steps)]) for n, r, lab in rails()))
        family("railscope_pfc_pause_duration_seconds", "counter",
               ((lab + f',direction="{d}",prio="3"', [round(i * STEP_S * (0.6 if n in bad and r == 2 else 0.001), 3)
                                                      for i in range(steps)])
                for n, r, lab in rails() for d in ("rx", "tx")))
        for fam in ("railscope_prio_discards", "railscope_prio_buffer_discards"):
            family(fam, "counter", ((lab + ',prio="3"', [i * 5 if n in bad and r == 4 else 0 for i in range(steps)])
                                    for n, r, lab in rails()))
        family("railscope_rail_bytes", "counter",
               ((lab + f',direction="{d}"', [i * STEP_S * 40_000_000_000 for i in range(steps)])
                for n, r, lab in rails() for d in ("rx", "tx")))
        family("railscope_rdma_port_up", "gauge",
               ((f'{node_labels(n)},device="rdma_rail{r}",port="1"', [1] * steps) for n in range(nodes) for r in range(RAILS)))
        for fam, val in (("railscope_representors", 16), ("railscope_sriov_vfs", 16), ("railscope_representors_stale", 0)):
            family(fam, "gauge", ((f'{node_labels(n)},device="net_rail{r}",pci="0000:{r:02x}:00.0"', [val] * steps)
                                  for n in range(nodes) for r in range(RAILS)))
        # the rail signal families of the dashboard's fleet tables and per-family rows: ECN / CNP, RoCE
        # transport, PHY, optics, NIC temperature, PCIe (a few bad nodes degrade on rails 5, 6 and 7)
        for fam, bad_rate in (("railscope_rdma_np_ecn_marked_roce_packets", 500), ("railscope_rdma_np_cnp_sent", 200),
                              ("railscope_rdma_rp_cnp_handled", 200), ("railscope_rdma_rp_cnp_ignored", 0),
                              ("railscope_rdma_out_of_sequence", 30), ("railscope_rdma_packet_seq_err", 10),
                              ("railscope_rdma_local_ack_timeout_err", 5), ("railscope_rdma_duplicate_request", 5),
                              ("railscope_rdma_implied_nak_seq_err", 0), ("railscope_rdma_roce_adp_retrans", 5),
                              ("railscope_rdma_roce_adp_retrans_to", 0), ("railscope_rdma_rnr_nak_retry_err", 0),
                              ("railscope_phy_symbol_errors", 0)):
            family(fam, "counter", ((lab.replace('device="net_rail', 'device="rdma_rail') if "rdma" in fam else lab,
                                     [i * bad_rate if n in bad and r == 5 else 0 for i in range(steps)])
                                    for n, r, lab in rails()))
        family("railscope_prio_ecn_marked_packets", "counter",
               ((lab + ',prio="3"', [i * 100 for i in range(steps)]) for n, r, lab in rails()))
        received = 400_000_000_000 * STEP_S
        family("railscope_phy_received", "counter", ((lab, [i * received for i in range(steps)]) for n, r, lab in rails()))
        family("railscope_phy_fec_corrected", "counter",
               ((lab, [int(i * received * (3e-4 if n in bad and r == 6 else 1e-8)) for i in range(steps)])
                for n, r, lab in rails()))
        family("railscope_phy_lane_errors", "counter",
               ((lab + f',lane="{ln}"', [i * 10 for i in range(steps)]) for n, r, lab in rails() for ln in range(4)))
        family("railscope_optics_rx_power_watts", "gauge",
               ((lab + f',lane="{ln}"', [0.00002 if n in bad and r == 7 and ln == 2 else 0.0009] * steps)
                for n, r, lab in rails() for ln in range(4)))
        for fam, thresholds in (("railscope_optics_rx_power_threshold_watts",
                                 (("low_alarm", 2.51e-05), ("low_warning", 6.31e-05), ("high_warning", 0.0017783),
                                  ("high_alarm", 0.0022387))),
                                ("railscope_optics_temperature_threshold_celsius",
                                 (("low_alarm", -5), ("low_warning", 0), ("high_warning", 70), ("high_alarm", 75)))):
            family(fam, "gauge", ((lab + f',threshold="{t}"', [v] * steps) for n, r, lab in rails() for t, v in thresholds))
        family("railscope_optics_temperature_celsius", "gauge", ((lab, [45] * steps) for n, r, lab in rails()))

        def pfs(extra: str = ""):  # type: ignore[no-untyped-def]
            for n in range(nodes):
                for r in range(RAILS):
                    yield n, r, f'{node_labels(n)},device="net_rail{r}",pci="0000:{r:02x}:00.0"{extra}'

        family("railscope_nic_temperature_celsius", "gauge",
               ((lab + ',sensor="asic"', [62] * steps) for n, r, lab in pfs()))
        family("railscope_nic_temperature_critical_celsius", "gauge",
               ((lab + ',sensor="asic"', [105] * steps) for n, r, lab in pfs()))
        for fam, val, low in (("railscope_pcie_link_speed_transfers_per_second", 3.2e10, 1.6e10),
                              ("railscope_pcie_link_max_speed_transfers_per_second", 3.2e10, 3.2e10),
                              ("railscope_pcie_link_width_lanes", 16, 16), ("railscope_pcie_link_max_width_lanes", 16, 16)):
            family(fam, "gauge", ((lab, [low if n in bad and r == 0 else val] * steps) for n, r, lab in pfs()))
        for fam in ("railscope_pcie_aer_correctable_errors", "railscope_pcie_aer_nonfatal_errors",
                    "railscope_pcie_aer_fatal_errors"):
            family(fam, "counter", ((lab, [0] * steps) for n, r, lab in pfs()))
        family("railscope_finding", "gauge",
               ((f'{node_labels(n)},code="LinkFlapping",severity="warning",subject="net_rail1"', [1] * steps)
                for n in sorted(bad)))
        family("railscope_events", "counter",
               ((f'{node_labels(n)},code="{c}"', [0] * steps) for n in range(nodes)
                for c in ("LinkFlapping", "PfcStorm", "LosslessDrops", "ConfigFlapping", "RepresentorStale",
                          "NicHealthError", "DriverReload")))
        family("railscope_captures", "counter",
               ((f'{node_labels(n)},trigger="event",outcome="ok"', [0] * steps) for n in range(nodes)))
        family("railscope_spool_bundles", "gauge", ((node_labels(n), [0] * steps) for n in range(nodes)))
        col = 'job="railscope-collector",instance="10.1.0.1:9842"'
        family("railscope_collector_received_bytes", "counter", ((col, [i * 1000 for i in range(steps)]),))
        family("railscope_collector_bundles_stored", "counter", ((col, list(range(steps))),))
        family("railscope_collector_bundles_duplicate", "counter", ((col, [0] * steps),))
        family("railscope_collector_ingests_in_flight", "gauge", ((col, [1] * steps),))
        family("railscope_collector_bundles_refused", "counter", ((col + ',reason="forbidden"', [0] * steps),))
        family("railscope_collector_storage_errors", "counter", ((col + ',op="write"', [0] * steps),))
        out.write("# TYPE railscope_collector_ingest_duration_seconds histogram\n")
        for le in ("0.1", "1", "10", "+Inf"):
            for t, i in zip(times, range(steps), strict=True):
                out.write(f'railscope_collector_ingest_duration_seconds_bucket{{{col},le="{le}"}} {i} {t}\n')
        out.write("# EOF\n")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=10)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    for tool in ("/usr/bin/prometheus", "/usr/bin/promtool"):
        if not Path(tool).exists():
            print(f"{tool} is missing (Debian package prometheus)", file=sys.stderr)
            return 1
    from tests.support.dashboard import dashboard, substitute, targets

    work = Path(tempfile.mkdtemp(prefix="rs-bench-dash-"))
    prom = None
    try:
        end = int(time.time()) - 3 * 3600  # in the past: blocks must not overlap the head
        t0 = time.monotonic()
        lines = _write_fleet(work / "fleet.om", args.nodes, args.minutes, end)
        subprocess.run(["/usr/bin/promtool", "tsdb", "create-blocks-from", "openmetrics", str(work / "fleet.om"),
                        str(work / "tsdb")], check=True, capture_output=True, timeout=3600)
        (work / "fleet.om").unlink()
        built = time.monotonic() - t0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        (work / "prometheus.yml").write_text("global: {}\n")
        prom = subprocess.Popen(["/usr/bin/prometheus", f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--storage.tsdb.retention.time=10y"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

        def query(q: str) -> dict:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
                {"query": q, "time": str(end), "stats": "all"})
            with urllib.request.urlopen(url, timeout=120) as r:
                doc = json.loads(r.read())
            if doc.get("status") != "success":
                raise RuntimeError(f"{q}: {doc}")
            return doc["data"]

        deadline = time.monotonic() + 120
        while True:
            try:
                if query("count(railscope_rail_up)")["result"]:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("Prometheus never answered over the fleet's blocks")
            time.sleep(0.5)

        def timed(q: str) -> tuple[float, int]:
            evals, n = [], 0
            for _ in range(args.runs):
                d = query(q)
                evals.append(d["stats"]["timings"]["evalTotalTime"])
                n = len(d["result"])
            return statistics.median(evals), n

        anchor, _ = timed("count(railscope_rail_up)")
        series = int(float(query("count({__name__=~\"railscope_.+\"})")["result"][0]["value"][1]))
        print(f"fleet: {args.nodes} nodes x {RAILS} rails, {series} series, {args.minutes} min at {STEP_S} s "
              f"({lines} samples), built in {built:.1f} s; median of {args.runs} runs")
        print(f"anchor  count(railscope_rail_up)                  {anchor * 1000:8.2f} ms   1.00x")
        rows = []
        for title, expr in targets(dashboard()):
            ev, n = timed(substitute(expr))
            rows.append((ev, title, n))
        for ev, title, n in sorted(rows, reverse=True):
            print(f"        {title[:44]:44} {ev * 1000:8.2f} ms {ev / anchor:6.2f}x  {n} series")
        total = sum(r[0] for r in rows)
        print(f"all {len(rows)} queries (one dashboard load)             {total * 1000:8.2f} ms {total / anchor:6.2f}x")
        # the fleet tables read a recording rule (this Prometheus evaluates no rules): what one evaluation
        # of it costs over the fleet, once per evaluation interval rather than per dashboard load
        import yaml

        rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "railscope-rules.yaml").read_text())
        for rule in (r for g in rules["groups"] for r in g["rules"] if r.get("record") == "railscope:rail_signal:severity"):
            ev, n = timed(rule["expr"])
            print(f"rule    {rule['record'][:44]:44} {ev * 1000:8.2f} ms {ev / anchor:6.2f}x  {n} series (per evaluation)")
        return 0
    except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
        print(f"bench_dashboard: {exc}", file=sys.stderr)
        return 1
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
