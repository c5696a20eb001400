"""The daemon's event log: what the detectors reported, bounded, for ``events.json``, ``/v1/events``
and ``railscope_events_total{code}`` (the codes are ``agent.findings.EVENT_CODES``)."""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from agent.host.image.events import events_json
from agent.model import Event

__all__ = ["DEFAULT_MAX_EVENTS", "EventLog"]

DEFAULT_MAX_EVENTS = 1000


class EventLog:
    """A bounded, thread-safe history: the newest ``max_events`` events, oldest dropped first.

    The daemon adds from its netlink thread and reads from the event loop, hence the lock. The
    per-code counts keep counting what was dropped: they back a Prometheus counter, which must
    never go down.
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, got {max_events}")
        self._events: deque[Event] = deque(maxlen=max_events)
        self._counts: Counter[str] = Counter()
        self._dropped = 0
        self._lock = threading.Lock()

    def add(self, event: Event) -> None:
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self._dropped += 1
            self._events.append(event)
            self._counts[event.code] += 1

    def extend(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.add(ev)

    def recent(self, since: float | None = None) -> list[Event]:
        """Events with ``ts >= since`` (all when None), in the order they were added: newest last."""
        with self._lock:
            events = list(self._events)
        if since is None:
            return events
        return [ev for ev in events if ev.ts >= since]

    def counts(self) -> dict[str, int]:
        """code -> events added since start, dropped ones included (``railscope_events_total``)."""
        with self._lock:
            return dict(self._counts)

    @property
    def dropped(self) -> int:
        with self._lock:
            return self._dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def to_json(self, since: float | None = None) -> dict[str, Any]:
        """The ``events.json`` document (docs/design.md §4): ``{"events": [...]}``, newest last (by ``ts``:
        an event from the netlink thread can be added just after a newer one from a sample)."""
        events = sorted(self.recent(since), key=lambda ev: ev.ts)
        return {"events": [_jsonable(ev.as_json()) for ev in events]}

    def dumps(self, since: float | None = None) -> str:
        """The ``events.json`` text, through its one writer (``agent.host.image.events``)."""
        return events_json(self.to_json(since)["events"]).decode()


def _jsonable(obj: Any) -> Any:
    """Tuples and sets in evidence become lists; NaN / inf (a rate over zero time) become null,
    which strict JSON readers accept."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        seq = sorted(obj, key=str) if isinstance(obj, set | frozenset) else obj
        return [_jsonable(v) for v in seq]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
