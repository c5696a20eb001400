"""EswitchModeUnexpected and EswMultiportUnexpected.

Expectations judge only the NICs that carry rails, and a value devlink could not read raises nothing
(docs/design.md §4 "Scope of expectations"). ``esw_multiport`` is the NIC's LAG mode, runtime-only (lost on
a reboot or driver reload) and reads the same on every PF of a NIC; PFs that disagree are a torn LAG
state, reported whatever the expectation, on the PF that differs from the NIC's lowest PF.
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    rail_nics = [n for n in topo.nics if n.carries_rails]
    if exp.eswitch_mode is not None:
        for nic in rail_nics:
            for bdf in nic.pfs:
                pf = topo.pf(bdf)
                if pf is None or not pf.numvfs or pf.eswitch_mode is None:
                    continue
                if pf.eswitch_mode != exp.eswitch_mode:
                    out.append(finding(
                        "EswitchModeUnexpected", pf.handle,
                        f"{pf.handle} ({pf.netdev or 'no netdev'}) has {pf.numvfs} VF(s) and its eswitch is "
                        f"{pf.eswitch_mode}, expected {exp.eswitch_mode}",
                        mode=pf.eswitch_mode, expected=exp.eswitch_mode, numvfs=pf.numvfs, netdev=pf.netdev))
    for nic in topo.nics:
        values = dict(nic.esw_multiport_by_pf)
        if not values:
            continue
        # The value is the lowest readable PF's (every PF of a NIC reads the same), but the subject is
        # always the NIC's lowest PF: a busy PF must not move the alert to another subject.
        base = next(iter(values))
        subject = f"pci/{nic.lowest_pf}"
        read_on = "" if nic.lowest_pf == base else f" (read on pci/{base})"
        for bdf in nic.torn_pfs:
            out.append(finding(
                "EswMultiportUnexpected", f"pci/{bdf}",
                f"torn LAG state: esw_multiport is {_word(values[bdf])} on pci/{bdf} but "
                f"{_word(nic.esw_multiport)} on pci/{base}, PFs of the same NIC",
                value=values[bdf], nic_value=nic.esw_multiport, lowest_pf=f"pci/{base}", switch_id=nic.switch_id,
                by_pf={f"pci/{b}": v for b, v in values.items()}))
        if nic.carries_rails and exp.esw_multiport is not None and nic.esw_multiport != exp.esw_multiport:
            out.append(finding(
                "EswMultiportUnexpected", subject,
                f"esw_multiport (multiport eswitch LAG) is {_word(nic.esw_multiport)} on the NIC of {subject}"
                f"{read_on}, "
                f"expected {_word(exp.esw_multiport)} (runtime-only: a reboot or driver reload resets it)",
                value=nic.esw_multiport, expected=exp.esw_multiport, switch_id=nic.switch_id,
                pfs=[f"pci/{b}" for b in nic.pfs]))
    return out


def _word(v: bool | None) -> str:
    return "unknown" if v is None else str(v).lower()


CHECKS = (Check(30, ("EswitchModeUnexpected", "EswMultiportUnexpected"), lambda i: check(i.snap, i.topo, i.exp)),)
