"""The time a node image carries: the agent's events (``events.json``) and the flight recorder
(``recorder.jsonl``), DESIGN §4 "Time" and §6.

``events.json`` is ``{"events": [{"ts", "code", "severity", "subject", "message", "evidence"}]}``,
newest last. ``recorder.jsonl`` is one JSON object per line, ``{"ts": <unix s>, "netdev",
"counters": {<raw counter name>: <value>}}``, one line per rail per second. A damaged file never
stops a diagnosis: what can be read is used, and the reason for the rest goes to ``unavailable``.

Parsing is pure (bytes in, records out); ``load_history`` only asks the host for the two files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from agent.findings import CODES, SEVERITIES
from agent.model import Event

__all__ = ["History", "Recorder", "Sample", "capture_time_of", "load_history", "parse_events", "parse_recorder"]


@dataclass(frozen=True, slots=True)
class Sample:
    ts: float  # unix seconds
    counters: tuple[tuple[str, int], ...]

    def get(self, name: str) -> int | None:
        for k, v in self.counters:
            if k == name:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Recorder:
    """Counter samples per netdev, oldest first."""

    series: tuple[tuple[str, tuple[Sample, ...]], ...]

    def of(self, netdev: str) -> tuple[Sample, ...]:
        for name, samples in self.series:
            if name == netdev:
                return samples
        return ()

    @property
    def netdevs(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.series)


@dataclass(frozen=True, slots=True)
class History:
    events: tuple[Event, ...] = ()
    recorder: Recorder | None = None
    #: the manifest's ``ended_at`` as unix seconds; None when the image has no manifest time
    capture_time: float | None = None
    unavailable: tuple[tuple[str, str], ...] = ()


class _ImageFiles(Protocol):
    def image_file(self, name: str, max_bytes: int = ...) -> bytes | None: ...


def parse_events(data: bytes) -> tuple[tuple[Event, ...], str | None]:
    """The events of an ``events.json``, and a reason when (part of) it could not be read."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return (), f"events.json: not JSON ({exc})"
    raw = doc.get("events") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        return (), 'events.json: expected {"events": [...]}'
    out: list[Event] = []
    bad = 0
    for e in raw:
        ev = _event(e)
        if ev is None:
            bad += 1
        else:
            out.append(ev)
    out.sort(key=lambda e: e.ts)
    why = f"events.json: {bad} malformed event(s) ignored" if bad else None
    return tuple(out), why


def _event(e: Any) -> Event | None:
    if not isinstance(e, dict):
        return None
    ts, code, sev, subject = e.get("ts"), e.get("code"), e.get("severity"), e.get("subject")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(code, str) \
            or not isinstance(subject, str) or not subject:
        return None
    if sev not in SEVERITIES:
        sev = CODES.get(code)
        if sev is None:
            return None
    evidence = e.get("evidence")
    ev_items = tuple(sorted(evidence.items())) if isinstance(evidence, dict) else ()
    msg = e.get("message")
    return Event(float(ts), code, sev, subject, msg if isinstance(msg, str) else "", ev_items)


def parse_recorder(data: bytes) -> tuple[Recorder | None, str | None]:
    """Samples per netdev from ``recorder.jsonl``; malformed lines are skipped and counted."""
    series: dict[str, list[Sample]] = {}
    bad: list[int] = []
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad.append(n)
            continue
        sample = _sample(row)
        if sample is None:
            bad.append(n)
            continue
        series.setdefault(row["netdev"], []).append(sample)
    why = None
    if bad:
        why = f"recorder.jsonl: {len(bad)} malformed line(s) ignored (first: line {bad[0]})"
    if not series:
        return None, why or "recorder.jsonl: no samples"
    return Recorder(tuple((k, tuple(sorted(v, key=lambda s: s.ts))) for k, v in sorted(series.items()))), why


def _sample(row: Any) -> Sample | None:
    if not isinstance(row, dict):
        return None
    ts, netdev, counters = row.get("ts"), row.get("netdev"), row.get("counters")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(netdev, str) \
            or not isinstance(counters, dict):
        return None
    vals = tuple((str(k).strip(), int(v)) for k, v in counters.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool))
    return Sample(float(ts), vals)


def capture_time_of(manifest: dict[str, Any] | None) -> float | None:
    """The manifest's ``ended_at`` (RFC 3339, ``Z`` or an offset) as unix seconds."""
    if not isinstance(manifest, dict):
        return None
    text = manifest.get("ended_at")
    if not isinstance(text, str):
        return None
    # Imported here: only a node image has a manifest, and datetime costs a live doctor run its import.
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


def load_history(host: Any) -> History:
    """Events, recorder and capture time of a node image; an empty History for a live host."""
    if not hasattr(host, "image_file"):
        return History()
    files: _ImageFiles = host
    unavailable: list[tuple[str, str]] = []
    events: tuple[Event, ...] = ()
    raw = files.image_file("events.json")
    if raw is not None:
        events, why = parse_events(raw)
        if why:
            unavailable.append(("events", why))
    recorder = None
    raw = files.image_file("recorder.jsonl")
    if raw is not None:
        recorder, why = parse_recorder(raw)
        if why:
            unavailable.append(("recorder", why))
    return History(events, recorder, capture_time_of(getattr(host, "manifest", None)), tuple(unavailable))
