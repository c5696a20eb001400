"""RailMissing, RailNameMismatch, RailTemplateInvalid, RailRuleUnreadable, RailLinkDown (docs/design.md §4 "Rails").

A rail is keyed by its PCI function, so a failed rename is ``RailNameMismatch`` only (not also
``RailMissing``), and a rail with no netdev is ``RailMissing`` only. A rules file whose names are
longer than IFNAMSIZ gives one ``RailTemplateInvalid`` instead of one mismatch per rail: udev can
never apply such a name and the netdev keeps its kernel name.
"""

from __future__ import annotations

from agent.analysis.checks._util import Check, finding, name_list, rail_label
from agent.analysis.topology import Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot
from agent.naming import IFNAMSIZ_MAX


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    by_file: dict[str, list[tuple[int, str]]] = {}
    for file, line, why in snap.rule_problems:
        by_file.setdefault(file, []).append((line, why))
    for file, probs in sorted(by_file.items()):
        # A naming line udev may still apply but railscope cannot read: the rail it names is judged
        # without it, so the file is named here, not only under "not available".
        first_line, first_why = probs[0]
        out.append(finding(
            "RailRuleUnreadable", file,
            f"{len(probs)} naming rule line(s) cannot be read; line {first_line}: {first_why}",
            lines=[n for n, _ in probs], reasons=[w for _, w in probs][:8]))
    for prob in topo.template_problems:
        out.append(finding(
            "RailTemplateInvalid", prob.file,
            f"{len(prob.names)} netdev name(s) in {prob.file} are longer than {IFNAMSIZ_MAX} characters "
            f"(IFNAMSIZ) and can never be applied: {name_list(prob.names)}",
            names=list(prob.names), max_len=IFNAMSIZ_MAX))
    for rail in topo.rails:
        name = rail.expected_netdev
        if rail.netdev is None:
            where = f"PCI function {rail.pci}" if rail.pci else "this node"
            # sysfs was read (other functions are known) but has no such function: the NIC itself is
            # gone from the bus (link training, AER fatal, a dead card), not only its netdev.
            off_bus = bool(rail.pci and snap.pci and snap.pci_function(rail.pci) is None)
            # a --rail-map rail that no rule names has no expected name: its subject is the function
            expected = "named by --rail-map" if name == rail.pci else f"expected {name}"
            out.append(finding(
                "RailMissing", name, f"rail {rail_label(rail.rail, rail.plane)}: no netdev on {where} "
                f"({expected})" + ("; the PCI function is not in /sys/bus/pci/devices either" if off_bus else ""),
                pci=rail.pci, source=rail.source, numvfs=rail.pf.numvfs if rail.pf else None,
                pci_function_present=False if off_bus else None))
            continue
        actual = rail.netdev.ifname
        if rail.renamed and not rail.name_too_long:
            out.append(finding(
                "RailNameMismatch", name,
                f"rail {rail_label(rail.rail, rail.plane)}: the uplink of {rail.pci} is named {actual}, "
                f"not {name} (the udev rename did not apply)", pci=rail.pci, actual=actual, rule=rail.rule_file))
        if not rail.netdev.is_oper_up:
            out.append(finding(
                "RailLinkDown", name,
                f"rail {rail_label(rail.rail, rail.plane)}: {actual} is not up "
                f"(operstate {rail.netdev.operstate}, carrier {rail.netdev.carrier})",
                netdev=actual, operstate=rail.netdev.operstate, carrier=rail.netdev.carrier,
                carrier_down_count=rail.netdev.carrier_down_count))
    return out


CHECKS = (Check(10, ("RailMissing", "RailNameMismatch", "RailTemplateInvalid", "RailRuleUnreadable", "RailLinkDown"),
                lambda i: check(i.snap, i.topo, i.exp)),)
