"""The cluster view at scale (issue 30): 10,000 nodes, 80,000 NicDevices, 10,000 SriovNetworkNodeStates.

    .venv/bin/python bench/bench_rollout.py [--nodes 10000] [--cli-nodes 1000]

The API stand-in (tests/support/kube_apiserver.py) serves the healthy fixture cluster in a process of its own;
this process is the watcher (agent/clients/cluster.py + agent/analysis/rollout.py), so its peak RSS is the
collector's cost of the cluster view. Printed:

- the first verdict's time (discovery, one LIST per kind in pages of 500, the projections, the judgement);
- peak RSS (``ru_maxrss``; goal ≤ 512 MiB);
- the requests the stand-in counted, by verb and kind (one LIST per kind — more pages of it — then WATCH);
- the time from a changed NicDevice (PendingReboot on one node) to the changed verdict (goal ≤ 5 s);
- ``railscope rollout`` as a whole process against a healthy ``--cli-nodes`` cluster (wall time, exit);
- the collector's own cluster watch (collector/cluster/watch.py, which holds each object as zlib'd JSON for the
  incidents' slices), in a process of its own: its first sync, peak RSS, and one incident's slice stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.analysis.rollout import judge  # noqa: E402
from agent.clients.cluster import ClusterWatch  # noqa: E402
from agent.clients.kubernetes import KubeClient, KubeConfig  # noqa: E402

NS = "nvidia-network-operator"


def serve(nodes: int, token_file: str) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([sys.executable, "-m", "tests.support.kube_apiserver", "--scenario", "healthy", "--nodes",
                          str(nodes), "--token-file", token_file, "--bookmark-interval", "1"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()  # type: ignore[union-attr]


def command(p: subprocess.Popen, cmd: str) -> str:
    p.stdin.write(cmd + "\n")  # type: ignore[union-attr]
    p.stdin.flush()  # type: ignore[union-attr]
    return p.stdout.readline().strip()  # type: ignore[union-attr]


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def hwm_mib() -> float:
    """This process's own peak RSS (VmHWM): ``ru_maxrss`` of a child started by fork + exec starts at its
    parent's peak on Linux, the mm's high-water mark does not."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return rss_mib()


async def scale(nodes: int, token_file: str) -> dict:
    t = time.perf_counter()
    server, url = serve(nodes, token_file)
    loaded = time.perf_counter() - t
    out: dict = {"nodes": nodes, "stand_in_load_s": round(loaded, 1), "rss_before_mib": round(rss_mib())}
    try:
        async with KubeClient(KubeConfig(url, token_file)) as client:
            t = time.perf_counter()
            watch = ClusterWatch(client, NS)
            view = await watch.sync()
            seen: dict = {}
            result = judge(view, time.time(), first_seen=seen)
            out["first_verdict_s"] = round(time.perf_counter() - t, 2)
            out["objects"] = {k: len(v) for k, v in view.objects.items() if v}
            out["verdicts"] = result.counts()
            t = time.perf_counter()
            judge(view, time.time(), first_seen=seen)
            out["rejudge_s"] = round(time.perf_counter() - t, 2)
            watch.start()
            await asyncio.sleep(2)
            target = f"gpu-node-{nodes // 2:05d}"
            t = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(None, command, server, f"touch {target}")
            while True:
                await watch.changed.wait()
                watch.changed.clear()
                result = judge(view, time.time(), first_seen=seen)
                if result.nodes and result.nodes[0].node == target:
                    break
            out["change_to_verdict_s"] = round(time.perf_counter() - t, 2)
            out["changed_verdict"] = result.nodes[0].as_json()
            await watch.stop()
        out["peak_rss_mib"] = round(rss_mib())
        counts = json.loads(command(server, "count"))
        out["requests"] = counts
        out["lists"] = sum(n for k, n in counts.items() if k.startswith("list "))
        out["watches"] = sum(n for k, n in counts.items() if k.startswith("watch "))
        out["gets_or_writes"] = sum(n for k, n in counts.items() if k.startswith(("get ", "write ")))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=60)
    return out


def whole_process(nodes: int, token_file: str) -> dict:
    server, url = serve(nodes, token_file)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAILSCOPE_")}
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "agent.cli", "rollout", "--api-server", url, "--api-token-file",
                              token_file], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        wall = time.perf_counter() - t
        counts = json.loads(command(server, "count"))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=60)
    return {"nodes": nodes, "wall_s": round(wall, 2), "exit": res.returncode,
            "last_lines": res.stdout.splitlines()[-2:], "lists": sum(n for k, n in counts.items() if k.startswith("list "))}


async def collector_view(nodes: int, token_file: str) -> dict:
    """The collector's ClusterDesk at scale: sync, peak RSS, one two-node incident's slice (in this process)."""
    from dataclasses import dataclass

    from collector.cluster.watch import ClusterDesk
    from collector.storage.local import LocalStore
    from tests.support.collector_helpers import local_settings

    @dataclass
    class Req:
        incident: str
        node: str
        created: float

    server, url = serve(nodes, token_file)
    out: dict = {"nodes": nodes, "rss_before_mib": round(hwm_mib())}
    d = Path(tempfile.mkdtemp(prefix="bench-collector-view-"))
    store = LocalStore(local_settings(d))
    await store.start()
    try:
        reqs = [Req("inc-bench", f"gpu-node-{nodes // 3:05d}", time.time()),
                Req("inc-bench", f"gpu-node-{nodes // 2:05d}", time.time())]

        async def requests() -> list:
            return reqs

        desk = ClusterDesk(KubeConfig(url, token_file), store, "bench", NS, ("railscope", "lease"), "bench",
                           requests)
        async with KubeClient(desk.config) as client:
            t = time.perf_counter()
            await desk._start_watch(client)
            out["first_sync_s"] = round(time.perf_counter() - t, 2)
            out["held_mib"] = round(sum(len(b) for objs in desk.objects.values() for b in objs.values()) / 2**20, 1)
            t = time.perf_counter()
            stored = await desk.slice_incidents()
            out["slice_s"] = round(time.perf_counter() - t, 2)
            out["slice_bytes"] = (d / "store" / stored[0]).stat().st_size if stored else None
            await desk._stop_watch()
        out["peak_rss_mib"] = round(hwm_mib())
        counts = json.loads(command(server, "count"))
        out["lists"] = sum(n for k, n in counts.items() if k.startswith("list "))
    finally:
        await store.close()
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=60)
    return out


def main() -> int:
    args = sys.argv[1:]
    if "--collector-only" in args:
        nodes = int(args[args.index("--nodes") + 1]) if "--nodes" in args else 10000
        print(json.dumps(asyncio.run(collector_view(nodes, args[args.index("--token-file") + 1]))))
        return 0
    nodes = int(args[args.index("--nodes") + 1]) if "--nodes" in args else 10000
    cli_nodes = int(args[args.index("--cli-nodes") + 1]) if "--cli-nodes" in args else 1000
    d = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    tf = d / "token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)
    cli = whole_process(cli_nodes, str(tf))
    print("railscope rollout, whole process:", json.dumps(cli), flush=True)
    res = asyncio.run(scale(nodes, str(tf)))
    print(json.dumps(res, indent=1))
    ok = res["peak_rss_mib"] <= 512 and res["change_to_verdict_s"] <= 5 and res["gets_or_writes"] == 0
    print(f"goals: peak RSS {res['peak_rss_mib']} MiB (<= 512), change to verdict {res['change_to_verdict_s']} s "
          f"(<= 5), {res['lists']} LIST pages + {res['watches']} WATCH, no GET or write: {'met' if ok else 'MISSED'}")
    col = subprocess.run([sys.executable, __file__, "--collector-only", "--nodes", str(nodes), "--token-file", str(tf)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1200)
    view = json.loads(col.stdout) if col.returncode == 0 else {"error": col.stderr[-500:]}
    print("collector cluster view:", json.dumps(view), flush=True)
    ok = ok and view.get("peak_rss_mib", 1 << 30) <= 512
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
