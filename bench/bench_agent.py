"""Agent daemon benchmark: ``railscope agent`` against node_exporter on the same big namespace.

Builds a network namespace with 2,050 veth netdevs (1,025 pairs, 8 of them named ``net_rail0..7``
with their peers ``peer0..7`` in the same namespace, so a peer set down drops that rail's carrier),
then prints, side by side in one run:

- CPU per full sample: the agent's every source (rules, links + rail statistics + PCI + versions,
  devlink, rdma, rail counters, PCIe, thermal, optics, processes), topology, diagnosis and one render
  of ``/metrics``, measured with
  ``getrusage`` in one process, the commands it runs (``ethtool``, ``devlink``, ``rdma``) included;
  against node_exporter's CPU per scrape of the same namespace
  (Debian ``prometheus-node-exporter``, collectors netdev + netclass with
  ``--collector.netclass.netlink`` and nothing else), from its ``/proc`` CPU times. Target: <= 0.5x;
  <= 1.5x with per-representor series on. veth netdevs cannot be representors (no
  ``phys_port_name``), so the representor line adds what per-representor series cost to render on
  a synthetic 8 rails x 127 VFs node (``tests/support/metrics_synth.py``) to the live sample.
  The optics source asks no module of a veth (a software netdev has no transceiver), so one
  ``ethtool -m`` pass over the rails is timed directly and stands in for it, as on a real node;
- ``/metrics`` latency p50 / p99 over 200 scrapes of a running agent (default flags) and of
  node_exporter (target: agent p99 <= 50 ms and below node_exporter's p50);
- flap-to-event latency: a rail's peer set down three times; from the third ``ip link set`` to the
  ``LinkFlapping`` event on ``/v1/events`` (target <= 1 s), once per rail;
- a soak of the running agent at the default intervals (1 s counters with the recorder on): idle CPU
  (target <= 1 % of a core) and RSS every 10 s with its trend once the recorder is full (target
  <= 80 MiB, no growth). The default soak is 3 minutes with a 1 minute recorder window (the recorder
  grows by design until its window is full); ``--soak-minutes 30`` runs the full one with the
  default 15 minute window;
- how the sample cost grows: 256, 1,024, 2,050 and 4,096 netdevs (target: linear, no worse);
- the lldp source as ``--lldp listen`` runs it on the 8 rails: the source's read per sample (in the
  full sample above, at its 30 s interval in the per-15 s figure) and the passive listener's own
  thread over 15 s of wall time, idle and at one LLDP frame per second per rail (sent from the rails'
  peers by a process of its own); the whole agent per 15 s with each (target <= 0.08x node_exporter).

Needs root (network namespaces). Every namespace is deleted on exit, failure or Ctrl-C. Run:
``python bench/bench_agent.py [--runs 9] [--soak-minutes 3] [--no-scale] [--json]``, or the soak
alone: ``python bench/bench_agent.py --soak-only --soak-minutes 30``. Exit status 0 when every
target holds, 2 when one does not, 3 without root or node_exporter.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
SCALE = (256, 1024, 2050, 4096)

# --------------------------------------------------------------------------------------------
# inside the namespace


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the data endpoints (/v1/...) need a bearer token over TCP (--data-token-file)
_TOKEN = "railscope-bench-" + os.urandom(8).hex()


def _token_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"railscope-bench-token-{os.getpid()}")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(_TOKEN + "\n")
    return path


def _get(url: str, timeout: float = 30.0) -> bytes:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {_TOKEN}"} if "/v1/" in url else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited {proc.returncode}")
        try:
            _get(url, timeout=120)  # a first scrape of 4,096 netdevs takes seconds
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} never answered")


def start_node_exporter() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         "--collector.netdev", "--collector.netclass", "--collector.netclass.netlink"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    _wait_http(url, proc)
    return proc, url


def start_agent(rails: int, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(port),
                             "--rails", str(rails), "--log-level", "warning", "--data-token-file", _token_file(), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the agent exited {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return proc, base
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the agent never became ready")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def ne_cpu_per_scrape(url: str, proc: subprocess.Popen[bytes], scrapes: int) -> dict[str, float]:
    body = b""
    for _ in range(2):
        body = _get(url)
    before = _cpu(proc.pid)
    for _ in range(scrapes):
        body = _get(url)
    cpu = (_cpu(proc.pid) - before) / scrapes
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {"cpu_s": cpu, "bytes": len(body), "series": series}


#: the scrape interval the per-scrape figure is counted over (Prometheus' usual 15 s)
SCRAPE_S = 15.0
#: the sources the degradation codes added (docs/design.md §3): the per-scrape figure is given without them too
DEGRADATION_SOURCES = ("pcie", "thermal", "optics")


def _with_children() -> float:
    """CPU seconds of this process and of the children it has reaped (the ethtool, devlink and rdma
    processes the sources run): on a node they are the agent's too, in its cgroup."""
    # getrusage, not os.times: times(2) counts in clock ticks (10 ms), coarser than one source
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def agent_sample_cpu(rails: int, runs: int) -> dict[str, Any]:
    """CPU of one full agent sample, all sources read in turn plus analysis and one render."""
    sys.path.insert(0, str(ROOT))
    from agent.analysis.diagnose import diagnose
    from agent.analysis.topology import build_topology
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.metrics.exposition import render
    from agent.metrics.state import MetricsState
    from agent.readers.common import Notes
    from agent.readers.kernel_table import load_kernel_table
    from agent.readers.sources import SOURCES, Context, after, compose

    exp = Expectations(rails=rails)
    # the lldp source as --lldp listen reads it (its listener's own thread is measured by lldp_cost)
    cfg = ReadConfig(lldp="listen")
    table = load_kernel_table(None)
    host = LiveHost()

    by_source: dict[str, list[float]] = {}

    def once() -> tuple[float, float, bytes, int]:
        t0 = _with_children()
        ctx = Context(recorder=True)
        parts = {}
        for src in SOURCES:
            ts = _with_children()
            parts[src.name] = src.read(host, cfg, ctx, Notes())
            by_source.setdefault(src.name, []).append(_with_children() - ts)
            ctx = after(ctx, parts[src.name])
        ts = _with_children()
        snap = compose(None, parts)
        topo = build_topology(snap, exp)
        diag = diagnose(snap, exp, topology=topo, kernel_table=table)
        t1 = _with_children()
        by_source.setdefault("(analysis)", []).append(t1 - ts)
        body = render(MetricsState(snapshot=snap, topology=topo, diagnosis=diag))
        t2 = _with_children()
        return t2 - t0, t2 - t1, body, len(snap.links)

    once()
    by_source.clear()
    full, rend = [], []
    body, links = b"", 0
    for _ in range(runs):
        f, r, body, links = once()
        full.append(f)
        rend.append(r)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    # The optics source asks no module of a software netdev, and every rail here is a veth: the source
    # costs nothing in this namespace. A node with real rails pays one ethtool -m per rail, so the
    # pass is timed over the rails directly (read_optics, as bench_optics.py does: 8 processes and
    # their netlink round trips, the floor of a pass; on mlx5 the firmware's MCIA reads and the parse
    # of a real module's answer come on top) and stands in for the source.
    from agent.readers.optics import read_optics
    rail_names = [f"net_rail{i}" for i in range(rails)]
    read_optics(host, rail_names, cfg.command_timeout_s, Notes())
    optics_pass = []
    for _ in range(runs):
        ts = _with_children()
        read_optics(host, rail_names, cfg.command_timeout_s, Notes())
        optics_pass.append(_with_children() - ts)
    by_source["optics"] = optics_pass
    # What a node pays between two scrapes (15 s) at the default intervals: each source as often as
    # it runs in that time (the counters 15 times, a once-a-minute source a quarter), the analysis and
    # one render once. A full sample weighs every source alike; the daemon does not.
    every = {src.name: src.interval_s for src in SOURCES}
    per_source = {name: statistics.median(v) for name, v in by_source.items()}
    weight = {name: (SCRAPE_S / every[name] if name in every else 1.0) for name in per_source}
    per_scrape = {name: per_source[name] * weight[name] for name in per_source}
    per_scrape["(render)"] = statistics.median(rend)
    # the full sample with the pass in it too (a real node's first sample reads every module)
    full = [f + statistics.median(optics_pass) for f in full]
    return {"cpu_s": statistics.median(full), "render_cpu_s": statistics.median(rend), "bytes": len(body),
            "series": series, "links": links, "per_source_s": per_source, "per_scrape_s": per_scrape}


#: one LLDP frame per second on each rail's peer, as a switch with a 1 s transmit interval sends (IEEE
#: 802.1AB's fastest msgTxInterval), from a process of its own: the agent's side alone is measured
_LLDP_SENDER = r"""
import socket, struct, sys, time
def tlv(t, v): return struct.pack("!H", (t << 9) | len(v)) + v
socks = []
for i in range(int(sys.argv[1])):
    src = bytes.fromhex("020000aabb%02x" % i)
    body = (tlv(1, b"\x04" + src) + tlv(2, b"\x05swp%d" % (i + 1)) + tlv(3, struct.pack("!H", 120))
            + tlv(4, b"Eth1/%d" % (i + 1)) + tlv(5, b"leaf-bench") + tlv(127, bytes.fromhex("00120f04") + struct.pack("!H", 9216))
            + tlv(127, bytes.fromhex("0080c20b") + bytes([0x08, 1 << 3])) + tlv(0, b""))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("peer%d" % i, 0))
    socks.append((s, bytes.fromhex("0180c200000e") + src + b"\x88\xcc" + body))
print("ready", flush=True)
t = time.monotonic()
while True:
    for s, frame in socks:
        s.send(frame)
    t += 1.0
    time.sleep(max(0.0, t - time.monotonic()))
"""


def _thread_cpu(tid: int) -> float:
    """CPU seconds of one thread of this process: its run time in nanoseconds from
    ``/proc/self/task/<tid>/schedstat`` (the stat file's clock ticks, 10 ms, are too coarse for a
    thread that wakes a few times a second), else user + system from ``stat``."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lldp_cost(rails: int, runs: int, window_s: float = SCRAPE_S) -> dict[str, Any]:
    """The lldp source in listen mode (``--lldp listen``) on ``rails`` rails: the passive listener's
    thread over ``window_s`` of wall time, idle and with one frame per second per rail, and the source's
    read per sample (the rails' last frames decoded) once frames are there."""
    sys.path.insert(0, str(ROOT))
    from agent.config import ReadConfig
    from agent.host.live import LiveHost
    from agent.readers.common import Notes
    from agent.readers.lldp import read_lldp_part
    from agent.readers.sources import Context

    host = LiveHost()
    names = tuple(f"net_rail{i}" for i in range(rails))
    cfg = ReadConfig(lldp="listen")
    ctx = Context(rails=names)
    read_lldp_part(host, cfg, ctx, Notes())  # starts the listener on the rails
    import threading

    (thread,) = [t for t in threading.enumerate() if t.name == "railscope-lldp"]
    tid = thread.native_id
    assert tid is not None

    def over_window() -> float:
        c0 = _thread_cpu(tid)
        time.sleep(window_s)
        return _thread_cpu(tid) - c0

    idle = over_window()
    sender = subprocess.Popen([sys.executable, "-c", _LLDP_SENDER, str(rails)], stdout=subprocess.PIPE)
    try:
        assert sender.stdout is not None and sender.stdout.readline().strip() == b"ready"
        time.sleep(2.5)  # a frame on every rail before the window
        from agent.host.lldp import listener

        before = {k: f.count for k, f in listener().frames().items()}
        busy = over_window()
        after = {k: f.count for k, f in listener().frames().items()}
        reads, got = [], 0
        for _ in range(runs):
            t = _with_children()
            p = read_lldp_part(host, cfg, ctx, Notes())
            reads.append(_with_children() - t)
            got = len(p.fields["lldp"])
    finally:
        sender.kill()
        sender.wait()
    frames = sum(after.get(k, 0) - before.get(k, 0) for k in names)
    return {"window_s": window_s, "listener_idle_cpu_s": idle, "listener_busy_cpu_s": busy,
            "frames": frames, "frames_per_s": frames / window_s, "read_cpu_s": statistics.median(reads),
            "neighbours": got, "rails": rails}


def representor_render_extra(runs: int) -> dict[str, float]:
    """Extra render CPU of per-representor series on a synthetic 8 rails x 127 VFs node."""
    sys.path.insert(0, str(ROOT))
    from agent.analysis.diagnose import diagnose
    from agent.analysis.topology import build_topology
    from agent.config import Expectations
    from agent.metrics.exposition import render
    from agent.metrics.state import MetricsState
    from agent.readers.kernel_table import load_kernel_table
    from tests.support.metrics_synth import synthetic_snapshot

    snap = synthetic_snapshot(8, 127)
    exp = Expectations()
    topo = build_topology(snap, exp)
    state = MetricsState(snapshot=snap, topology=topo,
                         diagnosis=diagnose(snap, exp, topology=topo, kernel_table=load_kernel_table()))

    def cpu(include: str | None) -> tuple[float, int]:
        times, n = [], 0
        for _ in range(runs):
            t = time.process_time()
            body = render(state, representor_include=include)
            times.append(time.process_time() - t)
            n = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return statistics.median(times), n

    base, n0 = cpu(None)
    reps, n1 = cpu(".*")
    return {"extra_cpu_s": max(0.0, reps - base), "series_default": n0, "series_reps": n1}


def latency(url: str, scrapes: int) -> dict[str, float]:
    times = []
    for _ in range(3):
        _get(url)
    for _ in range(scrapes):
        t = time.perf_counter()
        _get(url)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"p50_s": times[len(times) // 2], "p99_s": times[min(len(times) - 1, int(len(times) * 0.99))],
            "max_s": times[-1]}


def flap_latency(base: str, rails: int) -> list[float]:
    """Per rail: 3 carrier losses; seconds from the third ``ip link set down`` to the event."""
    out = []
    for r in range(rails):
        for n in range(3):
            subprocess.run(["ip", "link", "set", f"peer{r}", "down"], check=True)
            t_loss = time.time()
            if n == 2:
                break
            time.sleep(0.3)
            subprocess.run(["ip", "link", "set", f"peer{r}", "up"], check=True)
            time.sleep(0.3)
        deadline = time.time() + 10
        seen = None
        while time.time() < deadline:
            evs = json.loads(_get(base + "/v1/events"))["events"]
            if any(e["code"] == "LinkFlapping" and e["subject"] == f"net_rail{r}" for e in evs):
                seen = time.time()
                break
            time.sleep(0.01)
        subprocess.run(["ip", "link", "set", f"peer{r}", "up"], check=True)
        out.append((seen - t_loss) if seen else float("inf"))
    return out


def soak(proc: subprocess.Popen[bytes], minutes: float, full_after_s: float) -> dict[str, object]:
    """Idle CPU over the whole soak; RSS every 10 s, and its trend once the recorder is full
    (``full_after_s`` after the soak starts)."""
    pid = proc.pid
    time.sleep(20)  # past start-up: first samples, imports, the first devlink / rdma reads
    t0, c0 = time.monotonic(), _cpu(pid)
    rss = []
    end = t0 + minutes * 60
    while time.monotonic() < end:
        rss.append((time.monotonic() - t0, _rss(pid)))
        time.sleep(10)
    rss.append((time.monotonic() - t0, _rss(pid)))
    wall = time.monotonic() - t0
    cpu = _cpu(pid) - c0
    half = [p for p in rss if p[0] >= full_after_s] or rss
    xs, ys = [p[0] for p in half], [p[1] for p in half]
    slope = statistics.linear_regression(xs, ys).slope if len(half) >= 2 else 0.0
    return {"idle_cpu_pct": 100 * cpu / wall, "rss_first": rss[0][1], "rss_last": rss[-1][1],
            "rss_max": max(v for _, v in rss), "rss_slope_mib_per_h": slope * 3600 / 2**20, "minutes": wall / 60,
            "rss_trend": [round(v / 2**20, 1) for _, v in rss]}


def soak_recorder_window(minutes: float) -> float:
    """The flight recorder grows by design until its window is full (15 min by default): a soak
    shorter than 30 min runs it with a window of a third of the soak, so that the last two thirds
    show whether memory is flat once every bound is reached; 30 min and more use the default."""
    return 15.0 if minutes >= 30 else minutes / 3


def inside(args: argparse.Namespace) -> dict[str, object]:
    """Every measurement of one namespace, run inside it."""
    res: dict[str, object] = {}
    if args.phase == "lldp":
        res["lldp"] = lldp_cost(args.rails, args.runs, args.lldp_window)
        return res
    if args.phase == "soak":
        window = soak_recorder_window(args.soak_minutes)
        agent, _base = start_agent(args.rails, "--recorder-window", f"{window * 60:.0f}s")
        try:
            res["soak"] = {**soak(agent, args.soak_minutes, window * 60), "recorder_window_min": window}
        finally:
            stop(agent)
        return res
    res["agent"] = agent_sample_cpu(args.rails, args.runs)
    ne, ne_url = start_node_exporter()
    try:
        res["node_exporter"] = ne_cpu_per_scrape(ne_url, ne, max(3, args.runs))
        if args.phase == "full":
            res["node_exporter_latency"] = latency(ne_url, args.scrapes)
    finally:
        stop(ne)
    if args.phase != "full":
        return res
    res["representors"] = representor_render_extra(args.runs)
    res["lldp"] = lldp_cost(args.rails, args.runs, args.lldp_window)
    agent, base = start_agent(args.rails)
    try:
        res["agent_latency"] = latency(base + "/metrics", args.scrapes)
        res["flap_s"] = flap_latency(base, args.rails)
    finally:
        stop(agent)
    return res


# --------------------------------------------------------------------------------------------
# outside: build the namespace, run the measurements in it, print


def ip(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(["ip", *argv], input=stdin, text=True, check=True, capture_output=True, timeout=600)


def build(ns: str, netdevs: int, rails: int) -> None:
    pairs = (netdevs + 1) // 2
    ip("netns", "add", ns)
    lines = ["link set lo up"]
    names = []
    for i in range(pairs):
        a = f"net_rail{i}" if i < rails else f"eth{i}"
        names += [a, f"peer{i}"]
        lines.append(f"link add {a} type veth peer name peer{i}")
    lines += [f"link set {n} up" for n in names]
    ip("-n", ns, "-force", "-batch", "-", stdin="\n".join(lines) + "\n")


def measure(netdevs: int, args: argparse.Namespace, phase: str) -> dict[str, object]:
    ns = f"rs-bench-{uuid.uuid4().hex[:8]}"
    try:
        t = time.perf_counter()
        build(ns, netdevs, args.rails)
        built = time.perf_counter() - t
        argv = ["ip", "netns", "exec", ns, sys.executable, str(Path(__file__).resolve()), "--inside", phase,
                "--rails", str(args.rails), "--runs", str(args.runs), "--scrapes", str(args.scrapes),
                "--soak-minutes", str(args.soak_minutes), "--lldp-window", str(args.lldp_window)]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                              timeout=3600 + args.soak_minutes * 60)
        if proc.returncode != 0:
            raise SystemExit(f"measurement in {ns} failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["netdevs"] = netdevs
        res["built_s"] = built
        return res
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _ms(s: float) -> str:
    return f"{s * 1000:8.1f} ms"


def report(main: dict) -> bool:
    ok = True
    a, ne = main["agent"], main["node_exporter"]
    ratio = a["cpu_s"] / ne["cpu_s"]
    reps = main["representors"]
    ratio_reps = (a["cpu_s"] + reps["extra_cpu_s"]) / ne["cpu_s"]
    print(f"namespace: {a['links']} links ({main['netdevs']} veth netdevs, 8 rails), built in {main['built_s']:.2f} s; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print(f"anchor   node_exporter CPU per scrape (netdev+netclass netlink) {_ms(ne['cpu_s'])}  1.00x  "
          f"{ne['bytes'] / 2**20:.2f} MiB, {ne['series']} series")
    good = ratio <= 0.5
    ok &= good
    print(f"agent    CPU per full sample (+1 render)                      {_ms(a['cpu_s'])}  {ratio:.2f}x  "
          f"target <= 0.5x: {'ok' if good else 'MISSED'}  ({_ms(a['render_cpu_s']).strip()} of it the render; "
          f"{a['bytes'] / 2**10:.0f} KiB, {a['series']} series)")
    per = a.get("per_scrape_s")
    if per:
        total = sum(per.values())
        without = total - sum(per.get(n, 0.0) for n in DEGRADATION_SOURCES)
        top = ", ".join(f"{n} {v * 1000:.1f}" for n, v in sorted(per.items(), key=lambda kv: -kv[1])[:5])
        print(f"agent    CPU per {SCRAPE_S:.0f} s at the default intervals          {_ms(total)}  "
              f"{total / ne['cpu_s']:.2f}x  (ms: {top})")
        print(f"         without the degradation sources ({', '.join(DEGRADATION_SOURCES)})   {_ms(without)}  "
              f"{without / ne['cpu_s']:.2f}x  they add {100 * (total / without - 1):+.1f} %")
    lldp = main.get("lldp")
    if per and lldp:
        w = SCRAPE_S / lldp["window_s"]
        idle, busy = lldp["listener_idle_cpu_s"] * w, lldp["listener_busy_cpu_s"] * w
        lldp_read = per.get("lldp", 0.0)
        print(f"lldp     --lldp listen on {lldp['rails']} rails: the source's read {_ms(lldp['read_cpu_s']).strip()} a sample "
              f"({lldp['neighbours']} neighbours), {_ms(lldp_read).strip()} per {SCRAPE_S:.0f} s; the listener's thread per "
              f"{SCRAPE_S:.0f} s: idle {_ms(idle).strip()}, at {lldp['frames_per_s']:.1f} frames/s "
              f"{_ms(busy).strip()}")
        for what, extra in (("listener idle", idle), (f"{lldp['frames_per_s'] / lldp['rails']:.1f} frame/s a rail", busy)):
            whole = total + extra
            good = whole / ne["cpu_s"] <= 0.08
            ok &= good
            print(f"agent    whole agent per {SCRAPE_S:.0f} s with lldp listen, {what:<18} {_ms(whole)}  "
                  f"{whole / ne['cpu_s']:.3f}x  target <= 0.08x: {'ok' if good else 'MISSED'}  "
                  f"(lldp {100 * (lldp_read + extra) / whole:.1f} % of it)")
    good = ratio_reps <= 1.5
    ok &= good
    print(f"agent    + per-representor series (8x127 synthetic render)     {_ms(a['cpu_s'] + reps['extra_cpu_s'])}  "
          f"{ratio_reps:.2f}x  target <= 1.5x: {'ok' if good else 'MISSED'}  "
          f"(series {reps['series_default']} -> {reps['series_reps']})")
    al, nl = main["agent_latency"], main["node_exporter_latency"]
    good = al["p99_s"] <= 0.050 and al["p99_s"] < nl["p50_s"]
    ok &= good
    print(f"latency  /metrics over {main.get('scrapes', 200)} scrapes: agent p50 {_ms(al['p50_s']).strip()} "
          f"p99 {_ms(al['p99_s']).strip()}; node_exporter p50 {_ms(nl['p50_s']).strip()} "
          f"p99 {_ms(nl['p99_s']).strip()}  target p99 <= 50 ms and < node_exporter p50: "
          f"{'ok' if good else 'MISSED'}")
    flaps = main["flap_s"]
    good = max(flaps) <= 1.0
    ok &= good
    print(f"flap     third carrier loss -> LinkFlapping on /v1/events: median {_ms(statistics.median(flaps)).strip()}, "
          f"max {_ms(max(flaps)).strip()} over {len(flaps)} rails  target <= 1 s: {'ok' if good else 'MISSED'}")
    return ok


def report_soak(s: dict) -> bool:
    ok = True
    if s:
        good_cpu = s["idle_cpu_pct"] <= 1.0
        good_rss = s["rss_max"] <= 80 * 2**20 and s["rss_slope_mib_per_h"] < 5.0
        ok &= good_cpu and good_rss
        print(f"soak     {s['minutes']:.1f} min at default intervals (recorder window "
              f"{s['recorder_window_min']:.1f} min): idle CPU {s['idle_cpu_pct']:.2f} % of a core  "
              f"target <= 1 %: {'ok' if good_cpu else 'MISSED'}")
        print(f"         RSS {s['rss_first'] / 2**20:.1f} -> {s['rss_last'] / 2**20:.1f} MiB (max "
              f"{s['rss_max'] / 2**20:.1f}), trend once the recorder is full {s['rss_slope_mib_per_h']:+.2f} MiB/h  "
              f"target <= 80 MiB, no growth: {'ok' if good_rss else 'MISSED'}")
        print(f"         RSS every 10 s (MiB): {' '.join(str(v) for v in s['rss_trend'])}")
    return ok


def report_scale(scale: list[dict]) -> bool:
    ok = True
    if scale:
        print("scale    netdevs   agent CPU/sample   per netdev    node_exporter CPU/scrape   ratio")
        base = None
        for r in scale:
            per = r["agent"]["cpu_s"] / r["netdevs"]
            base = base or per
            print(f"         {r['netdevs']:7d}   {_ms(r['agent']['cpu_s'])}        {per * 1e6:7.1f} us  "
                  f"{_ms(r['node_exporter']['cpu_s'])}               {r['agent']['cpu_s'] / r['node_exporter']['cpu_s']:.2f}x")
        first, last = scale[0], scale[-1]
        growth = (last["agent"]["cpu_s"] / first["agent"]["cpu_s"]) / (last["netdevs"] / first["netdevs"])
        good = growth <= 1.25
        ok &= good
        print(f"         cost growth / netdev growth {first['netdevs']} -> {last['netdevs']}: {growth:.2f}  "
              f"target linear (<= 1.25): {'ok' if good else 'MISSED'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--netdevs", type=int, default=2050, help="Netdevs in the main namespace. Default: 2050.")
    ap.add_argument("--rails", type=int, default=8, help="Rails (net_rail0..N-1). Default: 8.")
    ap.add_argument("--runs", type=int, default=9, help="Runs per CPU figure (median). Default: 9.")
    ap.add_argument("--scrapes", type=int, default=200, help="Scrapes per latency figure. Default: 200.")
    ap.add_argument("--soak-minutes", type=float, default=3.0,
                    help="Soak of the running agent; 30 for the full one, 0 to skip. Default: 3.")
    ap.add_argument("--no-scale", action="store_true", help="Skip the 256 / 1,024 / 2,050 / 4,096 series.")
    ap.add_argument("--lldp-window", type=float, default=SCRAPE_S,
                    help="Seconds the LLDP listener's thread is measured over, idle and at one frame per second "
                         "per rail. Default: 15.")
    ap.add_argument("--soak-only", action="store_true", help="Run the soak alone.")
    ap.add_argument("--json", action="store_true", help="Also print one JSON line with every figure.")
    ap.add_argument("--inside", choices=("full", "scale", "soak", "lldp"), help=argparse.SUPPRESS)
    ap.add_argument("--readiness", action="store_true",
                    help="Only the readiness sources (gpus, firmware) on an 8-rail HGX-shaped tree, and preflight's "
                         "wall time next to doctor's (bench/bench_readiness.py); no root needed.")
    args = ap.parse_args()
    if args.readiness:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_readiness

        return bench_readiness.main(["--runs", str(args.runs)])
    if args.inside:
        args.phase = args.inside
        print(json.dumps(inside(args)))
        return 0
    if os.geteuid() != 0:
        print("bench_agent: needs root (network namespaces)", file=sys.stderr)
        return 3
    if not os.access(NODE_EXPORTER, os.X_OK):
        print(f"bench_agent: {NODE_EXPORTER} missing (apt-get install prometheus-node-exporter)", file=sys.stderr)
        return 3
    ok = True
    if not args.soak_only:
        main_res = measure(args.netdevs, args, "full")
        main_res["scrapes"] = args.scrapes
        ok = report(main_res)
        sys.stdout.flush()
    else:
        main_res = {}
    soak_res: dict = {}
    if args.soak_minutes > 0:
        soak_res = measure(args.netdevs, args, "soak")["soak"]
        ok = report_soak(soak_res) and ok
        sys.stdout.flush()
    scale = []
    if not args.no_scale and not args.soak_only:
        for n in SCALE:
            scale.append(main_res if n == args.netdevs else measure(n, args, "scale"))
        ok = report_scale(scale) and ok
    if args.json:
        print(json.dumps({"main": main_res, "soak": soak_res, "scale": scale}))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
