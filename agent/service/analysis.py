"""The pipeline of each new snapshot (topology, diagnosis) in the analysis lane, one run at a time:
asked again while one runs, it runs once more when that one ends, on the newest snapshot, never a
queue of them. The history it judges with is the event log's window and the flight recorder's PHY
samples within ``--ber-window``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from agent.analysis import pipeline
from agent.analysis.checks.degradation import RATE_COUNTERS
from agent.capture.recorder import FlightRecorder
from agent.config import Expectations
from agent.model import Event, Snapshot
from agent.readers.history import History, Recorder, Sample
from agent.readers.kernel_table import load_kernel_table
from agent.service.events import EventLog
from agent.service.scheduler import Lane

__all__ = ["Analysis"]

log = logging.getLogger("railscope.agent")


class Analysis:
    def __init__(self, expectations: Expectations, events: EventLog, recorder: FlightRecorder | None, *,
                 snapshot: Callable[[], Snapshot | None], apply: Callable[[pipeline.Outcome], None],
                 clock: Callable[[], float]) -> None:
        """``snapshot``: the newest snapshot (read on the event loop); ``apply`` takes each outcome there."""
        self.expectations = expectations
        self.events = events
        self.recorder = recorder
        self.clock = clock
        self._snapshot = snapshot
        self._apply = apply
        self._kernel_table = load_kernel_table(expectations.kernel_table_file)
        self.lane: Lane | None = None
        self._dirty = False
        self._running = False

    def schedule(self, spawn: Callable[[Any, str], Any]) -> None:
        """Run the analysis now, or once more after the one running (``spawn`` starts its task)."""
        if self._running:
            self._dirty = True
            return
        self._running = True
        spawn(self._loop(), "railscope-analysis")

    async def _loop(self) -> None:
        assert self.lane is not None
        try:
            while True:
                self._dirty = False
                snap = self._snapshot()
                if snap is None:
                    return
                since = self.clock() - self.expectations.event_window_s
                events = tuple(self.events.recent(since))
                try:
                    out = await self.lane.submit(partial(self.work, snap, events))
                except Exception:
                    log.exception("analysis failed")
                    return
                self._apply(out)
                if not self._dirty:
                    return
        finally:
            self._running = False

    def work(self, snap: Snapshot, events: tuple[Event, ...]) -> pipeline.Outcome:
        """One analysis (in the analysis lane's thread)."""
        # The window ends now, not at the newest event: an old event must age out even when no newer
        # one arrives (and an event newer than the last sample still counts).
        return pipeline.run(snap, self.expectations, self._kernel_table,
                            history=History(events=events, recorder=self.phy_rates()), capture_time=self.clock())

    def phy_rates(self) -> Recorder | None:
        """The flight recorder's first and last PHY sample of each rail within ``--ber-window``: the two
        samples LinkDegrading, the rising OpticsOutOfRange and PcieErrors are judged between live. Only
        the PHY counters: the other recorder checks stay with their detectors."""
        if self.recorder is None:
            return None
        edges = self.recorder.edges(self.expectations.ber_window_s, RATE_COUNTERS)
        return Recorder(tuple((nd, tuple(Sample(ts, tuple(sorted(c.items()))) for ts, c in rows))
                              for nd, rows in sorted(edges.items())))
