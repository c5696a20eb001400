"""``events.json`` of a node image (docs/design.md §4 "Time"): ``{"events": [...]}``, each event as
``agent.model.Event.as_json`` gives it, oldest first. This is its one writer (the recording host, the
capture's ``agent`` plug-in and the daemon's event log all write through it); ``agent.readers.history``
is its one parser."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["events_json"]


def events_json(events: Iterable[Mapping[str, Any]] | None) -> bytes:
    """The ``events.json`` bytes of ``events`` (none: an empty list)."""
    return (json.dumps({"events": list(events or [])}, indent=1, default=str) + "\n").encode()
