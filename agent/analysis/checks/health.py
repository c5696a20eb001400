"""NicHealthError: a devlink health reporter of a rail's PF (or of one of its ports) in state ``error``.

Reporters are keyed by a devlink handle, with or without a port index (``pci/<bdf>``,
``pci/<bdf>/<port>``, ``auxiliary/mlx5_core.eth.N/<port>`` on kernel >= 6.7, the PF's nested
instance). A handle that maps to no rail PF (a VF's, another bus's) is not judged. One finding per
PF, its severity the worst reporter's: ``fw_fatal`` in error is critical (the firmware is dead until
recovered), any other reporter in error a warning, errors since the driver loaded on reporters now
healthy info. A reporter without a state is not judged (docs/design.md §4).
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding, name_list
from agent.analysis.topology import Pf, Topology
from agent.config import Expectations
from agent.findings import Finding, severity_rank
from agent.model import HealthReporter, Snapshot

__all__ = ["check", "reporters_of"]

#: reporters whose error state means the firmware itself stopped (mlx5 ``fw_fatal``)
FATAL = frozenset({"fw_fatal"})


def reporters_of(pf: Pf, reporters: tuple[HealthReporter, ...]) -> list[HealthReporter]:
    """The reporters of ``pf``: listed under its own handle, or under an instance nested in it."""
    return [r for r in reporters if r.dev == pf.handle or r.dev in pf.nested]


def _severity(r: HealthReporter) -> str | None:
    if r.state == "error":
        return "critical" if r.name in FATAL else "warning"
    if r.state is not None and r.error:
        return "info"
    return None


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    for pf in topo.rail_pfs:
        judged = [(r, _severity(r)) for r in reporters_of(pf, snap.health)]
        bad = [(r, sev) for r, sev in judged if sev is not None]
        if not bad:
            continue
        worst = min((sev for _r, sev in bad), key=severity_rank)
        in_error = [r.name for r, _s in bad if r.state == "error"]
        if in_error:
            msg = f"{pf.handle} ({pf.netdev or 'no netdev'}): devlink health reporter(s) in error: {name_list(in_error)}"
        else:
            msg = (f"{pf.handle} ({pf.netdev or 'no netdev'}): devlink health reporter(s) recovered from "
                   f"errors since the driver loaded: {name_list([r.name for r, _s in bad])}")
        out.append(finding("NicHealthError", pf.handle, msg, severity=worst, netdev=pf.netdev,
                           reporters=[{"handle": r.handle, "reporter": r.name, "state": r.state,
                                       "error": r.error, "recover": r.recover} for r, _s in judged]))
    return out


CHECKS = (Check(60, ("NicHealthError",), lambda i: check(i.snap, i.topo, i.exp)),)
