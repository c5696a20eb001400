"""Human output of ``railscope diff``: regressions, then changes, then counter rates, one line each.

Changes that are the same on several rails (a firmware bump on all eight) are one line naming the
rails; the JSON document keeps one item per object.
"""

from __future__ import annotations

from typing import TextIO

from agent.analysis.diff import CounterDelta, Diff, Item, moved
from agent.report.terminal import cell, safe

__all__ = ["render_diff"]


def _when(diff: Diff) -> str:
    s = diff.seconds
    if s is None:
        untimed = [side.source for side in (diff.before, diff.after) if not side.timed]
        return f"no capture time in {', '.join(safe(u) for u in untimed)} (no rates)"
    if s < 0:
        return f"AFTER is {_dur(-s)} older than BEFORE"
    return f"{_dur(s)} apart"


def _dur(s: float) -> str:
    s = round(s)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    if s < 172800:
        return f"{s // 3600} h {(s % 3600) // 60} min"
    return f"{s // 86400} d {(s % 86400) // 3600} h"



def _group(items: tuple[Item, ...]) -> list[tuple[Item, list[str]]]:
    """Items with the same code, before and after (and no folded findings) on one line."""
    out: list[tuple[Item, list[str]]] = []
    index: dict[tuple[str, str, str], int] = {}
    for it in items:
        if it.code in ("FirmwareChanged", "MtuChanged", "SpeedChanged") and not it.findings:
            k = (it.code, repr(it.before), repr(it.after))
            if k in index:
                out[index[k]][1].append(it.subject)
                continue
            index[k] = len(out)
        out.append((it, [it.subject]))
    return out


def _lines(items: tuple[Item, ...]) -> list[str]:
    groups = _group(items)
    width = max((len(it.code) for it, _ in groups), default=0)
    wsub = max((len(", ".join(safe(s) for s in subjects)) for _, subjects in groups), default=0)
    rows = []
    for it, subjects in groups:
        subject = ", ".join(safe(s) for s in subjects).ljust(wsub)
        if len(subjects) > 1:
            msg = f"{cell(it.before)} -> {cell(it.after)} on {len(subjects)} rails"
        else:
            msg = safe(it.message)
        extra = f"  [{', '.join(safe(f) for f in it.findings)}]" if it.findings else ""
        rows.append(f"  {it.code.ljust(width)}  {subject}  {msg}{extra}")
    return rows


def _rate(c: CounterDelta) -> str:
    if c.reset:
        return f"reset ({c.before} -> {c.after}: went backwards, a driver reload or a counter wrap)"
    r = c.rate
    if r is None:
        return f"+{c.delta} (no rate: no time between the captures)"
    if c.unit == "us":
        return f"+{c.delta} us  {r * 100:.2f} % of the time paused"
    return f"+{c.delta}  {r:.3g}/s"


def render_diff(diff: Diff, stream: TextIO) -> None:
    """Write the diff for a person."""
    a, b = diff.before, diff.after
    out = [f"diff {safe(a.diagnosis.node or '?')} ({safe(a.source)}) -> {safe(b.diagnosis.node or '?')} "
           f"({safe(b.source)}), {_when(diff)}"]
    if a.diagnosis.node and b.diagnosis.node and a.diagnosis.node != b.diagnosis.node:
        out.append("note: BEFORE and AFTER are different nodes")
    out.append("")
    for title, items in (("regressions", diff.regressions), ("changes", diff.changes)):
        out.extend([f"{title.upper()} ({len(items)})", *_lines(items)] if items else [f"no {title}"])
        out.append("")
    shown = moved(diff.counters)
    if shown:
        out.append(f"COUNTERS ({len(shown)} moved of {len(diff.counters)}, over {_when(diff)})")
        wsub = max(len(safe(c.subject)) for c in shown)
        wname = max(len(c.counter) for c in shown)
        out.extend(f"  {safe(c.subject).ljust(wsub)}  {c.counter.ljust(wname)}  {_rate(c)}" for c in shown)
    elif diff.counters:
        out.append(f"counters: none of {len(diff.counters)} moved")
    else:
        out.append("counters: none to compare")
    stream.write("\n".join(out) + "\n")
