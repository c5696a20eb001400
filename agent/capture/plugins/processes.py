"""processes: the daemons a rail depends on, for people — each process of the ``processes`` source's
table with its command line *redacted* (the program, and option names without their values: a
daemon's flags carry tokens and endpoints) and, for a daemon with several threads, its busiest
threads by CPU (``ovs-vswitchd``'s handler and revalidator threads spin when hardware offload
fails). Environments are never read. The figures the readers judge are recorded by *replay*
(``/proc/<pid>/stat`` and ``status``); this file is for the engineer.
"""

from __future__ import annotations

import os
import time

from agent.capture.context import CaptureContext
from agent.capture.plugin import Generated, Plugin
from agent.readers.processes import USER_HZ, parse_stat

#: threads listed per process, busiest first
TOP_THREADS = 10


def redact_cmdline(raw: bytes) -> str:
    """The program's base name and the option names; every value replaced by ``…``.

    argv[0] is the program up to its first space: a process may write its whole command line
    there (setproctitle). A short option keeps its letter only: ``-pSECRET`` is ``-p`` glued to its
    value (getopt(3)), so what follows the letter goes the way of any value.

    >>> redact_cmdline(b"/usr/sbin/ovs-vswitchd\\0unix:/var/run/openvswitch/db.sock\\0--pidfile=/run/x.pid\\0-vconsole:emer\\0")
    'ovs-vswitchd … --pidfile=… -v…'
    >>> redact_cmdline(b"sriov-network-config-daemon\\0start\\0--token\\0s3cr3t\\0")
    'sriov-network-config-daemon … --token …'
    >>> redact_cmdline(b"/usr/bin/mysqld --password=hunter2 -u root\\0-phunter2\\0-v\\0")
    'mysqld -p… -v'
    """
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    if not args:
        return "(no command line)"
    out = [os.path.basename(args[0].split(None, 1)[0] if args[0].strip() else "")[:64] or "…"]
    for a in args[1:]:
        if a.startswith("--"):
            name, eq, _value = a.partition("=")
            out.append(name[:64] + ("=…" if eq else ""))
        elif a.startswith("-") and len(a) > 1:
            out.append(a[:2] + ("…" if len(a) > 2 else ""))
        else:
            out.append("…")
    return " ".join(out)


def _threads(ctx: CaptureContext, pid: int) -> list[str]:
    rows = []
    for tid in (ctx.host.listdir(f"/proc/{pid}/task") or ())[:4096]:
        st = parse_stat(ctx.host.read_text(f"/proc/{pid}/task/{tid}/stat", 4096) or "")
        if st is not None:
            rows.append(((int(st["utime"]) + int(st["stime"])) / USER_HZ, tid, str(st["name"])))  # type: ignore[call-overload]
    rows.sort(reverse=True)
    return [f"    thread {tid:>8}  {name:<16} cpu {cpu:10.2f} s" for cpu, tid, name in rows[:TOP_THREADS]]


def _daemons(ctx: CaptureContext) -> bytes:
    snap = ctx.snapshot
    procs = snap.processes if snap is not None else ()
    if not procs:
        return b"no process of the daemons a rail depends on is running\n"
    lines = [f"{'DAEMON':<20} {'PID':>8} {'PPID':>8} S {'STARTED (UTC)':<20} {'CPU s':>10} {'RSS MiB':>9} {'THR':>4}  COMMAND"]
    for p in procs:
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.start_time)) if p.start_time else "?"
        raw = ctx.host.read_bytes(f"/proc/{p.pid}/cmdline", 64 << 10) if ctx.host.live else None
        cmd = redact_cmdline(raw) if raw is not None else "(not recorded)"
        lines.append(f"{p.daemon:<20} {p.pid:>8} {p.ppid if p.ppid is not None else '?':>8} {p.state or '?'} "
                     f"{started:<20} {p.cpu_seconds if p.cpu_seconds is not None else float('nan'):>10.2f} "
                     f"{(p.rss_bytes or 0) / (1 << 20):>9.1f} {p.threads or 0:>4}  {cmd}")
        if ctx.host.live and (p.threads or 0) > 1:
            lines += _threads(ctx, p.pid)
    return ("\n".join(lines) + "\n").encode()


PLUGIN = Plugin("processes", 1, (
    Generated("processes/daemons.txt", _daemons),
), "the rail daemons' processes: redacted command lines, CPU, RSS, busiest threads")
