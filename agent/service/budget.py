"""The agent's budget guard: it keeps the agent inside the CPU and memory the pod was given.

Every ``interval_s`` the guard reads the agent's own CPU time and resident memory (psutil, on the
agent's own process: the pod's limits are the agent's, and a throttled or OOM-killed agent serves
nothing). When either passes ``PAUSE_AT`` of its limit (``--budget-cpu`` cores, ``--budget-rss``
bytes; the chart gives the pod's ``resources.limits``) the optional sources of the registry
(``Source.optional``: costly reads nothing depends on) are paused — their last sample stands, no read
starts — and ``railscope_source_paused{source}`` says so; they resume once both are below
``RESUME_BELOW`` of their limits, so a guard near its line does not flap. The core sources (links,
counters, devlink...) are never paused: they are what the agent is for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agent.metrics.state import BudgetStatus

__all__ = ["PAUSE_AT", "RESUME_BELOW", "BudgetGuard"]

log = logging.getLogger("railscope.agent")

#: pause the optional sources at this share of a limit ...
PAUSE_AT = 0.8
#: ... and resume them once every use is below this share
RESUME_BELOW = 0.6


class BudgetGuard:
    """``check()`` once per interval; ``pause`` / ``resume`` act on the scheduler's sources."""

    def __init__(self, *, cpu_limit: float | None, rss_limit: int | None, optional: tuple[str, ...],
                 pause: Callable[[str], None], resume: Callable[[str], None], process: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if process is None:
            import psutil

            process = psutil.Process()
        self.cpu_limit = cpu_limit
        self.rss_limit = rss_limit
        self.optional = optional
        self._pause = pause
        self._resume = resume
        self._proc = process
        self._clock = clock
        self._last: tuple[float, float] | None = None
        self.paused: tuple[str, ...] = ()
        self.pauses = 0
        self.status = BudgetStatus(cpu_limit=cpu_limit, rss_limit=rss_limit)

    def _use(self) -> tuple[float | None, int]:
        times = self._proc.cpu_times()
        cpu = float(times.user + times.system)
        now = self._clock()
        ratio = None
        if self._last is not None and now > self._last[0]:
            ratio = max(0.0, (cpu - self._last[1]) / (now - self._last[0]))
        self._last = (now, cpu)
        return ratio, int(self._proc.memory_info().rss)

    def check(self) -> BudgetStatus:
        ratio, rss = self._use()
        shares = {}
        if self.cpu_limit and ratio is not None:
            shares["cpu"] = ratio / self.cpu_limit
        if self.rss_limit:
            shares["rss"] = rss / self.rss_limit
        over = tuple(k for k, v in shares.items() if v >= PAUSE_AT)
        if over and not self.paused and self.optional:
            self.paused = self.optional
            self.pauses += 1
            for name in self.paused:
                self._pause(name)
            log.warning("budget exceeded: optional sources paused",
                        extra={"over": list(over), "paused": list(self.paused),
                               "cpu_ratio": None if ratio is None else round(ratio, 3), "rss_bytes": rss})
        elif self.paused and (ratio is not None or not self.cpu_limit) \
                and all(v < RESUME_BELOW for v in shares.values()):
            # every limited resource measured and under its line: a first look (no CPU interval yet)
            # never resumes
            for name in self.paused:
                self._resume(name)
            log.info("budget back within limits: optional sources resumed", extra={"resumed": list(self.paused)})
            self.paused = ()
        self.status = BudgetStatus(cpu_ratio=ratio, rss_bytes=rss, cpu_limit=self.cpu_limit, rss_limit=self.rss_limit,
                                   over=over, paused=self.paused, pauses=self.pauses)
        return self.status
