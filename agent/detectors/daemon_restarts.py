"""Restarts of the daemons a rail depends on, counted across samples of the ``processes`` source.

A restart is a process of a daemon gone and another of the same daemon there instead (a new pid, or
the same pid with another start time) since the last sample in which the daemon had processes: a
daemon that crashed and is back one sample later is one restart, a daemon that forks one more
worker is none. A config daemon in a restart loop shows as ``railscope_daemon_restarts_total``
rising; the alert rules make that an incident of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.model import DaemonProcess

__all__ = ["RestartState", "step"]


@dataclass(frozen=True, slots=True)
class RestartState:
    #: daemon -> its processes (pid, start time) in the last sample that had any
    last: Mapping[str, frozenset[tuple[int, float | None]]] = field(default_factory=dict)
    #: daemon -> restarts counted since the agent started
    restarts: Mapping[str, int] = field(default_factory=dict)


def step(state: RestartState, processes: Iterable[DaemonProcess]) -> RestartState:
    """The state after one sample of the daemons' processes."""
    now: dict[str, set[tuple[int, float | None]]] = {}
    for p in processes:
        now.setdefault(p.daemon, set()).add((p.pid, p.start_time))
    last = dict(state.last)
    restarts = dict(state.restarts)
    for daemon, cur in now.items():
        before = last.get(daemon)
        if before is not None:
            replaced = min(len(cur - before), len(before - cur))
            if replaced:
                restarts[daemon] = restarts.get(daemon, 0) + replaced
        restarts.setdefault(daemon, 0)
        last[daemon] = frozenset(cur)
    return RestartState(last, restarts)
