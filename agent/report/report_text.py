"""Human output of ``railscope report``: the doctor's table and findings, then the flight recorder
per rail (a sparkline and the peak of each series), the events in order, and what the capture holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any, TextIO

from agent.findings import Diagnosis, Finding, PeerRow, RailRow
from agent.report.content import METRICS, Line, Metric, Report
from agent.report.terminal import safe
from agent.report.text import render

__all__ = ["fmt_value", "render_report", "safe_diagnosis", "sparkline", "utc"]

_BLOCKS = "▁▂▃▄▅▆▇█"
_ASCII = " .:-=+*#"
SPARK_WIDTH = 48


def utc(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_value(v: float | None, metric: Metric) -> str:
    if v is None:
        return "-"
    if metric.kind == "share":
        return f"{v * 100:.1f} %"
    if metric.kind == "count":
        return f"{v:.0f}"
    if metric.kind == "ratio":
        return f"{v:.1e}"
    if v >= 10_000:
        return f"{v / 1000:.1f}k/s"
    if v >= 100:
        return f"{v:.0f}/s"
    return f"{v:.3g}/s" if v else "0/s"


def sparkline(line: Line, lo: float, hi: float, width: int = SPARK_WIDTH, ascii_only: bool = False,
              span: float | None = None) -> str:
    """``width`` cells over ``[-span, 0]`` seconds, each the peak of its points; a gap is a space."""
    blocks = _ASCII if ascii_only else _BLOCKS
    if not line.points:
        return ""
    start = -span if span else line.points[0][0]
    step = max((0.0 - start) / width, 1e-9)
    cells: list[float | None] = [None] * width
    for t, v in line.points:
        if v is None:
            continue
        i = min(width - 1, max(0, int((t - start) / step)))
        cur = cells[i]
        cells[i] = v if cur is None else max(cur, v)
    out = []
    rng = hi - lo
    for c in cells:
        if c is None:
            out.append(" ")
        else:
            k = 0 if rng <= 0 else int((c - lo) / rng * (len(blocks) - 1) + 0.5)
            out.append(blocks[max(0, min(len(blocks) - 1, k))])
    return "".join(out)


def _ascii(stream: TextIO) -> bool:
    enc = (getattr(stream, "encoding", None) or "ascii").lower()
    try:
        _BLOCKS.encode(enc)
    except (LookupError, UnicodeEncodeError):
        return True
    return False


def _recorder(rep: Report, ascii_only: bool) -> list[str]:
    if not rep.series:
        return ["flight recorder: none in this bundle (no recorder.jsonl)"]
    out = [f"FLIGHT RECORDER ({rep.window_s:.0f} s before the capture at {utc(rep.capture_time)}, "
           f"peak per series; a gap is a reset or a missing counter)"]
    width_title = max(len(rep.title(m)) for m in METRICS)
    for s in rep.series:
        out.append(f"  rail {safe(s.label)}  {safe(s.netdev)}  ({s.samples} samples)")
        for m in METRICS:
            lines = s.lines(m.name)
            if not lines:
                continue
            hi = max((ln.peak or 0.0) for ln in lines)
            if m.kind == "share":
                hi = max(hi, 1.0)  # the share's scale is always 0..100 %
            for ln in lines:
                resets = f"  {ln.resets} reset(s)" if ln.resets else ""
                head = rep.title(m) if ln is lines[0] else ""
                total = f"  total {ln.total:.0f}" if m.kind == "count" else ""
                out.append(f"    {head.ljust(width_title)}  {(ln.direction or '').ljust(2)} "
                           f"|{sparkline(ln, 0.0, hi, ascii_only=ascii_only, span=rep.window_s or None)}| "
                           f"peak {fmt_value(ln.peak, m)}{total}{resets}")
    return out


def _events(rep: Report) -> list[str]:
    if not rep.events:
        return ["events: none in this bundle"]
    out = [f"EVENTS ({len(rep.events)}, oldest first)"]
    for e in rep.events:
        rel = f"{e.ts - rep.capture_time:+.0f} s" if rep.capture_time is not None else ""
        out.append(f"  {utc(e.ts)}  {rel:>8}  {e.severity.upper():<8}  {safe(e.code)}  {safe(e.subject)}  "
                   f"{safe(e.message)}")
    return out


def _names(pairs: Sequence[str], limit: int = 12) -> list[str]:
    out = [f"    {safe(p)}" for p in pairs[:limit]]
    if len(pairs) > limit:
        out.append(f"    ... and {len(pairs) - limit} more")
    return out


def manifest_lines(rep: Report) -> list[str]:
    m = rep.manifest
    if not m.present:
        return ["capture: no manifest.json" + (f" ({safe(m.error)})" if m.error else " (a hand-made image)")]
    kinds = ", ".join(f"{n} {safe(k)}" for k, n in m.by_kind)
    head = [f"CAPTURE  {m.items} item(s), {m.bytes / 1048576:.1f} MiB ({kinds})"]
    for key in ("node", "cluster", "incident", "reason", "agent_version", "started_at", "ended_at"):
        val = m.field(key)
        if val is not None:
            head.append(f"  {key.replace('_', ' ')}: {safe(val)}")
    head.append(f"  timed out: {len(m.timed_out)}, truncated: {len(m.truncated)}, skipped: {len(m.skipped)}, "
                f"failed: {len(m.failed)}")
    if m.timed_out:
        head.append("  timed out:")
        head += _names([f"{w} (after {d:.1f} s)" for w, d in m.timed_out])
    if m.truncated:
        head.append("  truncated (the tail is kept):")
        head += _names(list(m.truncated))
    if m.skipped:
        head.append("  skipped:")
        head += _names([f"{w}: {why}" for w, why in m.skipped])
    if m.failed:
        head.append("  failed:")
        head += _names([f"{w}: exit {rc}" for w, rc in m.failed])
    return head


def _s(v: Any) -> Any:
    if isinstance(v, PeerRow):  # the LLDP neighbour's names came off the wire
        return replace(v, system=_s(v.system), port=_s(v.port))
    return safe(v) if isinstance(v, str) else v


def safe_diagnosis(diag: Diagnosis) -> Diagnosis:
    """The diagnosis with every string from the node escaped for a terminal (names, messages)."""
    rails = tuple(replace(r, **{f.name: _s(getattr(r, f.name)) for f in fields(RailRow)}) for r in diag.rails)
    findings = tuple(Finding(safe(f.code), f.severity, safe(f.subject), safe(f.message), f.evidence)
                     for f in diag.findings)
    return Diagnosis(_s(diag.node), _s(diag.kernel), rails, findings,
                     tuple((safe(s), safe(w)) for s, w in diag.unavailable), tuple(safe(n) for n in diag.notes))


def render_report(rep: Report, stream: TextIO, *, not_judged: Sequence[str] = (),
                  judged_with: str | None = None) -> None:
    """Write the report for a person: the diagnosis, then the recorder, the events, the capture.
    ``judged_with`` says which expectations judged the bundle and where each came from."""
    render(safe_diagnosis(rep.diagnosis), stream, source=safe(rep.source), not_judged=not_judged,
           judged_with=judged_with)
    out = [""]
    out += _recorder(rep, _ascii(stream))
    out.append("")
    out += _events(rep)
    out.append("")
    out += manifest_lines(rep)
    stream.write("\n".join(out) + "\n")
