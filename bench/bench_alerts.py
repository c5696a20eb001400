#!/usr/bin/env python3
"""Capture on alert: alert received -> bundle stored, and 1,000 agents long-polling one collector.

(a) ``railscope collector`` (local store) and ``railscope agent --collector`` on this machine; an
    Alertmanager webhook payload is posted ``--runs`` times (one incident each) and the time until the
    bundle's ``.sha256`` is in the store is taken. Anchor: ``railscope capture`` of this machine as a
    whole process (the capture alone), median of 3.
(b) Two collector replicas on one store; 1,000 simulated agents (one asyncio client each, own node,
    own token) long-poll replica B; 100 requests are queued through replica A, so each reaches its
    agent through B's listing. Figures: B's CPU and RSS with no agent (the anchor) and with 1,000
    waiting, and the time from a request queued to its agent holding it.

    python bench/bench_alerts.py [--runs 20] [--agents 1000] [--json]

Exit status 0 when the targets hold (p95 alert -> stored <= 15 s; every agent served within one
listing interval plus a second; RSS <= 200 MiB), 2 when one does not, 1 when a step failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
ALERTING = "bench-alerting-token-0123456789"
OPERATOR = "bench-operator-token-0123456789"
NODE = "bench-node"
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Proc:
    def __init__(self, argv: list[str], log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = log
        self.p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  start_new_session=True)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)


def wait_http(url: str, timeout: float = 30) -> None:
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"not ready: {url}")


def collector(work: Path, store: Path, tokens: dict[str, Path], *extra: str) -> tuple[Proc, str]:
    port = free_port()
    argv = [sys.executable, "-m", "agent.cli", "collector", "--listen", "127.0.0.1", "--port", str(port),
            "--store", str(store), "--alerting-token-file", str(tokens["alerting"]),
            "--operator-token-file", str(tokens["operator"]), "--agent-token-file", str(tokens["agent"]), "--plain-http",
            "--cluster", "bench", *extra]  # the agent's --cluster: agent tokens are bound to the collector's
    proc = Proc(argv, work / f"collector-{port}.log")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/readyz")
    return proc, url


def payload(i: int) -> bytes:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps({
        "version": "4", "groupKey": f'{{}}:{{alertname="RailscopeLinkFlapping", run="{i}"}}', "status": "firing",
        "receiver": "railscope", "groupLabels": {"alertname": "RailscopeLinkFlapping"},
        "commonLabels": {"alertname": "RailscopeLinkFlapping"}, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "truncatedAlerts": 0,
        "alerts": [{"status": "firing", "labels": {"alertname": "RailscopeLinkFlapping", "node": NODE,
                                                    "severity": "warning", "incident": f"bench-{os.getpid()}-{i}"},
                    "annotations": {}, "startsAt": now, "endsAt": "0001-01-01T00:00:00Z", "fingerprint": f"{i:016x}"}],
    }).encode()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def bench_alerts(work: Path, runs: int) -> dict:
    store = work / "store-a"
    tokens = {r: work / f"{r}-tokens" for r in ("alerting", "operator", "agent")}
    tokens["alerting"].write_text(ALERTING + "\n")
    tokens["alerting"].chmod(0o600)  # token files: their owner's alone
    tokens["operator"].write_text(OPERATOR + "\n")
    tokens["operator"].chmod(0o600)  # token files: their owner's alone
    agent_token = "bench-agent-token-0123456789abcd"
    tokens["agent"].write_text(f"{NODE} {agent_token}\n")
    tokens["agent"].chmod(0o600)  # token files: their owner's alone
    (work / "agent-token").write_text(agent_token + "\n")
    (work / "agent-token").chmod(0o600)  # the agent refuses a token file others may read

    caps = []
    for n in range(3):
        out = work / f"capture-{n}"
        out.mkdir()
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "agent.cli", "capture", "-o", str(out), "--node", NODE,
                        "--recorder-gap", "0"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, check=True, timeout=600)
        caps.append(time.monotonic() - t0)
        shutil.rmtree(out)
    anchor = statistics.median(caps)

    col, url = collector(work, store, tokens, "--capture-cooldown", "0s")
    aport = free_port()
    agent = Proc([sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(aport),
                  "--node", NODE, "--cluster", "bench", "--collector", url,
                  "--collector-token-file", str(work / "agent-token")], work / "agent.log")
    try:
        wait_http(f"http://127.0.0.1:{aport}/readyz", 60)
        times = []
        import urllib.request

        for i in range(runs):
            req = urllib.request.Request(url + "/v1/alerts", data=payload(i), method="POST",
                                         headers={"Authorization": f"Bearer {ALERTING}"})
            t0 = time.monotonic()
            with urllib.request.urlopen(req, timeout=30) as r:
                doc = json.loads(r.read())
            assert len(doc["queued"]) == 1, doc
            incident = doc["queued"][0]["incident"]
            deadline = t0 + 120
            while not list(store.glob(f"bench/*/{incident}/*.tar.gz.sha256")):
                if time.monotonic() > deadline:
                    raise SystemExit(f"run {i}: no bundle after 120 s; agent log: {agent.log.read_text()[-2000:]}")
                time.sleep(0.02)
            times.append(time.monotonic() - t0)
        return {"anchor_capture_s": anchor, "p50_s": pct(times, 50), "p95_s": pct(times, 95),
                "max_s": max(times), "runs": runs}
    finally:
        agent.stop()
        col.stop()


async def _agents(url_b: str, url_a: str, nodes: list[str], tokens: dict[str, str], pid_b: int,
                  queue_n: int, idle_s: float) -> dict:
    got: dict[str, float] = {}
    stop = asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=90)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        async def agent(node: str) -> None:
            headers = {"Authorization": f"Bearer {tokens[node]}"}
            while not stop.is_set():
                try:
                    async with s.get(f"{url_b}/v1/requests?node={node}&wait=50", headers=headers) as r:
                        doc = await r.json()
                except (TimeoutError, aiohttp.ClientError):
                    await asyncio.sleep(1)
                    continue
                if doc.get("requests"):
                    now = time.monotonic()
                    for req in doc["requests"]:
                        got.setdefault(req["id"], now)
                    return  # the agent would be capturing now

        tasks = [asyncio.create_task(agent(n)) for n in nodes]
        await asyncio.sleep(5)  # every poll is held now
        c0, t0 = cpu_s(pid_b), time.monotonic()
        await asyncio.sleep(idle_s)
        idle_cpu = (cpu_s(pid_b) - c0) / (time.monotonic() - t0)
        rss_waiting = rss_mib(pid_b)
        queued: dict[str, float] = {}
        op = {"Authorization": f"Bearer {OPERATOR}"}
        c0, t0 = cpu_s(pid_b), time.monotonic()
        for node in random.Random(1).sample(nodes, queue_n):
            async with s.post(url_a + "/v1/requests", json={"node": node, "incident": "bench-poll"}, headers=op) as r:
                doc = await r.json()
                queued[doc["request"]["id"]] = time.monotonic()
            await asyncio.sleep(0.05)
        end = time.monotonic() + 20
        while len([i for i in queued if i in got]) < len(queued) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        busy_cpu = (cpu_s(pid_b) - c0) / (time.monotonic() - t0)
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    delays = [got[i] - q for i, q in queued.items() if i in got]
    return {"agents": len(nodes), "served": len(delays), "queued": len(queued), "idle_cpu": idle_cpu,
            "busy_cpu": busy_cpu, "rss_waiting_mib": rss_waiting, "rss_peak_mib": rss_mib(pid_b, "VmHWM"),
            "p50_s": pct(delays, 50) if delays else None, "p95_s": pct(delays, 95) if delays else None,
            "max_s": max(delays) if delays else None}


def bench_polls(work: Path, n_agents: int, queue_n: int = 100, idle_s: float = 15.0) -> dict:
    store = work / "store-b"
    nodes = [f"sim-{i:04d}" for i in range(n_agents)]
    toks = {n: f"sim-agent-token-{n}-{os.urandom(6).hex()}" for n in nodes}
    tokens = {r: work / f"poll-{r}-tokens" for r in ("alerting", "operator", "agent")}
    tokens["alerting"].write_text(ALERTING + "\n")
    tokens["alerting"].chmod(0o600)  # token files: their owner's alone
    tokens["operator"].write_text(OPERATOR + "\n")
    tokens["operator"].chmod(0o600)  # token files: their owner's alone
    tokens["agent"].write_text("".join(f"{n} {t}\n" for n, t in toks.items()))
    tokens["agent"].chmod(0o600)  # token files: their owner's alone
    col_a, url_a = collector(work, store, tokens)
    col_b, url_b = collector(work, store, tokens)
    try:
        time.sleep(2)
        c0, t0 = cpu_s(col_b.p.pid), time.monotonic()
        time.sleep(idle_s)
        anchor_cpu = (cpu_s(col_b.p.pid) - c0) / (time.monotonic() - t0)
        anchor_rss = rss_mib(col_b.p.pid)
        res = asyncio.run(_agents(url_b, url_a, nodes, toks, col_b.p.pid, queue_n, idle_s))
        res.update(anchor_cpu=anchor_cpu, anchor_rss_mib=anchor_rss)
        return res
    finally:
        col_a.stop()
        col_b.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.agents + 256)), hard))
    work = Path(tempfile.mkdtemp(prefix="rs-bench-alerts-"))
    try:
        a = bench_alerts(work, args.runs)
        b = bench_polls(work, args.agents)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok_a = a["p95_s"] <= 15
    ok_b = b["served"] == b["queued"] and (b["max_s"] or 99) <= 2.0 + 1.0 and b["rss_peak_mib"] <= 200
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print(f"(a) anchor  railscope capture of this machine (process, median of 3)  {a['anchor_capture_s']:6.2f} s  1.00x")
    print(f"(a) alert -> bundle stored, {a['runs']} runs   p50 {a['p50_s']:6.2f} s  {a['p50_s'] / a['anchor_capture_s']:.2f}x"
          f"   p95 {a['p95_s']:6.2f} s  {a['p95_s'] / a['anchor_capture_s']:.2f}x   max {a['max_s']:.2f} s"
          f"   target p95 <= 15 s: {'ok' if ok_a else 'MISSED'}")
    print(f"(b) anchor  collector B, no agent: CPU {100 * b['anchor_cpu']:.1f} %  RSS {b['anchor_rss_mib']:.1f} MiB")
    print(f"(b) {b['agents']} agents long-polling B: CPU idle {100 * b['idle_cpu']:.1f} %, while serving "
          f"{100 * b['busy_cpu']:.1f} %; RSS {b['rss_waiting_mib']:.1f} MiB "
          f"({b['rss_waiting_mib'] / max(b['anchor_rss_mib'], 0.1):.2f}x), peak {b['rss_peak_mib']:.1f} MiB")
    print(f"(b) {b['queued']} requests queued through replica A, {b['served']} held by their agent: "
          f"p50 {b['p50_s']:.2f} s  p95 {b['p95_s']:.2f} s  max {b['max_s']:.2f} s (listing interval 2 s)"
          f"   target all within one interval + 1 s, RSS <= 200 MiB: {'ok' if ok_b else 'MISSED'}")
    if args.json:
        print(json.dumps({"alerts": a, "polls": b}))
    return 0 if ok_a and ok_b else 2


if __name__ == "__main__":
    sys.exit(main())
