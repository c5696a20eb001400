"""The rail PFs' devlink health reporters (docs/design.md §4 ``NicHealthError``)."""

from __future__ import annotations

from agent.analysis.checks.health import reporters_of
from agent.analysis.topology import Pf
from agent.metrics.families import PF, Families, Scrape, Subject, label
from agent.model import Snapshot

__all__ = ["SUBJECT", "render"]


def render(fams: Families, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is None or topo is None:
        return
    for pf in topo.rail_pfs:
        _health(fams, snap, pf)


def _health(fams: Families, snap: Snapshot, pf: Pf) -> None:
    """The rail PF's devlink health reporters, its ports' included (one series per reporter name:
    the worst state and the largest counts when two ports have a reporter of the same name)."""
    base = (label(pf.bdf), label(pf.netdev))
    by_name: dict[str, tuple[int, int | None]] = {}
    for r in reporters_of(pf, snap.health):
        if r.state is None:
            continue
        state, errors = by_name.get(r.name, (0, None))
        err = r.error if errors is None else max(errors, r.error or 0)
        by_name[r.name] = (max(state, 1 if r.state == "error" else 0), err)
    for name in sorted(by_name):
        state, errors = by_name[name]
        fams.gauge("railscope_devlink_health_reporter_state",
                   "1 while the PF's devlink health reporter is in state error, 0 when healthy.",
                   (*PF, "reporter"), (*base, name), state)
        if errors is not None:
            fams.counter("railscope_devlink_health_reporter_errors",
                         "Errors the PF's devlink health reporter saw since the driver loaded.",
                         (*PF, "reporter"), (*base, name), errors)


SUBJECT = Subject(60, render)
