"""Capture benchmark: ``railscope capture`` against Debian's ``sos report -o networking`` on the same
network namespace.

Builds a namespace with N veth netdevs (8 of them ``net_rail0..7``, the rails), then prints, for
N = 256 and 2,050, side by side in one run:

- wall time and peak RSS of ``railscope capture`` (default flags, so with the two offline counter
  samples ``--recorder-gap`` apart; and with ``--recorder-gap 0``, the capture's own work) and of
  ``sos report --batch --quiet -o networking`` (each in a fresh process; peak RSS is the largest
  process of the run, from ``RUSAGE_CHILDREN``). Target: railscope <= 0.2x sos's wall at both
  sizes, for a bundle that replays (``doctor --from``), which sos's does not;
- what sos did: its exit status, and whether its plug-in hit the timeout (its log says so);
- the bundle's compressed size;
- the daemon's in-process capture: the runner called in the measuring process with a flight
  recorder callback (as the agent does, so no offline sampling gap), its wall and CPU (the
  process's threads plus the commands it ran).

Needs root (network namespaces) and sosreport (``apt-get install sosreport``). Every namespace is
deleted on exit. Run: ``python bench/bench_capture.py [--sizes 256,2050] [--json]``. Exit status 0
when the target holds, 2 when not, 3 without root or sos.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAILS = 8
TARGET = 0.2


def _timed(argv: list[str], cwd: str, timeout: float) -> dict[str, object]:
    """Run argv in a fresh child; wall, peak RSS (largest descendant), exit status."""
    code = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "wall = time.perf_counter() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'wall_s': wall, 'rss': ru.ru_maxrss * 1024, 'cpu_s': ru.ru_utime + ru.ru_stime,\n"
        "                  'rc': p.returncode, 'stdout': p.stdout.decode()[-2000:], 'stderr': p.stderr.decode()[-2000:]}))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd,
                         timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise SystemExit(f"{argv[0]} measurement failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def inside(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    work = tempfile.mkdtemp(prefix="rs-bench-capture-")
    try:
        cap = os.path.join(work, "railscope") + "/"
        os.makedirs(cap)
        got = _timed([sys.executable, "-m", "agent.cli", "capture", "-o", cap], work, 1800)
        bundle = next(iter(glob.glob(cap + "*.tar.gz")), None)
        got["bundle_bytes"] = os.path.getsize(bundle) if bundle else None
        if bundle:
            rep = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json", "--rails", str(RAILS),
                                  "--from", bundle],
                                 capture_output=True, text=True, cwd=ROOT, timeout=600)
            rails = json.loads(rep.stdout).get("rails") or [] if rep.returncode in (0, 1, 2) else []
            got["replays"] = sorted(r.get("netdev") for r in rails) == [f"net_rail{i}" for i in range(RAILS)]
        out["railscope"] = got
        shutil.rmtree(cap)
        os.makedirs(cap)
        out["railscope_gap0"] = _timed([sys.executable, "-m", "agent.cli", "capture", "-o", cap,
                                        "--recorder-gap", "0"], work, 1800)
        if args.skip_sos:
            out["daemon"] = in_process(work)
            out["agent"] = running_daemon(work)
            return out
        sosdir = os.path.join(work, "sos")
        os.makedirs(sosdir)
        sos = _timed(["sos", "report", "--batch", "--quiet", "-o", "networking", "--tmp-dir", sosdir], work, 3600)
        tarball = next(iter(p for ext in ("xz", "gz", "bz2") for p in glob.glob(os.path.join(sosdir, f"sosreport-*.tar.{ext}"))),
                       None)
        sos["bundle_bytes"] = os.path.getsize(tarball) if tarball else None
        sos["timed_out"] = "timed out" in (sos["stdout"] + sos["stderr"]).lower()  # type: ignore[operator]
        if tarball:
            listing = subprocess.run(["tar", "taf", tarball], capture_output=True, text=True).stdout
            log = subprocess.run(["tar", "xaf", tarball, "--wildcards", "*/sos_logs/sos.log", "-O"],
                                 capture_output=True, text=True).stdout.lower()
            sos["timed_out"] = bool(sos["timed_out"]) or "timed out" in log
            sos["commands"] = listing.count("sos_commands/networking/")
        out["sos"] = sos
        out["daemon"] = in_process(work)
        out["agent"] = running_daemon(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime: the agent's threads and the commands it waited for
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def running_daemon(work: str) -> dict[str, float]:
    """A real ``railscope agent`` in the namespace: one ``GET /v1/image`` (the whole bundle, with the
    live flight recorder and events), its wall and the agent's CPU over it."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = os.path.join(work, "token")
    with open(token, "w") as fh:
        fh.write("bench-token-0123456789\n")
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(port),
                             "--rails", str(RAILS), "--data-token-file", token], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        time.sleep(3.0)  # a few recorder samples
        req = urllib.request.Request(base + "/v1/image?reason=bench",
                                     headers={"Authorization": "Bearer bench-token-0123456789"})
        cpu0, t0 = _proc_cpu(proc.pid), time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            size = len(r.read())
        wall = time.perf_counter() - t0
        cpu = _proc_cpu(proc.pid) - cpu0
        # the samplers' own CPU over the same wall, measured right after, is the baseline to subtract
        idle0 = _proc_cpu(proc.pid)
        time.sleep(wall)
        idle = _proc_cpu(proc.pid) - idle0
        return {"wall_s": wall, "cpu_s": cpu, "idle_cpu_s": idle, "bundle_bytes": float(size)}
    finally:
        proc.terminate()
        proc.wait(30)


def in_process(work: str) -> dict[str, float]:
    """The runner as the daemon calls it: in process, with a recorder callback (no sampling gap)."""
    sys.path.insert(0, str(ROOT))
    from agent.capture.runner import CaptureParams, capture_to_file
    from agent.host.live import LiveHost

    out = os.path.join(work, "daemon") + "/"
    os.makedirs(out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, t0 = time.process_time(), time.perf_counter()
    with LiveHost() as host:
        res = capture_to_file(host, out, CaptureParams(recorder_jsonl=lambda: b""))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu0, "children_cpu_s": children,
            "bundle_bytes": float(res.bytes)}


# --------------------------------------------------------------------------------------------
# outside: build the namespace, run the measurements in it, print


def ip(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(["ip", *argv], input=stdin, text=True, check=True, capture_output=True, timeout=600)


def build(ns: str, netdevs: int) -> None:
    pairs = (netdevs + 1) // 2
    ip("netns", "add", ns)
    lines = ["link set lo up"]
    names = []
    for i in range(pairs):
        a = f"net_rail{i}" if i < RAILS else f"eth{i}"
        names += [a, f"peer{i}"]
        lines.append(f"link add {a} type veth peer name peer{i}")
    lines += [f"link set {n} up" for n in names]
    lines += [f"addr add 10.97.{i}.1/24 dev net_rail{i}" for i in range(RAILS)]
    ip("-n", ns, "-force", "-batch", "-", stdin="\n".join(lines) + "\n")


def measure(netdevs: int, skip_sos: bool = False) -> dict[str, object]:
    ns = f"rs-bcap-{uuid.uuid4().hex[:8]}"
    try:
        build(ns, netdevs)
        argv = ["ip", "netns", "exec", ns, sys.executable, str(Path(__file__).resolve()), "--inside"]
        proc = subprocess.run(argv + (["--skip-sos"] if skip_sos else []),
                              capture_output=True, text=True, cwd=ROOT, timeout=7200)
        if proc.returncode != 0:
            raise SystemExit(f"measurement in {ns} failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["netdevs"] = netdevs
        return res
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def report(results: list[dict]) -> bool:
    ok = True
    print(f"{'netdevs':>8} {'railscope':>10} {'gap 0':>8} {'sos':>9} {'ratio':>6} {'gap0 ratio':>10} "
          f"{'rss rs':>8} {'rss sos':>8} {'bundle':>9} {'sos tar':>9}  sos")
    for r in results:
        rs, rs0, sos = r["railscope"], r["railscope_gap0"], r["sos"]
        ratio = rs["wall_s"] / sos["wall_s"]
        ratio0 = rs0["wall_s"] / sos["wall_s"]
        ok = ok and ratio <= TARGET
        what = f"rc {sos['rc']}, {sos.get('commands', '?')} files" + (", plug-in timed out" if sos.get("timed_out") else "")
        print(f"{r['netdevs']:>8} {rs['wall_s']:>9.2f}s {rs0['wall_s']:>7.2f}s {sos['wall_s']:>8.2f}s {ratio:>6.3f} "
              f"{ratio0:>10.3f} {rs['rss'] / 2**20:>7.1f}M {sos['rss'] / 2**20:>7.1f}M "
              f"{(rs['bundle_bytes'] or 0) / 1e3:>8.0f}k {(sos['bundle_bytes'] or 0) / 1e3:>8.0f}k  {what}")
        report_daemon(r)
        print(f"{'':>8} the capture replays with doctor --from: {rs.get('replays')}")
    print(f"target: railscope wall <= {TARGET}x sos's at every size: {'met' if ok else 'NOT met'}")
    return ok


def report_daemon(r: dict) -> None:
    d, a = r["daemon"], r["agent"]
    print(f"{r['netdevs']:>8} in-process capture: wall {d['wall_s']:.2f}s, CPU {d['cpu_s']:.2f}s in process + "
          f"{d['children_cpu_s']:.2f}s in commands, bundle {d['bundle_bytes'] / 1e3:.0f} kB")
    print(f"{'':>8} running agent, GET /v1/image: wall {a['wall_s']:.2f}s, agent CPU {a['cpu_s']:.2f}s "
          f"(its samplers alone over as long: {a['idle_cpu_s']:.2f}s), bundle {a['bundle_bytes'] / 1e3:.0f} kB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="256,2050", help="Netdev counts, comma separated. Default: 256,2050.")
    ap.add_argument("--json", action="store_true", help="Print the raw results as JSON too.")
    ap.add_argument("--skip-sos", action="store_true",
                    help="Measure railscope alone (capture, in-process and running-agent captures); no ratio.")
    args = ap.parse_args()
    if args.inside:
        print(json.dumps(inside(args)))
        return 0
    if os.geteuid() != 0:
        print("bench_capture: needs root (network namespaces)", file=sys.stderr)
        return 3
    if shutil.which("sos") is None:
        print("bench_capture: needs sosreport (apt-get install sosreport)", file=sys.stderr)
        return 3
    results = [measure(int(n), args.skip_sos) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(results, indent=1))
    if args.skip_sos:
        for r in results:
            report_daemon(r)
        return 0
    return 0 if report(results) else 2


if __name__ == "__main__":
    sys.exit(main())
