"""RepresentorStale: representors of VFs that no longer exist, and OVS ports whose netdev is gone.

One finding per PF with every name in the evidence (docs/design.md §4). A PF whose ``sriov_numvfs`` could
not be read judges nothing. OVS ports that belong to no PF are reported on ``node``.
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding, name_list
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    orphans: dict[str, list[str]] = {}
    reasons: dict[str, dict[str, str]] = {}
    for o in topo.ovs_orphans:
        orphans.setdefault(o.owner, []).append(o.name)
        reasons.setdefault(o.owner, {})[o.name] = o.why
    out: list[Finding] = []
    for pf in topo.pfs:
        stale = list(pf.stale_representors)
        ovs = orphans.pop(pf.handle, [])
        if not stale and not ovs:
            continue
        parts = []
        if stale:
            parts.append(f"{len(stale)} representor(s) of VFs that do not exist (sriov_numvfs {pf.numvfs}): "
                         + name_list(stale))
        if ovs:
            parts.append(f"{len(ovs)} OVS port(s) whose netdev is gone: " + name_list(ovs))
        out.append(finding("RepresentorStale", pf.handle, f"{pf.handle} ({pf.netdev or 'no netdev'}): "
                           + "; ".join(parts), numvfs=pf.numvfs, stale_representors=stale or None,
                           ovs_orphans=ovs or None, ovs_reasons=reasons.get(pf.handle)))
    for owner, names in sorted(orphans.items()):
        out.append(finding("RepresentorStale", owner,
                           f"{len(names)} OVS port(s) whose netdev is gone: " + name_list(names),
                           ovs_orphans=names, ovs_reasons=reasons.get(owner)))
    return out


CHECKS = (Check(40, ("RepresentorStale",), lambda i: check(i.snap, i.topo, i.exp)),)
