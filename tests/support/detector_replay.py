"""Replay recorded observation sequences through a detector's pure ``step``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent.model import Event

Step = Callable[[Any, Any, float], tuple[Any, tuple[Event, ...]]]


def replay(step: Step, state: Any, seq: Iterable[tuple[float, Any]]) -> tuple[Any, list[Event]]:
    """Feed ``(now, observation)`` pairs in order; return the final state and every event."""
    events: list[Event] = []
    for now, obs in seq:
        state, evs = step(state, obs, now)
        events.extend(evs)
    return state, events
