"""Small pure functions the detectors share: counter deltas, episodes, event records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.findings import EVENT_CODES
from agent.model import Event

__all__ = ["counter_delta", "counter_deltas", "episode_fires", "make_event"]


def counter_delta(prev: int | None, cur: int | None) -> int | None:
    """``cur - prev`` for a cumulative counter; None when either side is missing or the counter
    went down (the netdev was recreated or the driver reloaded: a reset, not negative traffic)."""
    if prev is None or cur is None or cur < prev:
        return None
    return cur - prev


def counter_deltas(names: Sequence[str], prev: Sequence[int | None] | None,
                   cur: Sequence[int | None]) -> dict[str, int]:
    """The counters of ``names`` that rose from ``prev`` to ``cur`` (same order), by how much; nothing
    without a previous sample. A counter missing on either side, or reset, is left out."""
    out: dict[str, int] = {}
    if prev is None:
        return out
    for name, old, new in zip(names, prev, cur, strict=True):
        d = counter_delta(old, new)
        if d:
            out[name] = d
    return out


def episode_fires(last_true: float | None, now: float, quiet_s: float) -> bool:
    """An episode is a run of true conditions, each within ``quiet_s`` of the one before.

    Only its first condition fires; the detector re-arms once the condition has stayed false for
    ``quiet_s``, so a storm that lasts an hour is one event, not 3,600.
    """
    return last_true is None or now - last_true >= quiet_s


def make_event(now: float, code: str, subject: str, message: str, evidence: Mapping[str, Any],
               severity: str | None = None) -> Event:
    return Event(ts=now, code=code, severity=severity or EVENT_CODES[code], subject=subject,
                 message=message, evidence=tuple(evidence.items()))
