"""Offline analysis benchmark: ``railscope diff`` of two big bundles, ``railscope report --html`` of a
bundle with a full flight recorder, each against ``railscope doctor --from`` of the same bundle.

Builds, in a temporary directory, two bundles (``.tar.gz``) of a synthetic 2,050-netdev switchdev
node (8 rails x 255 VF representors, their devlink ports and RDMA ports, plus a management NIC;
``tests/support/bigimage.py``), captured 600 s apart: the second with rail 3 down, rail 5 at
MTU 4200 and firmware bumped on every rail. The first bundle carries a full 15-minute flight
recorder (900 one-second samples x 8 rails x 24 counters) and a few events. Then prints, median of
``--runs`` whole processes (wall, and peak RSS from ``wait4``), for the bundles as ``.tar.gz`` and
again as directories (the same analysis without the archive):

- anchor: ``railscope doctor --from BEFORE.tar.gz --json`` (one read, one diagnosis);
- ``railscope diff BEFORE.tar.gz AFTER.tar.gz --json``: two reads and one comparison; target <= 2.5x;
- ``railscope report BEFORE.tar.gz --html FILE``: wall, and the page's size.

No root needed. Run: ``python bench/bench_offline.py [--runs 5] [--json]``. Exit 0 when the diff
target holds, 2 when it does not, 1 when a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import bigimage  # noqa: E402

TARGET_DIFF = 2.5
RAILS, VFS = 8, 255
ENDED = 1793197233  # 2026-10-28T14:20:33Z
RECORDER_S = 900
COUNTERS = (
    "rx_prio3_pause", "tx_prio3_pause", "rx_prio3_pause_duration", "tx_prio3_pause_duration",
    "rx_prio3_pause_transition", "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
    "rx_prio3_discards", "rx_prio3_buf_discard", "rx_prio3_cong_discard", "rx_discards_phy",
    "rx_out_of_buffer", "carrier_down_count", "link_down_events_phy", "outbound_pci_stalled_rd",
    "outbound_pci_stalled_wr", "outbound_pci_stalled_rd_events", "outbound_pci_stalled_wr_events",
    "outbound_pci_buffer_overflow", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
    "np_cnp_sent", "rp_cnp_handled",
)


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _manifest(root: Path, ended: int) -> None:
    items = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            kind = "command" if rel.startswith("cmd/") else "netlink" if rel.startswith("netlink/") else \
                "file" if rel.startswith("fs/") else "generated"
            items.append({"path": rel, "kind": kind, "argv": None, "rc": 0 if kind == "command" else None,
                          "duration_s": 0.01, "bytes": os.path.getsize(os.path.join(dirpath, name)), "sha256": None,
                          "truncated": False, "timed_out": False, "skipped": False})
    items.append({"path": None, "kind": "command", "argv": ["ovs-vsctl", "show"], "rc": None, "duration_s": 0.0,
                  "bytes": 0, "sha256": None, "truncated": False, "timed_out": False, "skipped": True,
                  "reason": "no OVS db socket at /var/run/openvswitch/db.sock"})
    (root / "manifest.json").write_text(json.dumps({
        "schema": "railscope.bundle/v1", "node": "big-node", "cluster": "bench", "incident": "bench",
        "reason": "bench_offline", "agent_version": "bench", "started_at": _iso(ended - 3), "ended_at": _iso(ended),
        "items": items}))


def _recorder(root: Path) -> None:
    """900 s x 8 rails; rail 2 storms for the last 3 minutes, rail 6 drops lossless packets once."""
    lines = []
    base = dict.fromkeys(COUNTERS, 1000)
    for r in range(RAILS):
        c = dict(base)
        for i in range(RECORDER_S):
            ts = ENDED - RECORDER_S + 1 + i
            c["rx_prio3_pause"] += 3
            c["tx_prio3_pause"] += 2
            c["rx_prio3_pause_duration"] += 900
            c["tx_prio3_pause_duration"] += 600
            if r == 2 and i > RECORDER_S - 180:
                c["tx_prio3_pause"] += 5000
                c["tx_prio3_pause_duration"] += 700_000
                c["tx_pause_storm_warning_events"] += i % 20 == 0
            if r == 6 and i == RECORDER_S - 240:
                c["rx_prio3_buf_discard"] += 800
            lines.append(json.dumps({"ts": ts, "netdev": f"net_rail{r}", "counters": c}))
    (root / "recorder.jsonl").write_text("\n".join(lines) + "\n")
    (root / "events.json").write_text(json.dumps({"events": [
        {"ts": ENDED - 170, "code": "PfcStorm", "severity": "critical", "subject": "net_rail2",
         "message": "net_rail2: sent pause on priority 3 for 70% of the last 60 s", "evidence": {}},
        {"ts": ENDED - 240, "code": "LosslessDrops", "severity": "critical", "subject": "net_rail6",
         "message": "net_rail6: 800 lossless packets dropped", "evidence": {}},
    ]}))


def _after(root: Path) -> None:
    links_path = root / "netlink" / "links.json"
    doc = json.loads(links_path.read_text())
    for ln in doc["links"]:
        if ln["ifname"] == "net_rail3":
            ln.update(operstate="DOWN", carrier=0, carrier_down_count=2)
        if ln["ifname"] == "net_rail5":
            ln["mtu"] = 4200
    links_path.write_text(json.dumps(doc))
    for r in range(RAILS):
        p = root / "cmd" / f"ethtool_-i_net_rail{r}.stdout"
        p.write_text(p.read_text().replace("28.42.1000", "28.43.1014"))
        (root / "fs" / "sys" / "devices" / "pci0000:00" / f"0000:{0x10 + r:02x}:00.0" / "infiniband" /
         f"rdma_rail{r}" / "fw_ver").write_text("28.43.1014\n")


def build(work: Path) -> tuple[Path, Path, int]:
    trees = {}
    for side in ("before", "after"):
        root = work / side / f"big-node-{side}"
        bigimage.build(root, rails=RAILS, vfs=VFS)
        links_path = root / "netlink" / "links.json"
        doc = json.loads(links_path.read_text())
        doc["links"].append({"ifindex": 9999, "ifname": "eno1", "operstate": "UP", "carrier": 1, "mtu": 1500,
                             "parent_bus": "pci", "parent_dev": "0000:02:00.0"})
        links_path.write_text(json.dumps(doc))
        if side == "before":
            _recorder(root)
        else:
            _after(root)
        _manifest(root, ENDED if side == "before" else ENDED + 600)
        trees[side] = root
    out = []
    for side, root in trees.items():
        bundle = work / f"{side}.tar.gz"
        with tarfile.open(bundle, "w:gz") as tf:
            tf.add(root, arcname=root.name)
        out.append(bundle)
    return out[0], out[1], len(doc["links"])


def process_runs(argv: list[str], runs: int, env: dict[str, str], ok: tuple[int, ...] = (0, 1, 2)
                 ) -> tuple[float, int, str]:
    """Median wall (s), peak RSS (KiB, max over runs) and the last stdout of a whole process."""
    times, peak, out = [], 0, ""
    for _ in range(runs):
        with tempfile.TemporaryFile() as fh:
            t = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
            _pid, status, usage = os.wait4(proc.pid, 0)
            times.append(time.perf_counter() - t)
            rc = os.waitstatus_to_exitcode(status)
            if rc not in ok:
                raise SystemExit(f"{' '.join(argv)} exited {rc}")
            peak = max(peak, usage.ru_maxrss)
            fh.seek(0)
            out = fh.read().decode()
    return statistics.median(times), peak, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5, help="Whole-process runs per figure (median). Default: 5.")
    ap.add_argument("--json", action="store_true", help="Also print the figures as one JSON line.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rs-bench-offline-"))
    pycache = tempfile.mkdtemp(prefix="rs-bench-pycache-")
    try:
        t = time.perf_counter()
        before, after, links = build(work)
        setup_s = time.perf_counter() - t
        # Bytecode cached, as in the container image (see bench/README.md, bench_doctor).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        py = [sys.executable, "-m", "agent.cli"]
        page = work / "report.html"
        figures = {}
        # The bundles as shipped (.tar.gz), and as directories (the same analysis without the archive).
        forms = {"tar.gz": (before, after),
                 "directory": (work / "before" / "big-node-before", work / "after" / "big-node-after")}
        for form, (b, a) in forms.items():
            doctor = [*py, "doctor", "--from", str(b), "--json"]
            diff = [*py, "diff", str(b), str(a), "--json"]
            report = [*py, "report", str(b), "--html", str(page)]
            for warm in (doctor, diff, report):
                process_runs(warm, 1, env)
            # Anchor runs before and after the others, so that a change of load weighs on both sides.
            a1, rss_doctor, doc_out = process_runs(doctor, (args.runs + 1) // 2, env)
            diff_wall, rss_diff, diff_out = process_runs(diff, args.runs, env, ok=(0, 1))
            report_wall, rss_report, _ = process_runs(report, args.runs, env)
            a2, rss2, _ = process_runs(doctor, (args.runs + 1) // 2, env)
            figures[form] = ((a1 + a2) / 2, max(rss_doctor, rss2), diff_wall, rss_diff, report_wall, rss_report,
                             page.stat().st_size)
    except subprocess.CalledProcessError as exc:
        print(f"bench_offline: {exc}", file=sys.stderr)
        return 1
    finally:
        sizes = {p.name: p.stat().st_size for p in work.glob("*.tar.gz")}
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pycache, ignore_errors=True)

    d = json.loads(diff_out)
    doc = json.loads(doc_out)
    print(f"bundles: {links} netdevs each ({RAILS} rails x {VFS} representors + uplinks, lo, eno1), "
          f"{sizes.get('before.tar.gz', 0) / 1048576:.1f} / {sizes.get('after.tar.gz', 0) / 1048576:.1f} MiB "
          f"tar.gz, built in {setup_s:.1f} s; median of {args.runs} runs; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus")
    ok = True
    out: dict[str, object] = {"links": links, "runs": args.runs}
    for form, (anchor, rss_doctor, diff_wall, rss_diff, report_wall, rss_report, page_bytes) in figures.items():
        ratio = diff_wall / anchor
        verdict = "ok" if ratio <= TARGET_DIFF else "OVER TARGET"
        ok = ok and ratio <= TARGET_DIFF
        print(f"[{form}]")
        print(f"anchor  railscope doctor --from BEFORE --json   {anchor * 1000:8.1f} ms  1.00x  "
              f"peak RSS {rss_doctor / 1024:.1f} MiB")
        print(f"diff    railscope diff BEFORE AFTER --json      {diff_wall * 1000:8.1f} ms  {ratio:4.2f}x  "
              f"peak RSS {rss_diff / 1024:.1f} MiB ({rss_diff / rss_doctor:.2f}x)  target <= {TARGET_DIFF}x: "
              f"{verdict}")
        print(f"report  railscope report BEFORE --html FILE     {report_wall * 1000:8.1f} ms  "
              f"{report_wall / anchor:4.2f}x  peak RSS {rss_report / 1024:.1f} MiB; page {page_bytes / 1024:.0f} KiB "
              f"({RECORDER_S} s recorder x {RAILS} rails)")
        out[form] = {"doctor_s": anchor, "doctor_rss_kib": rss_doctor, "diff_s": diff_wall, "diff_rss_kib": rss_diff,
                     "report_s": report_wall, "report_rss_kib": rss_report, "page_bytes": page_bytes,
                     "ratio_diff": ratio}
    print(f"diff saw {len(d['regressions'])} regression(s), {len(d['changes'])} change(s), "
          f"{len(d['counters'])} counters; doctor saw {len(doc['rails'])} rails, {len(doc['findings'])} findings")
    if args.json:
        print(json.dumps(out))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
