"""``railscope report --html``: one self-contained page to attach to a ticket.

Styles inline, charts as inline SVG, no script and no external resource (a Content-Security-Policy
of ``default-src 'none'`` says so to the browser too), so the page reads the same offline, in a
ticket system's sandbox and with JavaScript off. Every string from the bundle is escaped: a node
image is untrusted input (docs/design.md §2).

The flight recorder is a grid of small charts, one row per rail and one column per series, each
column on one scale, so the rail that storms stands out from its neighbours at a glance.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from agent.findings import Diagnosis, RailRow, next_step
from agent.report.content import METRICS, Line, Metric, Report
from agent.report.report_text import fmt_value, utc
from agent.report.terminal import cell, safe

__all__ = ["CSS", "esc", "pill", "render_html"]

CHART_W, CHART_H = 248, 84
#: What one page renders at most; the rest is counted ("N more"). A bundle is untrusted input: 70,000
#: events or a recorder naming 50,000 netdevs would otherwise make a page of hundreds of MB, in a
#: browser and in the collector that serves it.
MAX_FINDINGS = 200
MAX_RAILS = 256
MAX_SERIES = 32
MAX_EVENTS = 200
MAX_LIST = 200
#: characters of one finding's evidence shown
MAX_EVIDENCE = 4096
PAD_L, PAD_R, PAD_T, PAD_B = 40, 6, 8, 16
TX, RX = "#c2410c", "#1d4ed8"

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--alt:#f6f8fa;
--crit:#b42318;--crit-bg:#fee4e2;--warn:#8a5300;--warn-bg:#fff1c2;--info:#175cd3;--info-bg:#e0eaff;
--ok:#067647;--ok-bg:#dcfae6}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,"Noto Sans","DejaVu Sans",sans-serif}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 6px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.sub{color:var(--muted);margin:0 0 12px}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
vertical-align:middle;white-space:nowrap}
.critical{color:var(--crit);background:var(--crit-bg)}.warning{color:var(--warn);background:var(--warn-bg)}
.info{color:var(--info);background:var(--info-bg)}.ok{color:var(--ok);background:var(--ok-bg)}
.status{font-size:14px;margin-left:10px}
dl.meta{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:2px 14px;margin:10px 0 0}
dl.meta dt{color:var(--muted)}dl.meta dd{margin:0;font-family:ui-monospace,"DejaVu Sans Mono",monospace;
font-size:13px;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--alt);font-weight:600;white-space:nowrap}
td.mono,td code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12.5px}
tr.bad td{background:#fff5f4}
td.down{color:var(--crit);font-weight:700}td.up{color:var(--ok);font-weight:600}
.muted{color:var(--muted)}
details{margin-top:6px}summary{cursor:pointer}details.ev summary{color:var(--muted)}
pre{background:var(--alt);padding:6px 8px;margin:4px 0 0;font-size:12px;white-space:pre-wrap;
overflow-wrap:anywhere}
table.charts td{padding:4px 6px;border-bottom:1px solid var(--line)}
table.charts th{font-weight:600}
table.charts td:first-child{white-space:nowrap;min-width:116px}
table.charts th small{display:block;font-weight:400;color:var(--muted)}
.rail{font-weight:700;font-size:15px}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:18px;height:0;border-top:3px solid;vertical-align:middle;margin-right:5px}
svg text{font:10px system-ui,"DejaVu Sans",sans-serif;fill:#59636e}
ul.tight{margin:4px 0;padding-left:20px}
footer{margin-top:32px;color:var(--muted);font-size:12px}
"""


def esc(value: object) -> str:
    """Bundle text for HTML: control characters made visible, then HTML-escaped (quotes too)."""
    return html.escape(safe(value), quote=True)


def pill(severity: str) -> str:
    cls = severity if severity in ("critical", "warning", "info") else "info"
    return f'<span class="pill {cls}">{esc(severity.upper())}</span>'


def _more(n: int, what: str) -> str:
    """The line that stands for what a page leaves out."""
    return f'<p class="muted more">{n:,} more {esc(what)} not shown (the bundle holds them all).</p>' if n > 0 else ""


def _status(diag: Diagnosis) -> str:
    counts = [(s, sum(1 for f in diag.findings if f.severity == s)) for s in ("critical", "warning", "info")]
    parts = [f'<span class="pill {s}">{n} {s}</span>' for s, n in counts if n]
    if not parts:
        return '<span class="pill ok">OK: no findings</span>'
    return " ".join(parts)


def _meta(rep: Report) -> str:
    m = rep.manifest
    d = rep.diagnosis
    drivers = sorted({f"{r.driver} {r.driver_version or ''}".strip() for r in d.rails if r.driver})
    rows = [
        ("Node", d.node), ("Kernel", d.kernel),
        ("Cluster", m.field("cluster")), ("Incident", m.field("incident")),
        ("Reason", m.field("reason")), ("Driver", ", ".join(drivers) or None),
        ("Captured", m.field("ended_at") or utc(rep.capture_time)), ("Agent", m.field("agent_version")),
        ("Bundle", rep.source), ("Rails", str(len(d.rails))),
    ]
    cells = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v if v is not None else '-')}</dd>" for k, v in rows)
    return f'<dl class="meta">{cells}</dl>'


def _findings(diag: Diagnosis) -> str:
    if not diag.findings:
        return '<p><span class="pill ok">OK</span> no findings.</p>'
    rows = []
    for f in diag.findings[:MAX_FINDINGS]:  # worst first: what is left out is the mildest
        ev = ""
        if f.evidence:
            text = json.dumps(f.evidence, indent=1, sort_keys=True, default=str)
            if len(text) > MAX_EVIDENCE:
                text = f"{text[:MAX_EVIDENCE]}\n… {len(text) - MAX_EVIDENCE:,} more characters"
            ev = f"<details class=ev><summary>evidence</summary><pre>{esc(text)}</pre></details>"
        step = next_step(f.code)
        nxt = f'<p class="next"><b>Next:</b> {esc(step)}</p>' if step else ""
        rows.append(f"<tr><td>{pill(f.severity)}</td><td class=mono>{esc(f.code)}</td>"
                    f"<td class=mono>{esc(f.subject)}</td><td>{esc(f.message)}{nxt}{ev}</td></tr>")
    return ("<table><thead><tr><th>Severity</th><th>Code</th><th>Subject</th><th>What</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{_more(len(diag.findings) - MAX_FINDINGS, 'findings')}")


def _speed(mbps: int | None) -> str:
    if mbps is None:
        return "-"
    return f"{mbps // 1000}G" if mbps >= 1000 and mbps % 1000 == 0 else f"{mbps}M"



def _rail_row(r: RailRow, gpu: bool = False, peer: bool = False) -> str:
    label = str(r.rail) if r.plane is None else f"{r.rail}.{r.plane}"
    link = r.oper or "missing"
    link_cls = "up" if link == "up" else "down"
    rdma_cls = "" if r.rdma_state in (None, "ACTIVE") else " down"
    bad = ' class="bad"' if link != "up" or rdma_cls else ""
    cells = [
        f"<td class=mono>{esc(label)}</td>", f"<td class=mono>{esc(cell(r.netdev, str))}</td>",
        f"<td class=mono>{esc(cell(r.rdma, str))}</td>", f"<td class=mono>{esc(cell(r.pci, str))}</td>",
        f'<td class="{link_cls}">{esc(link)}</td>', f"<td>{esc(_speed(r.speed_mbps))}</td>",
        f'<td class="mono{rdma_cls}">{esc(cell(r.rdma_state, str))}</td>', f"<td class=mono>{esc(cell(r.firmware, str))}</td>",
        f"<td>{esc(cell(r.eswitch_mode, str))}</td>", f"<td>{esc(cell(r.esw_multiport, str))}</td>",
        f"<td>{esc(cell(r.numvfs, str))}</td>", f"<td>{esc(cell(r.representors, str))}</td>",
    ]
    if gpu:
        cells.append(f"<td class=mono>{esc(f'{r.gpu} {r.gpu_link or chr(63)}' if r.gpu else '-')}</td>")
    if peer:
        cells.append(f"<td class=mono>{esc(r.peer.label if r.peer else '-')}</td>")
    return f"<tr{bad}>{''.join(cells)}</tr>"


def _rails(diag: Diagnosis) -> str:
    if not diag.rails:
        return "<p>No rails found.</p>"
    gpu = any(r.gpu for r in diag.rails)  # GPU nodes: the nearest GPU and its nvidia-smi topo -m word
    peer = any(r.peer for r in diag.rails)  # the leaf:port each rail is cabled to (LLDP)
    head = "".join(f"<th>{h}</th>" for h in ("Rail", "Netdev", "RDMA", "PCI", "Link", "Speed", "RDMA state",
                                             "Firmware", "Eswitch", "Multiport", "VFs", "Reps",
                                             *(("GPU",) if gpu else ()), *(("Peer",) if peer else ())))
    return (f'<table id="rails"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(_rail_row(r, gpu, peer) for r in diag.rails[:MAX_RAILS])}</tbody></table>"
            f"{_more(len(diag.rails) - MAX_RAILS, 'rails')}")


# -- charts ------------------------------------------------------------------------------------

def _bucket(points: Sequence[tuple[float, float | None]], span: float, width: int) -> list[tuple[float, float | None]]:
    """At most one point per pixel column, keeping each column's peak (a spike must not vanish)."""
    if len(points) <= width:
        return list(points)
    cells: dict[int, tuple[float, float | None]] = {}
    for t, v in points:
        i = int((t + span) / span * (width - 1)) if span > 0 else 0
        cur = cells.get(i)
        if cur is None or (v is not None and (cur[1] is None or v > cur[1])):
            cells[i] = (t, v)
    return [cells[k] for k in sorted(cells)]


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _axis_label(v: float, metric: Metric) -> str:
    if metric.kind == "share":
        return f"{v * 100:.0f}%"
    if metric.kind == "ratio":
        return f"{v:.0e}"
    if v >= 1000:
        return f"{v / 1000:.3g}k"
    return f"{v:.3g}"


def _chart(lines: Sequence[Line], metric: Metric, hi: float, span: float, events: Sequence[float],
           label: str) -> str:
    w, h = CHART_W, CHART_H
    pw, ph = w - PAD_L - PAD_R, h - PAD_T - PAD_B
    span = span or 1.0
    top = hi if hi > 0 else 1.0

    def x(t: float) -> float:
        return PAD_L + (t + span) / span * pw

    def y(v: float) -> float:
        return PAD_T + ph - min(v, top) / top * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'role="img" class="chart" data-metric="{esc(metric.name)}">',
             f"<title>{esc(label)}</title>",
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="#fbfcfd" stroke="#d1d9e0"/>',
             f'<line x1="{PAD_L}" y1="{PAD_T + ph / 2:.1f}" x2="{PAD_L + pw}" y2="{PAD_T + ph / 2:.1f}" '
             'stroke="#eef1f4"/>',
             f'<text x="{PAD_L - 4}" y="{PAD_T + 8}" text-anchor="end">{esc(_axis_label(top, metric))}</text>',
             f'<text x="{PAD_L - 4}" y="{PAD_T + ph}" text-anchor="end">0</text>',
             f'<text x="{PAD_L}" y="{h - 3}">-{esc(_span_word(span))}</text>',
             f'<text x="{PAD_L + pw}" y="{h - 3}" text-anchor="end">capture</text>']
    # One marker per pixel column: thousands of events on a rail draw the same few lines.
    marks = sorted({round(x(t)) for t in events if -span <= t <= 0})
    for mx in marks:
        parts.append(f'<line x1="{mx}" y1="{PAD_T}" x2="{mx}" y2="{PAD_T + ph}" '
                     'stroke="#8250df" stroke-dasharray="3 2" stroke-width="1"/>')
    for ln in lines:
        colour = RX if ln.direction == "rx" else TX
        pts = _bucket(ln.points, span, pw)
        if metric.kind == "count":
            for t, v in pts:
                if v:
                    parts.append(f'<line x1="{x(t):.1f}" y1="{PAD_T + ph}" x2="{x(t):.1f}" y2="{y(v):.1f}" '
                                 f'stroke="{TX}" stroke-width="2"/>')
            continue
        runs: list[list[str]] = [[]]
        for t, v in pts:
            if v is None:
                if runs[-1]:
                    runs.append([])
                continue
            runs[-1].append(f"{x(t):.1f},{y(v):.1f}")
        dash = ' stroke-dasharray="4 2"' if ln.direction == "rx" else ""
        for run in runs:
            if not run:
                continue
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="1.5" fill="{colour}"/>')
                continue
            if ln.direction != "rx":
                first_x, last_x = run[0].split(",")[0], run[-1].split(",")[0]
                base = f"{PAD_T + ph:.1f}"
                parts.append(f'<polygon points="{first_x},{base} {" ".join(run)} {last_x},{base}" '
                             f'fill="{colour}" fill-opacity="0.14" stroke="none"/>')
            parts.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.6"{dash}/>')
    parts.append("</svg>")
    return "".join(parts)


def _span_word(span: float) -> str:
    return f"{span / 60:.0f} min" if span >= 120 else f"{span:.0f} s"


def _peaks(lines: Sequence[Line], metric: Metric) -> str:
    bits = []
    for ln in lines:
        word = f"{ln.direction} " if ln.direction else ""
        val = f"{ln.total:.0f}" if metric.kind == "count" else fmt_value(ln.peak, metric)
        what = "total" if metric.kind == "count" else "peak"
        reset = f", {ln.resets} reset" if ln.resets else ""
        bits.append(f"{word}{what} {val}{reset}")
    return " · ".join(bits)


#: recorder series shown only when some rail has them
OPTIONAL = frozenset({"ber", "symbols"})


def _recorder(rep: Report) -> str:
    if not rep.series:
        return "<p>No flight recorder in this bundle (no <code>recorder.jsonl</code>).</p>"
    span = rep.window_s or 1.0
    # the PHY series (corrected-bit ratio, symbol errors) get a column only when the recorder has them:
    # a recorder of an agent that predates them keeps its page
    metrics = [m for m in METRICS if m.name not in OPTIONAL or any(s.lines(m.name) for s in rep.series)]
    his: dict[str, float] = {}
    for m in metrics:
        peak = max(((ln.peak or 0.0) for s in rep.series for ln in s.lines(m.name)), default=0.0)
        his[m.name] = max(peak, 1.0) if m.kind == "share" else (peak or 1.0)
    ev_by_netdev: dict[str, list[float]] = {}
    if rep.capture_time is not None:
        for e in rep.events:
            ev_by_netdev.setdefault(e.subject, []).append(e.ts - rep.capture_time)
    head = "".join(f"<th>{esc(rep.title(m))}<small>{esc(m.unit)} · scale 0-{esc(_axis_label(his[m.name], m))}"
                   f"</small></th>" for m in metrics)
    worst: dict[str, str] = {}
    for f in rep.diagnosis.findings:  # sorted worst first: the first one per subject stands
        worst.setdefault(f.subject, f.severity)
    rows = []
    # Rails first (content.py orders them so): what is left out is netdevs the diagnosis has no rail for.
    for s in rep.series[:MAX_SERIES]:
        sev = worst.get(s.netdev)
        flag = f" {pill(sev)}" if sev else ""
        cells = [f'<td><div class="rail">rail {esc(s.label)}{flag}</div><div class="mono muted">{esc(s.netdev)}</div>'
                 f'<div class="muted">{s.samples} sample{"s" if s.samples != 1 else ""}</div></td>']
        events = ev_by_netdev.get(s.netdev, [])
        for m in metrics:
            lines = s.lines(m.name)
            if not lines:
                why = "one sample: no rate" if s.samples < 2 else "not recorded"
                cells.append(f'<td class="muted">{why}</td>')
                continue
            chart = _chart(lines, m, his[m.name], span, events, f"rail {s.label} {s.netdev}: {rep.title(m)}")
            cells.append(f"<td>{chart}<div class=muted>{esc(_peaks(lines, m))}</div></td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    legend = (f'<p class="legend"><span><i style="border-color:{TX}"></i>transmitted</span>'
              f'<span><i style="border-color:{RX};border-top-style:dashed"></i>received</span>'
              '<span><i style="border-color:#8250df;border-top-style:dotted"></i>an event on that rail</span>'
              f"<span class=muted>{esc(_span_word(span))} before the capture at {esc(utc(rep.capture_time))}; "
              "a gap is a counter reset or a missing sample</span></p>")
    return (f'{legend}<table class="charts" id="recorder"><thead><tr><th>Rail</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{_more(len(rep.series) - MAX_SERIES, 'netdevs')}")


def _events(rep: Report) -> str:
    if not rep.events:
        return "<p>No events in this bundle.</p>"
    rows = []
    # The events nearest the capture (the end of the sorted list) are the ones that explain it.
    shown = rep.events[-MAX_EVENTS:]
    for e in shown:
        rel = f"{e.ts - rep.capture_time:+.0f} s" if rep.capture_time is not None else ""
        rows.append(f"<tr><td class=mono>{esc(utc(e.ts))}</td><td class=mono>{esc(rel)}</td><td>{pill(e.severity)}</td>"
                    f"<td class=mono>{esc(e.code)}</td><td class=mono>{esc(e.subject)}</td><td>{esc(e.message)}</td></tr>")
    return ("<table id=events><thead><tr><th>Time (UTC)</th><th>Before capture</th><th>Severity</th><th>Code</th>"
            f"<th>Subject</th><th>What</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f"{_more(len(rep.events) - len(shown), 'events (older)')}")


def _list(title: str, items: Sequence[str]) -> str:
    if not items:
        return ""
    lis = "".join(f"<li><code>{esc(i)}</code></li>" for i in items[:MAX_LIST])
    if len(items) > MAX_LIST:
        lis += f"<li class=muted>{len(items) - MAX_LIST:,} more</li>"
    # A long list (hundreds of skipped items on a big node) stays one line until opened.
    opened = " open" if len(items) <= 6 else ""
    return f"<details{opened}><summary><b>{esc(title)}</b> ({len(items)})</summary><ul class=tight>{lis}</ul></details>"


def _manifest(rep: Report) -> str:
    m = rep.manifest
    if not m.present:
        why = f" ({esc(m.error)})" if m.error else " (a hand-made image)"
        return f"<p>No <code>manifest.json</code>{why}.</p>"
    kinds = ", ".join(f"{n} {esc(k)}" for k, n in m.by_kind)
    out = [f"<p>{m.items} item(s), {m.bytes / 1048576:.2f} MiB ({kinds}). Timed out: <b>{len(m.timed_out)}</b>, "
           f"truncated: <b>{len(m.truncated)}</b>, skipped: <b>{len(m.skipped)}</b>, failed: "
           f"<b>{len(m.failed)}</b>.</p>"]
    out.append(_list("Timed out", [f"{w} (after {d:.1f} s)" for w, d in m.timed_out]))
    out.append(_list("Truncated (the tail is kept)", list(m.truncated)))
    out.append(_list("Skipped", [f"{w}: {why}" for w, why in m.skipped]))
    out.append(_list("Failed", [f"{w}: exit {rc}" for w, rc in m.failed]))
    return "".join(out)


def _unavailable(diag: Diagnosis) -> str:
    if not diag.unavailable:
        return ""
    lis = "".join(f"<li><code>{esc(s)}</code>: {esc(w)}</li>" for s, w in diag.unavailable[:MAX_LIST])
    if len(diag.unavailable) > MAX_LIST:
        lis += f"<li class=muted>{len(diag.unavailable) - MAX_LIST:,} more</li>"
    return f"<h2>Not available</h2><ul class=tight>{lis}</ul>"


def render_html(rep: Report, *, not_judged: Sequence[str] = (), version: str = "",
                judged_with: str | None = None) -> str:
    """The whole page as one string; ``judged_with`` says which expectations judged the bundle."""
    d = rep.diagnosis
    nj = (f'<p class="muted">Not judged (no expectation given): {esc(", ".join(not_judged))}</p>'
          if not_judged and d.rails else "")
    nj += "".join(f"<p><strong>Note:</strong> {esc(n)}</p>" for n in d.notes)
    if judged_with:
        nj += f'<p class="muted judged">Judged with: {esc(judged_with)}</p>'
    title = f"railscope report: {d.node or '?'}"
    return "".join([
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:; form-action 'none'; base-uri 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
        f'<h1>{esc(title)}<span class="status">{_status(d)}</span></h1>',
        _meta(rep),
        f'<h2 id="findings-h">Findings ({len(d.findings)})</h2>', _findings(d), nj,
        f'<h2 id="rails-h">Rails ({len(d.rails)})</h2>', _rails(d),
        '<h2 id="recorder-h">Flight recorder</h2>', _recorder(rep),
        f'<h2 id="events-h">Events ({len(rep.events)})</h2>', _events(rep),
        '<h2 id="capture-h">Capture</h2>', _manifest(rep),
        _unavailable(d),
        f"<footer>railscope {esc(version)} · report of {esc(rep.source)} · the same diagnosis as "
        f"<code>railscope doctor --from</code></footer>",
        "</main></body></html>\n",
    ])
