"""What a report on one bundle says, computed once: the diagnosis, the flight recorder as per-rail
series, the events in order, and the manifest summary. The text and HTML renderings format it.

The flight recorder (``recorder.jsonl``, docs/design.md §6) holds raw cumulative counters once a second;
the series here are what a person reads: pause frames per second and the share of time paused on
the lossless priority (``*_pause_duration`` is in microseconds, mlx5 ``counters.rst``), lossless
discards per second, and carrier losses. A counter that went backwards between two samples (a
driver reload) leaves a gap, never a negative rate.

Pure: no I/O, no clock. The manifest is untrusted input: every value is type-checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from agent.findings import Diagnosis
from agent.model import Event, value_of
from agent.readers.history import History, Recorder, Sample

__all__ = ["METRICS", "Line", "ManifestSummary", "Metric", "RailSeries", "Report", "build_report", "summarise_manifest"]


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    unit: str
    kind: str  # "rate" (per second) | "share" (µs per second -> 0..1) | "count" (per interval) | "ratio"
    #: (direction, counter templates summed); ``{p}`` is the lossless priority
    lines: tuple[tuple[str, tuple[str, ...]], ...]
    #: "ratio": the counters the lines' increase is divided by (the corrected-bit ratio: per received bit)
    per: tuple[str, ...] = ()


METRICS: tuple[Metric, ...] = (
    Metric("pause", "Pause frames, prio {p}", "frames/s", "rate",
           (("tx", ("tx_prio{p}_pause",)), ("rx", ("rx_prio{p}_pause",)))),
    Metric("pause_share", "Time paused, prio {p}", "% of time", "share",
           (("tx", ("tx_prio{p}_pause_duration",)), ("rx", ("rx_prio{p}_pause_duration",)))),
    Metric("discards", "Lossless discards, prio {p}", "packets/s", "rate",
           (("rx", ("rx_prio{p}_discards", "rx_prio{p}_buf_discard", "rx_prio{p}_cong_discard")),)),
    Metric("carrier", "Carrier losses", "losses", "count", (("", ("carrier_down_count",)),)),
    # rx_bits_phy counts line-rate bits whether or not traffic flows (mlx5 counters.rst): the ratio is
    # the pre-FEC BER the LinkDegrading check judges, and the symbol errors what FEC could not correct
    Metric("ber", "Corrected-bit ratio", "pre-FEC", "ratio", (("rx", ("rx_corrected_bits_phy",)),),
           per=("rx_bits_phy",)),
    Metric("symbols", "Symbol errors", "uncorrectable", "count", (("rx", ("rx_pcs_symbol_err_phy",)),)),
)


@dataclass(frozen=True)
class Line:
    direction: str  # "tx" | "rx" | ""
    #: (seconds relative to the capture time, value); value None where the counter is missing or reset
    points: tuple[tuple[float, float | None], ...]
    resets: int = 0

    @property
    def peak(self) -> float | None:
        vals = [v for _, v in self.points if v is not None]
        return max(vals) if vals else None

    @property
    def total(self) -> float:
        return sum(v for _, v in self.points if v is not None)


@dataclass(frozen=True)
class RailSeries:
    label: str  # "0", "1.0" (rail.plane), or the netdev name when it is no rail of the diagnosis
    netdev: str
    samples: int
    #: metric name -> its lines (absent when the recorder has none of its counters)
    metrics: tuple[tuple[str, tuple[Line, ...]], ...]

    def lines(self, metric: str) -> tuple[Line, ...]:
        return value_of(self.metrics, metric) or ()


@dataclass(frozen=True)
class ManifestSummary:
    present: bool
    fields: tuple[tuple[str, str], ...] = ()  # node, cluster, incident, reason, agent_version, times
    items: int = 0
    bytes: int = 0
    by_kind: tuple[tuple[str, int], ...] = ()
    timed_out: tuple[tuple[str, float], ...] = ()
    truncated: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    failed: tuple[tuple[str, int], ...] = ()  # commands with a non-zero exit status
    error: str | None = None

    def field(self, name: str) -> str | None:
        for k, v in self.fields:
            if k == name:
                return v
        return None


@dataclass(frozen=True)
class Report:
    source: str
    diagnosis: Diagnosis
    capture_time: float | None  # unix seconds: the manifest's ended_at, else the newest sample or event
    lossless_prio: int
    series: tuple[RailSeries, ...]
    window_s: float  # how far back the recorder goes from the capture time
    events: tuple[Event, ...]
    manifest: ManifestSummary

    def title(self, metric: Metric) -> str:
        return metric.title.format(p=self.lossless_prio)


def _value(s: Sample, names: tuple[str, ...]) -> int | None:
    total = 0
    found = False
    for n in names:
        v = s.get(n)
        if v is not None:
            total += v
            found = True
    return total if found else None


def _line(samples: tuple[Sample, ...], direction: str, names: tuple[str, ...], kind: str,
          t0: float, per: tuple[str, ...] = ()) -> Line | None:
    points: list[tuple[float, float | None]] = []
    resets = 0
    seen = False
    for a, b in pairwise(samples):
        dt = b.ts - a.ts
        if dt <= 0:
            continue
        va, vb = _value(a, names), _value(b, names)
        if va is None or vb is None:
            points.append((b.ts - t0, None))
            continue
        seen = True
        d = vb - va
        if d < 0:
            resets += 1
            points.append((b.ts - t0, None))
            continue
        if kind == "ratio":
            pa, pb = _value(a, per), _value(b, per)
            if pa is None or pb is None or pb <= pa:
                points.append((b.ts - t0, None))  # no bits counted (or a reset): no ratio
                continue
            points.append((b.ts - t0, d / (pb - pa)))
            continue
        val = d / dt if kind == "rate" else d / (dt * 1e6) if kind == "share" else float(d)
        points.append((b.ts - t0, val))
    if not seen:
        return None
    return Line(direction, tuple(points), resets)


def _series(recorder: Recorder | None, diag: Diagnosis, prio: int, t0: float) -> tuple[RailSeries, ...]:
    if recorder is None:
        return ()
    label = {r.netdev: (str(r.rail) if r.plane is None else f"{r.rail}.{r.plane}") for r in diag.rails if r.netdev}
    order = {r.netdev: i for i, r in enumerate(diag.rails) if r.netdev}
    out = []
    for netdev, samples in recorder.series:
        metrics = []
        for m in METRICS:
            lines = []
            for direction, templates in m.lines:
                ln = _line(samples, direction, tuple(t.format(p=prio) for t in templates), m.kind, t0, m.per)
                if ln is not None:
                    lines.append(ln)
            if lines:
                metrics.append((m.name, tuple(lines)))
        out.append(RailSeries(label.get(netdev, netdev), netdev, len(samples), tuple(metrics)))
    out.sort(key=lambda s: (order.get(s.netdev, len(order)), s.netdev))
    return tuple(out)


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _what(item: dict[str, Any]) -> str:
    argv = item.get("argv")
    if isinstance(argv, list) and argv:
        return " ".join(str(a) for a in argv)
    return _text(item.get("path")) or "?"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def summarise_manifest(manifest: dict[str, Any] | None, error: str | None = None) -> ManifestSummary:
    """What was captured, what timed out, was truncated, skipped or failed, and why."""
    if not isinstance(manifest, dict):
        return ManifestSummary(False, error=error)
    fields = tuple((k, v) for k in ("node", "cluster", "incident", "reason", "agent_version", "started_at",
                                    "ended_at", "schema") if (v := _text(manifest.get(k))) is not None)
    raw = manifest.get("items")
    items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []
    kinds: dict[str, int] = {}
    total = 0
    timed_out, truncated, skipped, failed = [], [], [], []
    for it in items:
        kind = _text(it.get("kind")) or "?"
        kinds[kind] = kinds.get(kind, 0) + 1
        size = _num(it.get("bytes"))
        if size is not None and size > 0:
            total += int(size)
        if it.get("skipped") is True:
            skipped.append((_what(it), _text(it.get("reason")) or "no reason given"))
            continue
        if it.get("timed_out") is True:
            timed_out.append((_what(it), _num(it.get("duration_s")) or 0.0))
        if it.get("truncated") is True:
            truncated.append(_what(it))
        rc = it.get("rc")
        if kind == "command" and isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            failed.append((_what(it), rc))
    return ManifestSummary(True, fields, len(items), total, tuple(sorted(kinds.items())), tuple(timed_out),
                           tuple(truncated), tuple(skipped), tuple(failed), error)


def build_report(source: str, diagnosis: Diagnosis, history: History, manifest: dict[str, Any] | None,
                 *, manifest_error: str | None = None, lossless_prio: int = 3) -> Report:
    """The report of one bundle from what ``doctor --from`` read of it."""
    rec = history.recorder
    last_sample = max((s[-1].ts for _, s in rec.series if s), default=None) if rec else None
    first_sample = min((s[0].ts for _, s in rec.series if s), default=None) if rec else None
    t0 = history.capture_time
    if t0 is None:
        t0 = last_sample if last_sample is not None else (history.events[-1].ts if history.events else None)
    anchor = t0 if t0 is not None else 0.0
    window = max(0.0, anchor - first_sample) if first_sample is not None else 0.0
    return Report(source, diagnosis, t0, lossless_prio, _series(rec, diagnosis, lossless_prio, anchor), window,
                  tuple(sorted(history.events, key=lambda e: e.ts)), summarise_manifest(manifest, manifest_error))
