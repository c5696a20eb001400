"""The cost of one ``ethtool -m`` pass over 8 rails, as the optics source runs it.

Two figures, medians of ``--runs``:

- parse: ``parse_ethtool_m`` of a real QSFP28 dump (``tests/fixtures/public/optics/``) eight times,
  in this process (what the agent spends per pass on the text);
- pass: ``read_optics`` over 8 netdevs through ``LiveHost`` (one ``ethtool -m`` process each, one at a
  time, argv, timeout), in a network namespace of 8 veth pairs named ``net_rail0..7``: wall time and
  the children's CPU. veth has no module EEPROM, so ethtool answers at once: this is the floor of a
  pass (process spawn, netlink round trip), not the firmware's MCIA read on mlx5, which adds the
  module's own I2C time per page read (not measurable without a ConnectX).

Needs root (a network namespace, deleted on exit). Run: ``python bench/bench_optics.py [--runs 15] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "fixtures" / "public" / "optics" / "ethtool-m-qsfp28-finisar-cwdm4.txt"
RAILS = 8


def parse_cost(runs: int) -> float:
    sys.path.insert(0, str(ROOT))
    from agent.readers.optics import parse_ethtool_m

    text = SAMPLE.read_text()
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        for i in range(RAILS):
            parse_ethtool_m(text, f"net_rail{i}")
        times.append(time.process_time() - t0)
    return statistics.median(times)


CHILD = """
import json, resource, statistics, sys, time
sys.path.insert(0, {root!r})
from agent.host.live import LiveHost
from agent.readers.common import Notes
from agent.readers.optics import read_optics
host = LiveHost("/")
names = [f"net_rail{{i}}" for i in range({rails})]
walls, cpus = [], []
for _ in range({runs}):
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    read_optics(host, names, 10.0, Notes())
    walls.append(time.perf_counter() - t0)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus.append((c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime))
print(json.dumps({{"wall_s": statistics.median(walls), "child_cpu_s": statistics.median(cpus)}}))
"""


def pass_cost(runs: int) -> dict[str, float]:
    ns = f"rsbo-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for i in range(RAILS):
            subprocess.run(["ip", "-n", ns, "link", "add", f"net_rail{i}", "type", "veth", "peer", "name",
                            f"peer{i}"], check=True)
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                              CHILD.format(root=str(ROOT), rails=RAILS, runs=runs)],
                             capture_output=True, text=True, check=True, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=15, help="Runs per figure (median). Default: 15.")
    ap.add_argument("--json", action="store_true", help="Also print the figures as one JSON line.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_optics: needs root (a network namespace)", file=sys.stderr)
        return 3
    parse_s = parse_cost(args.runs)
    live = pass_cost(args.runs)
    print(f"parse    8 x ethtool -m text (QSFP28, 20 thresholds, 4 lanes)   {parse_s * 1e3:7.2f} ms CPU")
    print(f"pass     8 x ethtool -m via LiveHost (veth: no EEPROM)          {live['wall_s'] * 1e3:7.1f} ms wall, "
          f"{live['child_cpu_s'] * 1e3:.1f} ms CPU in the ethtool processes")
    if args.json:
        print(json.dumps({"parse_cpu_s": parse_s, **live}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
