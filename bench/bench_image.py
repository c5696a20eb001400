"""Node image reading benchmark: ``railscope doctor --from`` before and after the in-memory reader.

The anchor is the code before the reader (the extract-then-read path: ``tarfile.extractall`` into a
temporary directory, then files read from disk), taken from git at ``--anchor`` (default 3a4e4b6)
with ``git archive`` into a temporary directory, and run the same way as this tree's code. Printed,
in one run:

- the example image (``tests/images/spectrumx-2rail-healthy``) as a ``.tar.gz`` and as a directory:
  the median time of one ``doctor --from X --json`` inside a warm process (imports done, so the
  figure is the reading and the diagnosis), for the anchor and for this tree, and their ratio
  (target: <= 1.0, the reader must not be slower than extract-then-read);
- the same for a 2,050-netdev bundle (8 rails x 255 representors, ``tests/support/bigimage.py``,
  plus ``lo`` and a management NIC), and the peak RSS (VmHWM) of the whole process for each.

Run: ``python bench/bench_image.py [--runs 9] [--anchor 3a4e4b6] [--json]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tests" / "images" / "spectrumx-2rail-healthy"

# One process per measurement: import the doctor (and the image readers) first, run it once to warm
# the caches, then time ``runs`` runs of it. Prints the times and the process's peak RSS.
_DRIVER = r"""
import contextlib, io, json, sys, time
src, runs = sys.argv[1], int(sys.argv[2])
from agent.cli import main
import agent.commands.doctor, agent.host.recorded  # noqa: F401
def once():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["doctor", "--from", src, "--json"])
    if rc not in (0, 1, 2):
        raise SystemExit(f"doctor exited {rc}")
    return buf.getvalue()
doc = json.loads(once())
times = []
for _ in range(runs):
    t = time.perf_counter(); once(); times.append(time.perf_counter() - t)
with open("/proc/self/status") as fh:
    hwm = next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM:"))
print(json.dumps({"times": times, "hwm_kib": hwm, "rails": len(doc["rails"]), "findings": len(doc["findings"])}))
"""


def measure(code_root: Path, src: Path, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code_root), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-c", _DRIVER, str(src), str(runs)], capture_output=True, text=True,
                         env=env, timeout=1800, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{code_root}: {out.stderr.strip()[-500:]}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return {"median_s": statistics.median(doc["times"]), "hwm_mib": doc["hwm_kib"] / 1024,
            "rails": doc["rails"], "findings": doc["findings"]}


def pack(src: Path, dest: Path, top: str) -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(src, arcname=top)
    return dest


def anchor_tree(commit: str, into: Path) -> Path:
    """The anchor's ``agent`` package, from git, without touching any work tree."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "agent"], check=True,
                          capture_output=True, timeout=120).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(into, filter="data")  # our own repository's history, not an image
    return into


def big_image(root: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.support import bigimage

    img = bigimage.build(root, rails=8, vfs=255)
    links = json.loads((img / "netlink" / "links.json").read_text())
    links["links"].append({"ifindex": 9999, "ifname": "eno1", "operstate": "UP", "carrier": 1, "mtu": 1500,
                           "parent_bus": "pci", "parent_dev": "0000:01:00.0"})
    (img / "netlink" / "links.json").write_text(json.dumps(links))
    assert len(links["links"]) == 2050
    return img


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=9, help="Timed runs per measurement (median). Default: 9.")
    ap.add_argument("--anchor", default="3a4e4b6", help="Commit of the extract-then-read code. Default: 3a4e4b6.")
    ap.add_argument("--json", action="store_true", help="Also print the figures as one JSON line.")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rs-bench-image-"))
    try:
        old = anchor_tree(args.anchor, work / "anchor")
        inputs = {
            "example.tar.gz": pack(EXAMPLE, work / "example.tar.gz", "node-bundle"),
            "example dir": EXAMPLE,
        }
        big = big_image(work / "big")
        inputs["2050-netdev.tar.gz"] = pack(big, work / "big.tar.gz", "big-bundle")
        inputs["2050-netdev dir"] = big
        figures = {}
        print(f"{'input':<20} {'anchor ms':>10} {'now ms':>10} {'ratio':>6}   {'anchor RSS':>10} {'now RSS':>9}")
        for name, src in inputs.items():
            runs = args.runs if "2050" not in name else max(3, args.runs // 3)
            # Alternate anchor and now, twice, and keep each one's better median: the machine is shared.
            a = min((measure(old, src, runs) for _ in range(2)), key=lambda m: m["median_s"])
            n = min((measure(ROOT, src, runs) for _ in range(2)), key=lambda m: m["median_s"])
            if (a["rails"], a["findings"]) != (n["rails"], n["findings"]):
                print(f"  {name}: the diagnoses differ: anchor {a}, now {n}", file=sys.stderr)
            ratio = n["median_s"] / a["median_s"]
            figures[name] = {"anchor_ms": round(a["median_s"] * 1e3, 2), "now_ms": round(n["median_s"] * 1e3, 2),
                             "ratio": round(ratio, 3), "anchor_rss_mib": round(a["hwm_mib"], 1),
                             "now_rss_mib": round(n["hwm_mib"], 1)}
            print(f"{name:<20} {a['median_s'] * 1e3:>10.1f} {n['median_s'] * 1e3:>10.1f} {ratio:>6.2f}   "
                  f"{a['hwm_mib']:>7.1f} MiB {n['hwm_mib']:>5.1f} MiB")
        print("ratio = now / anchor (target <= 1.0); RSS = the whole process's peak (VmHWM)")
        if args.json:
            print(json.dumps(figures))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
