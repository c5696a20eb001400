"""Agent foundation benchmark: a big node's link dump, snapshot and diagnosis against ``ip link``.

Builds a network namespace with 2,050 veth netdevs (1,025 pairs; 8 of them named ``net_rail0..7``,
like 8 rails x 256 links on a node with 8 rails x 127 VFs and their representors), then prints, in
one run:

- the anchor: wall time of ``ip -j -s -d link show`` in that namespace (median of N runs);
- (a) one full snapshot + diagnosis inside a running process (median), as ``railscope doctor`` and
  the agent do it; target <= 5x the anchor;
- (b) ``railscope doctor --json`` as a whole process: wall and peak RSS, minus the wall of a bare
  ``python -c "import pyroute2"`` (the price of any Python tool that reads netlink with pyroute2);
  target <= 5x the anchor;
- for comparison: the raw link dump alone, and pyroute2's own ``IPRoute().get_links()``.

With ``--against DIR`` (another checkout of railscope, such as ``git worktree add --detach DIR <commit>``)
it measures (a) and (b) of both trees in the same namespace, ``--rounds`` times each, one tree after the
other, and prints every round's figure: the spread between the reference's rounds is the noise (two runs
of the same code), and a difference between the trees' medians inside it is no difference.

Needs root (network namespaces). The namespace is deleted on exit, failure or Ctrl-C. Run:
``sudo python bench/bench_doctor.py [--runs 15] [--pairs 1025] [--rails 8] [--json] [--against DIR [--rounds 3]]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

TARGET_RATIO = 5.0

INNER = r"""
import gc, json, statistics, sys, time
runs, rails = int(sys.argv[1]), int(sys.argv[2])
from agent.config import Expectations, ReadConfig
from agent.analysis.diagnose import diagnose
from agent.host.live import LiveHost
from agent.host.netlink.dump import LinkReader
from agent.readers.snapshot import take_snapshot
from agent.analysis.topology import build_topology
from agent.readers.kernel_table import load_kernel_table

exp = Expectations(rails=rails)
table = load_kernel_table(None)
cfg = ReadConfig()
host = LiveHost()

def once():
    snap = take_snapshot(host, cfg)
    diag = diagnose(snap, exp, kernel_table=table, topology=build_topology(snap, exp))
    return snap, diag

snap, diag = once()  # warm-up: imports settle, caches fill, the socket exists
full = []
for _ in range(runs):
    t = time.perf_counter(); once(); full.append(time.perf_counter() - t)
reader = LinkReader()
reader.dump()
dump = []
for _ in range(runs):
    t = time.perf_counter(); reader.dump(); dump.append(time.perf_counter() - t)
from pyroute2 import IPRoute
pr = []
with IPRoute() as ipr:
    ipr.get_links()
    for _ in range(max(3, runs // 3)):
        t = time.perf_counter(); ipr.get_links(); pr.append(time.perf_counter() - t)
print(json.dumps({"full": full, "dump": dump, "pyroute2": pr, "links": len(snap.links),
                  "rails": len(diag.rails)}))
"""


def ip(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(["ip", *argv], input=stdin, text=True, check=True, capture_output=True, timeout=300)


def build(ns: str, pairs: int, rails: int) -> None:
    ip("netns", "add", ns)
    lines = ["link set lo up"]
    names = []
    for i in range(pairs):
        a = f"net_rail{i}" if i < rails else f"eth{i}"
        names += [a, f"peer{i}"]
        lines.append(f"link add {a} type veth peer name peer{i}")
    lines += [f"link set {n} up" for n in names]
    ip("-n", ns, "-force", "-batch", "-", stdin="\n".join(lines) + "\n")


def walls(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300)
        times.append(time.perf_counter() - t)
    return times


def process_runs(argv: list[str], runs: int, ok: tuple[int, ...] = (0,),
                 env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Median wall, peak RSS (KiB, max over runs) and the last stdout of a whole process."""
    times, peak, out = [], 0, ""
    for _ in range(runs):
        with tempfile.TemporaryFile() as fh:
            t = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.DEVNULL, env=env)
            _pid, status, usage = os.wait4(proc.pid, 0)
            times.append(time.perf_counter() - t)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode not in ok:
                raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
            peak = max(peak, usage.ru_maxrss)
            fh.seek(0)
            out = fh.read().decode()
    return statistics.median(times), peak, out


def tree_rounds(trees: list[tuple[str, str]], in_ns: list[str], rails: int, runs: int, rounds: int,
                env: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """(a) and (b) of each tree (label, directory), ``rounds`` times, the trees taking turns."""
    py = sys.executable
    out: dict[str, dict[str, list[float]]] = {label: {"a": [], "b": []} for label, _ in trees}
    for _ in range(rounds):
        for label, tree in trees:
            res = subprocess.run([*in_ns, py, "-c", INNER, str(runs), str(rails)], check=True, cwd=tree,
                                 capture_output=True, text=True, timeout=1800)
            out[label]["a"].append(statistics.median(json.loads(res.stdout)["full"]))
            argv = [*in_ns, py, "-m", "agent.cli", "doctor", "--json", "--rails", str(rails)]
            old = os.getcwd()
            os.chdir(tree)  # -m agent.cli imports the tree it runs in
            try:
                process_runs(argv, 1, ok=(0, 1, 2), env=env)  # its bytecode cache
                wall, _, _ = process_runs(argv, runs, ok=(0, 1, 2), env=env)
            finally:
                os.chdir(old)
            out[label]["b"].append(wall)
    return out


def print_against(res: dict[str, dict[str, list[float]]], ref: str, this: str, runs: int) -> bool:
    """The rounds of both trees; True when this tree is worse than the reference beyond the noise."""
    worse = False
    print(f"against the reference, rounds taking turns (each the median of {runs} runs):")
    for key, what in (("a", "(a) snapshot + diagnosis, in process"), ("b", "(b) railscope doctor --json, process")):
        r, t = res[ref][key], res[this][key]
        # the noise between two runs of the same code: the reference's rounds
        noise = max(r) - min(r)
        diff = statistics.median(t) - statistics.median(r)
        beyond = diff > noise
        worse = worse or beyond
        print(f"  {what}")
        print(f"    {ref:<10} " + " ".join(f"{x * 1000:7.1f}" for x in r) + " ms")
        print(f"    {this:<10} " + " ".join(f"{x * 1000:7.1f}" for x in t) + " ms")
        # the trees take turns within a round: a round's ratio is free of the drift between rounds
        paired = [b / a for a, b in zip(r, t, strict=True)]
        print("    this / reference, round by round: " + " ".join(f"{x:.2f}" for x in paired)
              + f"; median {statistics.median(paired):.2f}x")
        print(f"    difference of the medians {diff * 1000:+.1f} ms ({statistics.median(t) / statistics.median(r):.2f}x); "
              f"noise (spread of the reference's rounds) {noise * 1000:.1f} ms: "
              f"{'WORSE beyond the noise' if beyond else 'within the noise'}")
    return worse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=15, help="Runs per measurement (median). Default: 15.")
    ap.add_argument("--pairs", type=int, default=1025, help="veth pairs (x2 netdevs). Default: 1025.")
    ap.add_argument("--rails", type=int, default=8, help="Pairs named net_rail<i>. Default: 8.")
    ap.add_argument("--json", action="store_true", help="Also print the figures as one JSON line.")
    ap.add_argument("--against", metavar="DIR",
                    help="Another railscope checkout to compare with, round by round (see above).")
    ap.add_argument("--rounds", type=int, default=3, help="Rounds per tree with --against. Default: 3.")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.against and not os.path.isfile(os.path.join(args.against, "agent", "cli.py")):
        print(f"bench_doctor: --against {args.against}: not a railscope checkout (no agent/cli.py)", file=sys.stderr)
        return 3
    if os.geteuid() != 0:
        print("bench_doctor: needs root (it creates a network namespace)", file=sys.stderr)
        return 3

    ns = f"rs-bench-{uuid.uuid4().hex[:8]}"
    pycache = tempfile.mkdtemp(prefix="rs-bench-pycache-")

    def _stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    py = sys.executable
    in_ns = ["ip", "netns", "exec", ns]
    try:
        t = time.perf_counter()
        build(ns, args.pairs, args.rails)
        setup_s = time.perf_counter() - t
        anchor_argv = ["ip", "-n", ns, "-j", "-s", "-d", "link", "show"]
        # Half the anchor runs before the measurements and half after, so that a change in the
        # machine's load during the run weighs on both sides of the ratio.
        anchor_runs = walls(anchor_argv, (args.runs + 1) // 2)

        res = subprocess.run([*in_ns, py, "-c", INNER, str(args.runs), str(args.rails)], check=True,
                             capture_output=True, text=True, timeout=1800)
        inner = json.loads(res.stdout)
        full = statistics.median(inner["full"])

        # Processes run with their bytecode cached, as in the container image (pip compiles on
        # install). A shell with PYTHONDONTWRITEBYTECODE=1 would recompile every agent module on
        # every run while pyroute2's site-packages bytecode stays cached: an unfair baseline. The
        # cache goes to a private prefix, so the source tree stays clean.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        doctor_argv = [*in_ns, py, "-m", "agent.cli", "doctor", "--json", "--rails", str(args.rails)]
        cold_wall, _, _ = process_runs(doctor_argv, 1, ok=(0, 1, 2), env={**env, "PYTHONDONTWRITEBYTECODE": "1"})
        bare_argv = [*in_ns, py, "-c", "import pyroute2"]
        pass_argv = [*in_ns, py, "-c", "pass"]
        for warm in (doctor_argv, bare_argv, pass_argv):  # fills the cache (stdlib included)
            process_runs(warm, 1, ok=(0, 1, 2), env=env)
        doctor_wall, doctor_rss, out = process_runs(doctor_argv, args.runs, ok=(0, 1, 2), env=env)
        doc = json.loads(out)
        bare_wall, bare_rss, _ = process_runs(bare_argv, args.runs, env=env)
        py_wall, _, _ = process_runs(pass_argv, args.runs, env=env)
        against = None
        if args.against:
            against = tree_rounds([("reference", os.path.abspath(args.against)), ("this tree", here)], in_ns,
                                  args.rails, args.runs, max(2, args.rounds), env)
        anchor = statistics.median(anchor_runs + walls(anchor_argv, (args.runs + 1) // 2))
        doctor_net = doctor_wall - bare_wall
    except KeyboardInterrupt:
        print("bench_doctor: interrupted", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as exc:
        print(f"bench_doctor: {' '.join(map(str, exc.cmd))[:120]} failed: {(exc.stderr or '').strip()[:400]}",
              file=sys.stderr)
        return 1
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        shutil.rmtree(pycache, ignore_errors=True)

    def ms(s: float) -> str:
        return f"{s * 1000:8.1f} ms"

    def ratio(s: float) -> str:
        return f"{s / anchor:6.2f}x"

    links = inner["links"]
    print(f"namespace: {links} links ({args.pairs} veth pairs, {args.rails} rails), built in {setup_s:.2f} s; "
          f"median of {args.runs} runs; python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print(f"anchor  ip -j -s -d link show                 {ms(anchor)}   1.00x")
    verdict_a = "ok" if full / anchor <= TARGET_RATIO else "OVER TARGET"
    print(f"(a)     snapshot + diagnosis, in process       {ms(full)} {ratio(full)}  target <= "
          f"{TARGET_RATIO:.0f}x: {verdict_a}")
    verdict_b = "ok" if doctor_net / anchor <= TARGET_RATIO else "OVER TARGET"
    print(f"(b)     railscope doctor --json, process       {ms(doctor_wall)} {ratio(doctor_wall)}  "
          f"peak RSS {doctor_rss / 1024:.1f} MiB")
    print(f"        same, without a bytecode cache (1 run) {ms(cold_wall)} {ratio(cold_wall)}")
    print(f"        python -c 'import pyroute2'            {ms(bare_wall)} {ratio(bare_wall)}  "
          f"peak RSS {bare_rss / 1024:.1f} MiB")
    print(f"        doctor minus bare pyroute2 import      {ms(doctor_net)} {ratio(doctor_net)}  target <= "
          f"{TARGET_RATIO:.0f}x: {verdict_b}")
    print(f"        python -c pass                         {ms(py_wall)} {ratio(py_wall)}")
    print(f"        doctor minus bare interpreter          {ms(doctor_wall - py_wall)} "
          f"{ratio(doctor_wall - py_wall)}  (imports + one cold snapshot + diagnosis + output)")
    print(f"compare raw link dump (LinkReader.dump)        {ms(statistics.median(inner['dump']))} "
          f"{ratio(statistics.median(inner['dump']))}")
    print(f"compare pyroute2 IPRoute().get_links()         {ms(statistics.median(inner['pyroute2']))} "
          f"{ratio(statistics.median(inner['pyroute2']))}")
    print(f"doctor saw {len(doc.get('rails', []))} rails, {len(doc.get('findings', []))} findings; "
          f"bench RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")
    worse = False
    if against is not None:
        rev = subprocess.run(["git", "-C", args.against, "log", "-1", "--format=%h %s"], capture_output=True,
                             text=True, check=False).stdout.strip()
        print(f"reference: {args.against}" + (f" ({rev[:70]})" if rev else ""))
        worse = print_against(against, "reference", "this tree", args.runs)
    if args.json:
        print(json.dumps({
            "links": links, "runs": args.runs, "anchor_s": anchor, "snapshot_diagnosis_s": full,
            "doctor_wall_s": doctor_wall, "doctor_peak_rss_kib": doctor_rss, "doctor_cold_wall_s": cold_wall,
            "import_pyroute2_s": bare_wall,
            "doctor_minus_import_s": doctor_net, "python_pass_s": py_wall,
            "dump_s": statistics.median(inner["dump"]), "pyroute2_get_links_s": statistics.median(inner["pyroute2"]),
            "ratio_a": full / anchor, "ratio_b": doctor_net / anchor,
            **({"against": against, "worse_than_reference": worse} if against is not None else {}),
        }))
    return 0 if full / anchor <= TARGET_RATIO and doctor_net / anchor <= TARGET_RATIO else 2


if __name__ == "__main__":
    sys.exit(main())
