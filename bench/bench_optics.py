"""The cost of one ``ethtool -m`` pass over 8 rails, as the optics source runs it.

Figures, medians of ``--runs``:

- parse: ``parse_ethtool_m`` of a real QSFP28 dump (``tests/fixtures/public/optics/``) eight times,
  in this process (what the agent spends per pass on the text), and ``parse_ethtool_m_json`` of the
  same module's ``ethtool --json -m`` (the RECONSTRUCTED fixture beside it) eight times, as a ratio to
  the text measured in the same run (interleaved); the same for the CMIS (QSFP-DD) module;
- pass: ``read_optics`` over 8 netdevs through ``LiveHost`` (one ``ethtool -m`` process each, one at a
  time, argv, timeout), in a network namespace of 8 veth pairs named ``net_rail0..7``: wall time and
  the children's CPU. veth has no module EEPROM, so ethtool answers at once: this is the floor of a
  pass (process spawn, netlink round trip), not the firmware's MCIA read on mlx5, which adds the
  module's own I2C time per page read (not measurable without a ConnectX). The reader asks
  ``ethtool --version`` once per host (the form: text, or ``--json -m`` from ethtool 6.14), in the
  first run only; with an ethtool 6.14+ first on ``PATH`` the pass is of the JSON form.

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
OPTICS = ROOT / "tests" / "fixtures" / "public" / "optics"
SAMPLE = OPTICS / "ethtool-m-qsfp28-finisar-cwdm4.txt"
#: (label, text fixture, its module's JSON fixture)
MODULES = (
    ("QSFP28, 20 thresholds, 4 lanes", SAMPLE, OPTICS / "ethtool-json-m-qsfp28-finisar-cwdm4-RECONSTRUCTED.json"),
    ("QSFP-DD CMIS, 8 lanes, no thresholds", OPTICS / "ethtool-m-qsfp-dd-cmis-no-thresholds.txt",
     OPTICS / "ethtool-json-m-qsfp-dd-cmis-no-thresholds-RECONSTRUCTED.json"),
)
RAILS = 8


def _body(path: Path) -> str:
    """The fixture without its ``#`` provenance lines (ethtool prints none)."""
    return "".join(ln + "\n" for ln in path.read_text().splitlines() if not ln.startswith("#"))


def parse_cost(runs: int, text_path: Path = SAMPLE, json_path: Path | None = None) -> tuple[float, float | None]:
    """Median CPU of 8 text parses and, when ``json_path`` is given, of 8 JSON parses of the same
    module, interleaved run by run so both see the same machine."""
    sys.path.insert(0, str(ROOT))
    from agent.readers.optics import parse_ethtool_m, parse_ethtool_m_json

    text = _body(text_path)
    doc = _body(json_path) if json_path is not None else None
    if doc is not None:  # the two forms of one module give one record, or the ratio means nothing
        assert parse_ethtool_m(text, "x") == parse_ethtool_m_json(doc, "x")
    texts, jsons = [], []
    for _ in range(runs):
        t0 = time.process_time()
        for i in range(RAILS):
            parse_ethtool_m(text, f"net_rail{i}")
        texts.append(time.process_time() - t0)
        if doc is not None:
            t0 = time.process_time()
            for i in range(RAILS):
                parse_ethtool_m_json(doc, f"net_rail{i}")
            jsons.append(time.process_time() - t0)
    return statistics.median(texts), (statistics.median(jsons) if jsons else None)


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
    figures: dict[str, float] = {}
    for n, (label, text_path, json_path) in enumerate(MODULES):
        text_s, json_s = parse_cost(args.runs, text_path, json_path)
        assert json_s is not None
        key = "" if n == 0 else "_cmis"
        figures[f"parse_cpu_s{key}"], figures[f"parse_json_cpu_s{key}"] = text_s, json_s
        print(f"{f'parse    8 x ethtool -m text ({label})':<67}{text_s * 1e3:7.2f} ms CPU  (anchor)")
        print(f"{'parse    8 x ethtool --json -m of the same module':<67}{json_s * 1e3:7.2f} ms CPU  "
              f"= {json_s / text_s:.2f}x the text")
    live = pass_cost(args.runs)
    print(f"{'pass     8 x ethtool -m via LiveHost (veth: no EEPROM)':<67}{live['wall_s'] * 1e3:7.1f} ms wall, "
          f"{live['child_cpu_s'] * 1e3:.1f} ms CPU in the ethtool processes")
    if args.json:
        print(json.dumps({**figures, **live}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
