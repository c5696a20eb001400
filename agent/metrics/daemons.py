"""The daemons a rail depends on (OVS, the SR-IOV config daemon, the device plugins, the driver
container): processes, restarts, CPU, memory, start time."""

from __future__ import annotations

from typing import Any

from agent.metrics.families import Families, Scrape, Subject

__all__ = ["SUBJECT", "render"]


def render(fams: Families, scrape: Scrape) -> None:
    """One series per daemon (a handful a node), the sums over its processes."""
    state = scrape.state
    snap = state.snapshot
    if snap is None:
        return
    by: dict[str, list[Any]] = {}
    for p in snap.processes:
        by.setdefault(p.daemon, []).append(p)
    for daemon in sorted(set(by) | set(state.daemon_restarts)):
        procs = by.get(daemon, [])
        lab = (daemon,)
        fams.gauge("railscope_daemon_processes", "Processes of this daemon running now (0: it is not).",
                   ("daemon",), lab, len(procs))
        fams.counter("railscope_daemon_restarts",
                     "Restarts of this daemon seen since the agent started (a process replaced by another).",
                     ("daemon",), lab, state.daemon_restarts.get(daemon, 0))
        if not procs:
            continue
        cpu = [p.cpu_seconds for p in procs if p.cpu_seconds is not None]
        if cpu:
            fams.counter("railscope_daemon_cpu_seconds",
                         "User and system CPU of this daemon's processes (rate() is cores busy; a restart resets it).",
                         ("daemon",), lab, sum(cpu))
        rss = [p.rss_bytes for p in procs if p.rss_bytes is not None]
        if rss:
            fams.gauge("railscope_daemon_resident_memory_bytes", "Resident memory of this daemon's processes.",
                       ("daemon",), lab, sum(rss))
        starts = [p.start_time for p in procs if p.start_time is not None]
        if starts:
            fams.gauge("railscope_daemon_start_time_seconds",
                       "When this daemon's newest process started (unix seconds).", ("daemon",), lab, max(starts))


SUBJECT = Subject(30, render)
