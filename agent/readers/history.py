"""The time a node image carries: the agent's events (``events.json``) and the flight recorder
(``recorder.jsonl``), docs/design.md §4 "Time" and §6. This module is the one parser of both files: the
doctor, ``railscope metrics --from``, the collector and the tests all read them through it.

``events.json`` is ``{"events": [{"ts", "code", "severity", "subject", "message", "evidence"}]}``,
newest last. ``recorder.jsonl`` is one JSON object per line, ``{"ts": <unix s>, "netdev",
"counters": {<raw counter name>: <value>}}``, one line per rail per second. A damaged file never
stops a diagnosis: what can be read is used, and the reason for the rest goes to ``unavailable``.

One set of rules for bad values in both files (an image is untrusted input, docs/design.md §2): a time that
is not a finite non-negative number, a code outside the event vocabulary, a subject or netdev that is
not a short string, a counter that is not an integer in ``[0, 2**64)`` -- each is dropped and
counted, never a traceback. JSON goes through ``agent.safejson.load_json`` (bounded nesting; no
NaN / Infinity).

Parsing is pure (bytes in, records out); ``load_history`` only asks the host for the two files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.findings import CODES, EVENT_CODES, SEVERITIES
from agent.model import Event, value_of
from agent.safejson import JSONError, load_json

if TYPE_CHECKING:
    # Types only: the checks import this module's records, and they never reach the host seam.
    from agent.host import Host
    from agent.host.image import Manifest

__all__ = [
    "EVENT_VOCABULARY",
    "History",
    "Recorder",
    "Sample",
    "capture_time_of",
    "load_history",
    "parse_events",
    "parse_recorder",
]

#: Codes an event may carry: the agent's ``EVENT_CODES`` and the finding codes (an image from another
#: agent version may carry an event of any code a check knows). Anything else is dropped, so that no
#: word from an image becomes a finding code or a metric label.
EVENT_VOCABULARY = frozenset(CODES) | frozenset(EVENT_CODES)
#: a subject, netdev or counter name longer than this is no name of a node
_MAX_NAME = 256
_MAX_MESSAGE = 4096
_MAX_EVENTS = 100_000
_MAX_LINE = 1 << 16
_U64 = 1 << 64


@dataclass(frozen=True, slots=True)
class Sample:
    ts: float  # unix seconds
    counters: tuple[tuple[str, int], ...]

    def get(self, name: str) -> int | None:
        return value_of(self.counters, name)


@dataclass(frozen=True, slots=True)
class Recorder:
    """Counter samples per netdev, oldest first."""

    series: tuple[tuple[str, tuple[Sample, ...]], ...]

    def of(self, netdev: str) -> tuple[Sample, ...]:
        return value_of(self.series, netdev) or ()

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


def _time(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    t = float(v)
    return t if math.isfinite(t) and t >= 0 else None


def _name(v: Any, limit: int = _MAX_NAME) -> str | None:
    return v if isinstance(v, str) and 0 < len(v) <= limit and v.strip() else None


def parse_events(data: bytes) -> tuple[tuple[Event, ...], str | None]:
    """The events of an ``events.json``, oldest first, and a reason when (part of) it could not be read."""
    try:
        doc = load_json(data, "events.json")
    except JSONError as exc:
        return (), str(exc)
    raw = doc.get("events") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        return (), 'events.json: expected {"events": [...]}'
    out: list[Event] = []
    bad = 0
    unknown: set[str] = set()
    for e in raw[-_MAX_EVENTS:]:
        ev = _event(e)
        if isinstance(ev, str):
            unknown.add(ev)
            bad += 1
        elif ev is None:
            bad += 1
        else:
            out.append(ev)
    out.sort(key=lambda e: e.ts)
    why = []
    if len(raw) > _MAX_EVENTS:
        why.append(f"{len(raw) - _MAX_EVENTS} oldest event(s) beyond {_MAX_EVENTS} ignored")
    if bad:
        why.append(f"{bad} malformed event(s) ignored")
    if unknown:
        why.append(f"{len(unknown)} unknown code(s)")
    return tuple(out), ("events.json: " + ", ".join(why)) if why else None


def _event(e: Any) -> Event | str | None:
    """An Event; the code (for counting) when only the code is unknown; None when malformed."""
    if not isinstance(e, dict):
        return None
    ts, code, sev, subject = _time(e.get("ts")), e.get("code"), e.get("severity"), _name(e.get("subject"))
    if ts is None or subject is None or not isinstance(code, str):
        return None
    if code not in EVENT_VOCABULARY:
        return code[:_MAX_NAME]
    if sev not in SEVERITIES:
        sev = CODES.get(code) or EVENT_CODES.get(code, "info")
    evidence = e.get("evidence")
    ev_items = tuple(sorted((k, v) for k, v in evidence.items())) if isinstance(evidence, dict) else ()
    msg = e.get("message")
    return Event(ts, code, sev, subject, msg[:_MAX_MESSAGE] if isinstance(msg, str) else "", ev_items)


def parse_recorder(data: bytes) -> tuple[Recorder | None, str | None]:
    """Samples per netdev from ``recorder.jsonl``; malformed lines are skipped and counted, and so
    are counter values that are not integers in ``[0, 2**64)`` (left out of their sample: absent
    means "not recorded", never 0)."""
    series: dict[str, list[Sample]] = {}
    bad: list[int] = []
    dropped = 0
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        row = None
        if len(line) <= _MAX_LINE:
            try:
                row = load_json(line, "recorder.jsonl")
            except JSONError:
                row = None
        got = _sample(row)
        if got is None:
            bad.append(n)
            continue
        netdev, sample, lost = got
        dropped += lost
        series.setdefault(netdev, []).append(sample)
    why = []
    if bad:
        why.append(f"{len(bad)} malformed line(s) ignored (first: line {bad[0]})")
    if dropped:
        why.append(f"{dropped} counter value(s) that are not integers in [0, 2^64) dropped")
    reason = ("recorder.jsonl: " + ", ".join(why)) if why else None
    if not series:
        return None, reason or "recorder.jsonl: no samples"
    return Recorder(tuple((k, tuple(sorted(v, key=lambda s: s.ts))) for k, v in sorted(series.items()))), reason


def _sample(row: Any) -> tuple[str, Sample, int] | None:
    if not isinstance(row, dict):
        return None
    ts, netdev, counters = _time(row.get("ts")), _name(row.get("netdev")), row.get("counters")
    if ts is None or netdev is None or not isinstance(counters, dict):
        return None
    vals = []
    lost = 0
    for k, v in counters.items():
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _U64 and len(k) <= _MAX_NAME:
            vals.append((k.strip(), v))
        else:
            lost += 1
    return netdev, Sample(ts, tuple(vals)), lost


def capture_time_of(manifest: Manifest | None) -> float | None:
    """The manifest's ``ended_at`` (RFC 3339, ``Z`` or an offset) as unix seconds."""
    return manifest.time_of("ended_at") if manifest is not None else None


def load_history(host: Host) -> History:
    """Events, recorder and capture time of a node image; an empty History for a live host."""
    image = host.image
    if image is None:
        return History()
    unavailable: list[tuple[str, str]] = []
    events: tuple[Event, ...] = ()
    raw = image.file("events.json")
    if raw is not None:
        events, why = parse_events(raw)
        if why:
            unavailable.append(("events", why))
    recorder = None
    raw = image.file("recorder.jsonl")
    if raw is not None:
        recorder, why = parse_recorder(raw)
        if why:
            unavailable.append(("recorder", why))
    return History(events, recorder, capture_time_of(image.manifest), tuple(unavailable))
