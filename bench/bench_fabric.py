#!/usr/bin/env python3
"""Fabric correlation on synthetic fleets: is the right leaf named, is one fabric event one incident,
and what does correlating 10,000 nodes' findings cost in the collector.

A fleet is N nodes x 8 rails, rail-optimised: rail r of the nodes of group g (64 nodes a group) hangs
on leaf ``sw-p<plane>-r<r>-g<g>``, plane = r % 4. Each node's findings stream is its ``doctor --json``
built from the findings the agent gives the repository's node images (``rail-link-down``,
``pfc-storm-counters``, ``optics-out-of-range-warning``, ``link-degrading-counters``,
``lossless-drops-counters``; the rail rows of ``spectrumx-2rail-healthy``), each rail with its LLDP peer
(``rails[].peer``). A scenario injects one fault and 100 independent single-node faults on top:

- leaf: 25-100 % of one leaf's 64 nodes lose that rail or degrade, one of them storms (PfcStorm), the
  others see rx pause;
- plane: the rails of one plane on every leaf degrade (50-100 % of the nodes of each leaf);
- optics batch: 20-40 nodes anywhere in the fleet with the same vendor and part out of range.

Measures (figures of the latest run in bench/README.md):

(a) 200 scenarios (fleets of 1,000-10,000 nodes): the injected leaf / plane / batch named, and no leaf
    named for the independent faults (the success share, target >= 95 %; false leaves, target 0);
(b) incident identity through the alert policy (``collector.alerts.FabricDesk``): a 64-node leaf fault
    and a 10,000-node plane fault posted one webhook per node (``group_by: [alertname, node]``) are each
    one incident; with ``--alertmanager`` also through a real Alertmanager and ``railscope collector``;
(c) correlating 10,000 nodes' findings (the streams to events, in process): wall time (target <= 2 s) and
    peak memory (tracemalloc, target <= 256 MiB), against the anchor of ``json.loads`` of the streams.

    python bench/bench_fabric.py [--scenarios 200] [--alertmanager] [--json]

Exit status 0 when every target holds, 2 when one does not, 1 when a step failed.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collector.alerts import AlertLimits, FabricDesk, parse_webhook  # noqa: E402
from collector.fabric import FabricConfig, correlate, signals_of_doctor  # noqa: E402

IMAGES = ROOT / "tests" / "images"
RAILS = 8
GROUP = 64
PLANES = 4
T0 = 1_796_000_000.0


def _doctor(image: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json", "--from", str(IMAGES / image)],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=120)
    return json.loads(out.stdout)


def templates() -> tuple[dict, dict[str, dict]]:
    """A rail row and one finding per code, as the agent gives them for the node images."""
    healthy = _doctor("spectrumx-2rail-healthy")
    found = {}
    for image in ("rail-link-down", "pfc-storm-counters", "optics-out-of-range-warning", "link-degrading-counters",
                  "lossless-drops-counters"):
        for f in _doctor(image)["findings"]:
            if f["subject"].startswith("net_rail"):
                found.setdefault(f["code"], f)
    found["PfcStorm"] = {**found["PfcStorm"], "severity": "critical"}
    found["LinkDegrading"] = {**found["LinkDegrading"], "severity": "warning"}
    found["LosslessDrops"] = {**found["LosslessDrops"], "severity": "critical"}
    return healthy["rails"][0], found


def leaf_of(node: int, rail: int) -> str:
    return f"sw-p{rail % PLANES}-r{rail}-g{node // GROUP:03d}"


class Fleet:
    def __init__(self, n: int, rail_row: dict, found: dict[str, dict], rng: random.Random) -> None:
        self.n, self.row, self.found, self.rng = n, rail_row, found, rng
        #: node -> rail -> findings
        self.faults: dict[int, dict[int, list[dict]]] = {}

    def add(self, node: int, rail: int, code: str, **evidence: str) -> None:
        f = copy.deepcopy(self.found[code])
        f["subject"] = f"net_rail{rail}"
        if evidence:
            f["evidence"] = {**f.get("evidence", {}), **evidence}
        self.faults.setdefault(node, {}).setdefault(rail, []).append(f)

    def doctor(self, node: int) -> dict:
        rails = []
        for r in range(RAILS):
            row = {**self.row, "rail": r, "plane": r % PLANES, "netdev": f"net_rail{r}", "rdma": f"rdma_rail{r}",
                   "peer": {"system": leaf_of(node, r), "port": f"swp{node % GROUP + 1}", "mfs": 9216, "pfc": [3],
                            "seen": "2026-11-30T09:00:00Z"}}
            rails.append(row)
        findings = [f for r in sorted(self.faults.get(node, {})) for f in self.faults[node][r]]
        return {"schema": "railscope.doctor/v1", "node": f"gpu-{node:05d}", "rails": rails, "findings": findings}

    def streams(self) -> list[str]:
        return [json.dumps(self.doctor(i)) for i in range(self.n)]


def scenario(i: int, rail_row: dict, found: dict[str, dict], rng: random.Random, n: int | None = None) -> tuple:
    n = n or rng.choice([1000, 2000, 4096, 6000, 10_000])
    fleet = Fleet(n, rail_row, found, rng)
    kind = ("leaf", "plane", "batch")[i % 3]
    groups = (n + GROUP - 1) // GROUP
    want: tuple[str, str]
    if kind == "leaf":
        g, rail = rng.randrange(groups), rng.randrange(RAILS)
        members = [m for m in range(g * GROUP, min(n, (g + 1) * GROUP))]
        hit = rng.sample(members, max(4, int(len(members) * rng.uniform(0.25, 1.0))))
        storm = hit[0]
        fleet.add(storm, rail, "PfcStorm")
        for m in hit[1:]:
            fleet.add(m, rail, rng.choice(["RailLinkDown", "LinkDegrading", "LosslessDrops"]), pause="rx")
        want = ("leaf", leaf_of(hit[0], rail))
    elif kind == "plane":
        plane = rng.randrange(PLANES)
        rail = rng.choice([r for r in range(RAILS) if r % PLANES == plane])
        for g in range(groups):
            members = list(range(g * GROUP, min(n, (g + 1) * GROUP)))
            for m in rng.sample(members, max(1, int(len(members) * rng.uniform(0.5, 1.0)))):
                fleet.add(m, rail, rng.choice(["RailLinkDown", "LinkDegrading"]))
        want = ("plane", str(plane))
    else:
        for m in rng.sample(range(n), rng.randint(20, 40)):
            fleet.add(m, rng.randrange(RAILS), "OpticsOutOfRange", vendor="ACME OPTICS", part="QDD-400G-DR4-BATCH7")
        want = ("batch", "ACME OPTICS QDD-400G-DR4-BATCH7")
    # 100 independent single-node faults: nodes, rails and codes at random, each optic its own part
    independent = set()
    for k, m in enumerate(rng.sample(range(n), 100)):
        code = rng.choice(["RailLinkDown", "LinkDegrading", "LosslessDrops", "OpticsOutOfRange", "PfcStorm"])
        rail = rng.randrange(RAILS)
        extra = {"part": f"PART-{k}"} if code == "OpticsOutOfRange" else {}
        fleet.add(m, rail, code, **extra)
        independent.add(f"gpu-{m:05d}")
    return fleet, kind, want, independent


def judge(fleet: Fleet, kind: str, want: tuple[str, str], independent: set[str], cfg: FabricConfig) -> dict:
    sigs, known = [], []
    for i in range(fleet.n):
        s, k = signals_of_doctor(fleet.doctor(i), T0 + (i % 60))
        sigs += s
        known += k
    top = correlate(sigs, cfg, known).top
    named = [(e.kind, e.key) for e in top]
    # a leaf named whose nodes are all independent faults: a false leaf
    false_leaves = [e.key for e in top if e.kind == "leaf" and set(e.node_rank) <= independent]
    right = bool(named) and named[0] == want and all(k != "leaf" for k, _ in named[1:]) and not false_leaves
    return {"kind": kind, "want": want, "named": named[:4], "right": right, "false_leaves": false_leaves,
            "nodes": fleet.n}


def bench_scenarios(count: int, rail_row: dict, found: dict, seed: int) -> dict:
    rng = random.Random(seed)
    cfg = FabricConfig()
    out = [judge(*scenario(i, rail_row, found, rng), cfg) for i in range(count)]
    by_kind = {k: [r for r in out if r["kind"] == k] for k in ("leaf", "plane", "batch")}
    wrong = [r for r in out if not r["right"]]
    return {"scenarios": count, "right": sum(r["right"] for r in out),
            "share": sum(r["right"] for r in out) / max(1, count),
            "by_kind": {k: f"{sum(r['right'] for r in v)}/{len(v)}" for k, v in by_kind.items()},
            "false_leaves": sum(len(r["false_leaves"]) for r in out), "wrong": wrong[:5]}


# -- (b) incident identity through the alert policy ---------------------------------------------

def webhooks(nodes: list[tuple[str, str, str, str]], name: str = "RailscopeRailLinkDown") -> list[bytes]:
    """One payload per node, as Alertmanager sends them with group_by [alertname, node]."""
    at = datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = []
    for node, rail, plane, leaf in nodes:
        labels = {"alertname": name, "node": node, "rail": rail, "plane": plane, "device": f"net_rail{rail}",
                  "peer_system": leaf, "peer_port": "swp1", "severity": "critical"}
        out.append(json.dumps({"version": "4", "groupKey": f'{{}}:{{alertname="{name}", node="{node}"}}',
                               "status": "firing", "receiver": "railscope", "truncatedAlerts": 0,
                               "groupLabels": {"alertname": name, "node": node}, "commonLabels": labels,
                               "alerts": [{"status": "firing", "labels": labels, "startsAt": at,
                                           "fingerprint": node}]}).encode())
    return out


def through_policy(bodies: list[bytes]) -> dict:
    limits = AlertLimits(max_in_flight=100_000, rate_per_alertname=100_000)
    desk = FabricDesk(limits)
    stored: list = []
    t0 = time.perf_counter()
    rng = random.Random(3)
    rng.shuffle(bodies)
    for k, b in enumerate(bodies):
        hook = parse_webhook(b)
        desk.observe(hook, T0 + k * 1e-3)
        stored += desk.decide(hook, stored, T0 + k * 1e-3).queue
    later = T0 + len(bodies) * 1e-3 + limits.fabric_hold_s
    for hook in desk.due(later):
        stored += desk.decide(hook, stored, later).queue
    return {"webhooks": len(bodies), "incidents": sorted({r.incident for r in stored}), "requests": len(stored),
            "wall_s": round(time.perf_counter() - t0, 2)}


def bench_identity() -> dict:
    leaf = [(f"gpu-{m:05d}", "3", "3", leaf_of(m, 3)) for m in range(128, 192)]
    plane = [(f"gpu-{m:05d}", "1", "1", leaf_of(m, 1)) for m in range(10_000)]
    return {"leaf_64": through_policy(webhooks(leaf)), "plane_10000": through_policy(webhooks(plane))}


def bench_alertmanager(n_plane: int) -> dict:
    """The leaf and plane faults posted to a real Alertmanager routed as the README says, webhooks to a
    real collector; the capture requests stored say how many incidents."""
    sys.path.insert(0, str(ROOT / "tests"))
    from integration.collector_env import Collector, free_port  # the test harness's process helpers

    am_bin = "/usr/bin/prometheus-alertmanager"
    if not os.access(am_bin, os.X_OK):
        return {"skipped": "prometheus-alertmanager is not installed"}
    out = {}
    for label, nodes in (("leaf_64", [(f"gpu-{m:05d}", "3", "3", leaf_of(m, 3)) for m in range(128, 192)]),
                         (f"plane_{n_plane}", [(f"gpu-{m:05d}", "1", "1", leaf_of(m, 1)) for m in range(n_plane)])):
        with tempfile.TemporaryDirectory(prefix="rs-bench-fabric-") as d:
            work = Path(d)
            (work / "tokens").mkdir()
            (work / "tokens" / "alerting").write_text("bench-alerting-token-0123456789\n")
            (work / "tokens" / "operator").write_text("bench-operator-token-0123456789\n")
            for f in (work / "tokens").iterdir():
                f.chmod(0o600)  # the collector refuses a token file others may read
            store = work / "store"
            (store / "_agents").mkdir(parents=True)
            for node, *_ in nodes:
                (store / "_agents" / f"{node}.json").write_text("{}")
            col = Collector(work, str(store), "--fabric-hold", "20s", "--capture-max-in-flight", "1000",
                            tokens={"alerting_token_file": str(work / "tokens" / "alerting"),
                                    "operator_token_file": str(work / "tokens" / "operator")})
            col.start()
            (work / "cred").write_text("bench-alerting-token-0123456789")
            port = free_port()
            (work / "am.yml").write_text(
                "route:\n  receiver: railscope\n  group_by: [alertname, node]\n  group_wait: 2s\n"
                "  group_interval: 5m\n  repeat_interval: 4h\nreceivers:\n  - name: railscope\n    webhook_configs:\n"
                f"      - url: {col.url}/v1/alerts\n        http_config: {{authorization: {{credentials_file: "
                f"{work / 'cred'}}}}}\n")
            am = subprocess.Popen([am_bin, f"--config.file={work / 'am.yml'}", f"--storage.path={work / 'am'}",
                                   f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                                  stdout=open(work / "am.log", "wb"), stderr=subprocess.STDOUT)
            try:
                for _ in range(100):
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                        break
                    except OSError:
                        time.sleep(0.2)
                at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                alerts = [{"labels": {"alertname": "RailscopeRailLinkDown", "node": node, "rail": r, "plane": p,
                                      "device": f"net_rail{r}", "peer_system": leaf, "peer_port": "swp1",
                                      "severity": "critical"}, "startsAt": at} for node, r, p, leaf in nodes]
                t0 = time.monotonic()
                for k in range(0, len(alerts), 1000):
                    urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{port}/api/v2/alerts", data=json.dumps(alerts[k:k + 1000]).encode(),
                        headers={"Content-Type": "application/json"}), timeout=60)
                deadline = time.monotonic() + 300
                got: list = []
                while time.monotonic() < deadline:
                    log = col.log.read_text(errors="replace")
                    decided = log.count("after the fabric hold")
                    if decided >= len(nodes):
                        break
                    time.sleep(1)
                took = time.monotonic() - t0
                got = [json.loads(p.read_text()) for p in (store / "_requests").rglob("*.json")] \
                    if (store / "_requests").exists() else []
                hwm = next((int(line.split()[1]) / 1024 for line in
                            Path(f"/proc/{col.proc.pid}/status").read_text().splitlines()
                            if line.startswith("VmHWM:")), 0.0) if col.proc else 0.0
                out[label] = {"alerts": len(nodes), "webhooks_held": log.count("'held': 1"),
                              "collector_peak_rss_mib": round(hwm, 1),
                              "decided_after_hold": decided, "incidents": sorted({r["incident"] for r in got}),
                              "requests": len(got), "wall_s": round(took, 1)}
            finally:
                am.terminate()
                am.wait(15)
                col.stop()
    return out


# -- (c) the cost of correlating 10,000 nodes' findings ------------------------------------------

def bench_cost(rail_row: dict, found: dict, n: int = 10_000, runs: int = 5) -> dict:
    rng = random.Random(11)
    fleet, _kind, _want, _ind = scenario(1, rail_row, found, rng, n=n)  # a plane fault: the most signals
    streams = fleet.streams()
    anchors, walls, peaks = [], [], []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        docs = [json.loads(s) for s in streams]
        anchors.append(time.perf_counter() - t0)
        gc.collect()
        tracemalloc.start()
        t0 = time.perf_counter()
        sigs, known = [], []
        for d in docs:
            s, k = signals_of_doctor(d, T0)
            sigs += s
            known += k
        corr = correlate(sigs, FabricConfig(), known)
        top = corr.top
        walls.append(time.perf_counter() - t0)
        peaks.append(tracemalloc.get_traced_memory()[1] / (1 << 20))
        tracemalloc.stop()
        del docs
    # and the same correlation without tracemalloc's overhead
    docs = [json.loads(s) for s in streams]
    t0 = time.perf_counter()
    sigs, known = [], []
    for d in docs:
        s, k = signals_of_doctor(d, T0)
        sigs += s
        known += k
    correlate(sigs, FabricConfig(), known)
    plain = time.perf_counter() - t0
    walls.sort()
    anchors.sort()
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"nodes": n, "signals": len(sigs), "rails_known": len(known), "events": [(e.kind, e.key, e.nodes) for e in top][:3],
            "anchor_json_loads_s": round(anchors[len(anchors) // 2], 3),
            "correlate_s_traced_median": round(walls[len(walls) // 2], 3), "correlate_s": round(plain, 3),
            "ratio": round(plain / anchors[len(anchors) // 2], 2), "peak_mib": round(max(peaks), 1),
            "input_mib": round(sum(map(len, streams)) / (1 << 20), 1), "process_max_rss_mib": round(rss, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--alertmanager", type=int, nargs="?", const=10_000, default=0, metavar="PLANE_NODES",
                    help="also post the faults through a real Alertmanager and collector (plane fault nodes, "
                         "default 10000)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rail_row, found = templates()
    res: dict = {}
    t0 = time.monotonic()
    res["a"] = bench_scenarios(args.scenarios, rail_row, found, args.seed)
    print(f"(a) {res['a']['right']}/{res['a']['scenarios']} scenarios right ({res['a']['share']:.1%}; "
          f"leaf {res['a']['by_kind']['leaf']}, plane {res['a']['by_kind']['plane']}, "
          f"batch {res['a']['by_kind']['batch']}); false leaves from the independent faults: "
          f"{res['a']['false_leaves']}  [{time.monotonic() - t0:.0f} s]", flush=True)
    for w in res["a"]["wrong"]:
        print(f"    wrong: {w}")
    res["b"] = bench_identity()
    for k, v in res["b"].items():
        print(f"(b) {k}: {v['webhooks']} webhooks -> {len(v['incidents'])} incident(s) {v['incidents'][:2]}, "
              f"{v['requests']} capture requests, {v['wall_s']} s in the policy", flush=True)
    if args.alertmanager:
        res["b_am"] = bench_alertmanager(args.alertmanager)
        for k, v in res["b_am"].items():
            print(f"(b) real Alertmanager {k}: {v}", flush=True)
    res["c"] = c = bench_cost(rail_row, found)
    print(f"(c) {c['nodes']} nodes' findings ({c['input_mib']} MiB of doctor JSON, {c['signals']} signals, "
          f"{c['rails_known']} rails with a peer): correlate {c['correlate_s']:.3f} s "
          f"({c['ratio']}x the anchor json.loads {c['anchor_json_loads_s']:.3f} s), peak {c['peak_mib']} MiB "
          f"(tracemalloc; {c['correlate_s_traced_median']:.3f} s traced; this process' max RSS {c['process_max_rss_mib']} MiB "
          f"with the streams and parsed diagnoses); events {c['events']}")
    ok = (res["a"]["share"] >= 0.95 and res["a"]["false_leaves"] == 0
          and all(len(v["incidents"]) == 1 for v in res["b"].values())
          and c["correlate_s"] <= 2.0 and c["peak_mib"] <= 256
          and all(len(v.get("incidents", [None])) == 1 for v in res.get("b_am", {}).values() if "skipped" not in v))
    print("targets:", "ok" if ok else "NOT MET")
    if args.json:
        print(json.dumps(res, default=str))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
