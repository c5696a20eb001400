"""Human output of ``railscope doctor``: a rail table, then findings worst first.

Colour only on a terminal, and never when ``NO_COLOR`` is set (https://no-color.org) or ``TERM`` is
``dumb``. Everything here formats; nothing decides. Every string of the diagnosis came from a node or
an image and goes through ``terminal.safe`` before it is laid out (docs/design.md §2: an image is untrusted input).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from typing import TextIO

from agent.findings import Diagnosis, RailRow, next_step
from agent.report.degradation import rail_notes
from agent.report.terminal import cell, safe

__all__ = ["render", "use_colour"]

_SGR = {"critical": "1;31", "warning": "33", "info": "36", "up": "32", "down": "1;31", "dim": "2", "bold": "1"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _Paint:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, style: str | None) -> str:
        if not self.on or not style or style not in _SGR:
            return text
        return f"\x1b[{_SGR[style]}m{text}\x1b[0m"


def _speed(mbps: int | None) -> str:
    if mbps is None:
        return "-"
    if mbps >= 1000 and mbps % 1000 == 0:
        return f"{mbps // 1000}G"
    return f"{mbps}M"


def _rail_label(row: RailRow) -> str:
    return str(row.rail) if row.plane is None else f"{row.rail}.{row.plane}"



def _table(headers: Sequence[str], rows: list[list[tuple[str, str | None]]], paint: _Paint) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, (text, _) in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = ["  ".join(paint(h.ljust(widths[i]), "bold") for i, h in enumerate(headers)).rstrip()]
    for row in rows:
        lines.append("  ".join(paint(text.ljust(widths[i]), style) for i, (text, style) in enumerate(row)).rstrip())
    return lines


def render(diag: Diagnosis, stream: TextIO, *, source: str | None = None, colour: bool | None = None,
           found: Sequence[str] = (), not_judged: Sequence[str] = (), judged_with: str | None = None) -> None:
    """Write the diagnosis for a person. ``found`` lists what the node has when it has no rails;
    ``not_judged`` names the expectations no flag gave (an "OK" must not read as "all checked");
    ``judged_with`` says which expectations judged a node image and where each came from."""
    paint = _Paint(use_colour(stream) if colour is None else colour)
    out: list[str] = []
    head = f"node {safe(diag.node or '?')}  kernel {safe(diag.kernel or '?')}"
    if source:
        head += f"  ({safe(source)})"
    out.append(paint(head, "bold"))

    if diag.rails:
        drivers = {(r.driver, r.driver_version) for r in diag.rails if r.driver}
        if len(drivers) == 1:
            d, v = next(iter(drivers))
            out.append(f"driver {safe(d)} {safe(v or '')}".rstrip())
        out.append("")
        rows = []
        for r in diag.rails:
            oper_style = "up" if r.oper == "up" else ("down" if r.oper == "down" else None)
            rdma_style = None if r.rdma_state in (None, "ACTIVE") else "down"
            rows.append([
                (_rail_label(r), None), (cell(r.netdev), None if r.netdev else "critical"), (cell(r.rdma), None),
                (cell(r.pci), None), (r.oper or "missing", oper_style or "critical"), (_speed(r.speed_mbps), None),
                (cell(r.rdma_state), rdma_style), (cell(r.firmware), None), (cell(r.eswitch_mode), None),
                (cell(r.esw_multiport), None), (cell(r.numvfs), None), (cell(r.representors), None),
            ])
        headers = ["RAIL", "NETDEV", "RDMA", "PCI", "LINK", "SPEED", "RDMA-STATE", "FIRMWARE",
                   "ESWITCH", "MULTIPORT", "VFS", "REPS"]
        if any(r.gpu for r in diag.rails):
            # GPU nodes only: the GPU nearest each rail and how near (nvidia-smi topo -m words)
            headers.append("GPU")
            for row, r in zip(rows, diag.rails, strict=True):
                far = r.gpu_link in ("NODE", "SYS")
                row.append((f"{cell(r.gpu)} {cell(r.gpu_link)}" if r.gpu else "-", "warning" if far else None))
        if any(r.peer for r in diag.rails):
            # the switch port each rail is cabled to (LLDP): leaf:port
            headers.append("PEER")
            for row, r in zip(rows, diag.rails, strict=True):
                row.append((safe(r.peer.label) if r.peer else "-", None))
        degraded = rail_notes(diag)
        if degraded:
            headers.append("DEGRADED")
            for r, row in zip(diag.rails, rows, strict=True):
                note = degraded.get(r.netdev or "")
                row.append((safe(note) if note else "-", "down" if note else None))
        out.extend(_table(headers, rows, paint))
    else:
        out.append("")
        if found:
            out.append(paint(safe(found[0]), "bold"))
            out.extend(f"  {safe(line)}" for line in found[1:])
        else:
            out.append("no rails found")

    out.append("")
    counts = {s: sum(1 for f in diag.findings if f.severity == s) for s in ("critical", "warning", "info")}
    if not diag.findings:
        ok = f"OK: {len(diag.rails)} rail(s), no findings" if diag.rails else "no findings"
        out.append(paint(ok, "up" if diag.rails else None))
    else:
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        out.append(paint(f"FINDINGS ({summary})", "bold"))
        rows_f = [(safe(f.severity), safe(f.code), safe(f.subject), safe(f.message)) for f in diag.findings]
        width_code = max(len(code) for _, code, _, _ in rows_f)
        width_subj = max(len(subj) for _, _, subj, _ in rows_f)
        for (sev, code, subj, msg), f in zip(rows_f, diag.findings, strict=True):
            out.append(f"{paint(sev.upper().ljust(8), f.severity)}  {code.ljust(width_code)}  "
                       f"{subj.ljust(width_subj)}  {msg}")
            step = next_step(f.code)
            if step:
                # wrapped under the code column: the step is a paragraph, the finding line is not
                out.extend(paint(line, "dim") for line in textwrap.wrap(
                    step, width=110, initial_indent=f"{'':8}  next: ", subsequent_indent=f"{'':8}        "))
    if not_judged and diag.rails:
        out.append(paint(f"not judged (no expectation given): {safe(', '.join(not_judged))}", "dim"))
    for note in diag.notes:
        out.append(paint(f"note: {safe(note)}", "bold"))
    if judged_with:
        out.append(paint(f"judged with: {safe(judged_with)}", "dim"))
    if diag.unavailable:
        out.append("")
        out.append(paint("not available:", "dim"))
        out.extend(paint(f"  {safe(src)}: {safe(why)}", "dim") for src, why in diag.unavailable)
    stream.write("\n".join(out) + "\n")
