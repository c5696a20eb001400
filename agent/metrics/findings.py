"""The current findings of ``railscope doctor``, one series each (codes in docs/design.md §4)."""

from __future__ import annotations

from agent.metrics.families import Families, Scrape, Subject

__all__ = ["SUBJECT", "render"]


def render(fams: Families, scrape: Scrape) -> None:
    diag = scrape.state.diagnosis
    if diag is None:
        return
    for f in diag.findings:
        fams.gauge("railscope_finding",
                   "1 for each current finding of railscope doctor (codes in docs/codes.md).",
                   ("code", "severity", "subject"), (f.code, f.severity, f.subject), 1)


SUBJECT = Subject(90, render)
