"""Scheduling the registry's sources off the scrape path: one worker thread per source, driven from
the event loop.

``Scheduler`` makes one ``SourceTimer`` per source of ``agent/readers/sources.py`` that is not
disabled, at the interval the settings give it (else the registry's default). Each source runs a blocking read (netlink dump, devlink commands, sysfs, ethtool ioctls) in its own
daemon thread, at its own interval. A source still running after its deadline is marked *hung*:
it is reported (``railscope_source_hung``), the scrape keeps serving its last good value, and no
second copy of it is started while the first is stuck — a task stuck in the driver cannot be
killed, so retrying would only pile up stuck threads. Threads are daemon threads so that a read
stuck in the kernel never blocks the agent's exit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.readers.sources import Source

__all__ = ["Lane", "Scheduler", "SourceState", "SourceTimer"]

log = logging.getLogger("railscope.agent.sources")


class Lane:
    """One daemon thread that runs submitted callables in order and resolves asyncio futures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"railscope-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, fut, loop = job
            try:
                res, exc = fn(), None
            except BaseException as err:  # handed to the awaiting coroutine, which logs it
                res, exc = None, err
            try:
                loop.call_soon_threadsafe(_resolve, fut, res, exc)
            except RuntimeError:
                return  # the loop is closed: the agent stopped while this read was running

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((fn, fut, loop))
        return fut

    def close(self) -> None:
        self._jobs.put(None)


def _resolve(fut: asyncio.Future[Any], res: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(res)


@dataclass
class SourceState:
    """What the agent knows about one source's runs (for metrics and /readyz)."""

    name: str
    interval_s: float
    runs: int = 0
    failures: int = 0
    #: ticks skipped because the previous run was still going
    skipped: int = 0
    last_ok: float | None = None  # unix seconds of the last completed run
    last_duration_s: float | None = None
    last_success: bool | None = None
    last_error: str | None = None
    running_since: float | None = None  # monotonic
    #: devices (netdev, devlink handle; "" for the whole source) that are hung now
    hung: set[str] = field(default_factory=set)
    #: an optional source the budget guard paused (``agent.service.budget``): no read starts, the last
    #: sample stands
    paused: bool = False


class SourceTimer:
    """Drives one source: run on its lane every ``interval_s``, or sooner when ``poke()``d."""

    def __init__(self, state: SourceState, lane: Lane, run: Callable[[], Any],
                 on_done: Callable[[Any], None], deadline_s: float,
                 current_device: Callable[[], str] | None = None) -> None:
        self.state = state
        self.lane = lane
        self._run = run
        self._on_done = on_done
        self.deadline_s = deadline_s
        self._current_device = current_device or (lambda: "")
        self._poke = asyncio.Event()
        self.first_done = asyncio.Event()
        self.stopped = False

    def poke(self) -> None:
        """Run again as soon as the current run (if any) ends: e.g. after a link event."""
        self._poke.set()

    async def drive(self) -> None:
        st = self.state
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that arrives
        # as its inner wait completes (cpython gh-86296), which would keep a stopped agent running.
        while not self.stopped:
            self._poke.clear()
            if st.paused:
                self.first_done.set()  # paused is settled: nothing waits on a read that will not start
                await self._wait(st.interval_s)
                continue
            started = time.monotonic()
            st.running_since = started
            fut = self.lane.submit(self._run)
            hung_dev: str | None = None
            try:
                try:
                    async with asyncio.timeout(self.deadline_s):
                        res = await asyncio.shield(fut)
                except TimeoutError:
                    hung_dev = self._current_device()
                    st.hung.add(hung_dev)
                    log.warning("source hung", extra={"source": st.name, "device": hung_dev,
                                                      "after_s": round(self.deadline_s, 1)})
                    res = await fut  # never start a second copy while this one is stuck
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                st.runs += 1
                st.failures += 1
                st.last_success = False
                st.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("source failed", extra={"source": st.name, "error": st.last_error})
            else:
                st.runs += 1
                st.last_success = True
                st.last_error = None
                st.last_ok = time.time()
                try:
                    self._on_done(res)
                except Exception as exc:
                    st.last_success = False
                    st.last_error = f"{type(exc).__name__}: {exc}"
                    log.exception("applying a sample failed", extra={"source": st.name})
            finally:
                st.running_since = None
                if hung_dev is not None:
                    st.hung.discard(hung_dev)  # it returned: stuck no more, whatever it gave
            st.last_duration_s = time.monotonic() - started
            self.first_done.set()
            await self._wait(self.state.interval_s - (time.monotonic() - started))

    async def _wait(self, wait: float) -> None:
        """Until the next run is due, or a poke."""
        if wait > 0:
            try:
                async with asyncio.timeout(wait):
                    await self._poke.wait()
            except TimeoutError:
                pass


class Scheduler:
    """The timers of the registry's sources; ``run(source)`` is called in the source's own thread."""

    def __init__(self, sources: tuple[Source, ...], intervals: Mapping[str, float], *,
                 run: Callable[[Source], Any], on_done: Callable[[Any], None], deadline_s: float,
                 current_device: Callable[[str], Callable[[], str]]) -> None:
        self.sources = sources
        self.states = {s.name: SourceState(s.name, intervals.get(s.name, s.interval_s)) for s in sources}
        self._run = run
        self._on_done = on_done
        self._deadline_s = deadline_s
        self._current_device = current_device
        self.lanes: dict[str, Lane] = {}
        self.timers: dict[str, SourceTimer] = {}

    def start(self) -> None:
        """Lanes and timers (not yet driven: ``drive`` each, in order, from the boot task)."""
        for src in self.sources:
            name = src.lane or src.name
            lane = self.lanes.get(name) or self.lanes.setdefault(name, Lane(name))
            self.timers[src.name] = SourceTimer(
                self.states[src.name], lane, lambda s=src: self._run(s), self._on_done,
                deadline_s=self._deadline_s, current_device=self._current_device(src.name))

    def poke(self, name: str) -> None:
        timer = self.timers.get(name)
        if timer is not None:
            timer.poke()

    def stop(self) -> None:
        for timer in self.timers.values():
            timer.stopped = True

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.close()
