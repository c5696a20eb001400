"""The detectors over time, as the daemon feeds them: observations of the links, configuration and
counters (``agent.detectors.engine``), the rate findings' degradation events, and the restarts of the
node's daemons. Pure state in, events out: the daemon logs, counts and captures on what comes back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.config import Thresholds
from agent.detectors import daemon_restarts, engine
from agent.detectors import degradation as degradation_events
from agent.findings import Finding
from agent.model import Event

__all__ = ["Detection"]


class Detection:
    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self.state = engine.initial(thresholds)
        self.degradation = degradation_events.initial()
        self.restarts = daemon_restarts.RestartState()

    def feed(self, observations: Iterable[Any], now: float) -> list[Event]:
        """Each observation through the detectors; the events they raise, in order."""
        out: list[Event] = []
        for ob in observations:
            self.state, events = engine.step(self.state, ob, now)
            out.extend(events)
        return out

    def on_findings(self, findings: Iterable[Finding], now: float) -> list[Event]:
        """A new diagnosis: the degradation events of its rate findings."""
        self.degradation, events = degradation_events.step(self.degradation, tuple(findings), now)
        return list(events)

    def on_restarts(self, seen: Any) -> None:
        """The node daemons' restart counts of a new read."""
        self.restarts = daemon_restarts.step(self.restarts, seen)
