"""Per PF: SR-IOV, representors (per-PF aggregates; per representor only when opted in), the eswitch
mode and the watched devlink params."""

from __future__ import annotations

import re
from typing import Any

from agent.analysis.topology import Pf
from agent.metrics.families import PF, Families, Scrape, Subject, label

__all__ = ["SUBJECT", "render"]

_DIRECTIONS = ("rx", "tx")


def render(fams: Families, scrape: Scrape) -> None:
    topo = scrape.state.topology
    if scrape.state.snapshot is None or topo is None:
        return
    for pf in topo.pfs:
        _pf(fams, pf, scrape.representor_include)


def _pf(fams: Families, pf: Pf, rep_include: re.Pattern[str] | None) -> None:
    base = (label(pf.bdf), label(pf.netdev))
    if pf.numvfs is not None:
        fams.gauge("railscope_sriov_vfs", "VFs enabled on the PF (sriov_numvfs).", PF, base, pf.numvfs)
    if pf.totalvfs is not None:
        fams.gauge("railscope_sriov_vfs_max", "VFs the PF supports (sriov_totalvfs).", PF, base, pf.totalvfs)
    reps = pf.representors
    fams.gauge("railscope_representors", "Representor netdevs the PF owns (VFs and SFs), stale ones included.",
               PF, base, len(reps))
    fams.gauge("railscope_representors_stale",
               "Representors for VF indexes at or above sriov_numvfs (a leak: their VF is gone).",
               PF, base, len(pf.stale_representors))
    fams.gauge("railscope_representors_down", "Representors that are not oper up.",
               PF, base, len(pf.representors_down))
    if rep_include is not None:
        for r in reps:
            if not rep_include.search(r.netdev):
                continue
            fams.gauge("railscope_representor_up",
                       "1 when the representor is oper up (opt-in, names matching --representor-include).",
                       ("pci", "device"), (label(pf.bdf), r.netdev), 1 if r.up else 0)
            fams.gauge("railscope_representor_stale",
                       "1 when the representor's VF index is at or above sriov_numvfs (opt-in).",
                       ("pci", "device"), (label(pf.bdf), r.netdev), 1 if r.stale else 0)
            # Only when the sampler read statistics for this representor: bulk dumps carry none
            # (each one is a firmware query on mlx5, docs/design.md §3).
            stats = dict(r.link.stats64 or ())
            for key, name, doc in (
                ("bytes", "railscope_representor_bytes", "Bytes through the representor (opt-in)."),
                ("packets", "railscope_representor_packets", "Packets through the representor (opt-in)."),
            ):
                for d in _DIRECTIONS:
                    if f"{d}_{key}" in stats:
                        fams.counter(name, doc, ("pci", "device", "direction"), (label(pf.bdf), r.netdev, d),
                                     stats[f"{d}_{key}"])
    if pf.eswitch_mode is not None:
        fams.info("railscope_devlink_eswitch", "The PF's eswitch mode (devlink dev eswitch show).",
                  PF, base, {"mode": label(pf.eswitch_mode)})
    for pname, value in _params(pf):
        fams.info("railscope_devlink_param", "A watched devlink parameter of the PF (runtime value).",
                  (*PF, "param"), (*base, pname), {"value": label(value)})


def _params(pf: Pf) -> list[tuple[str, Any]]:
    """(name, value) of the PF's watched devlink params that could be read, sorted by name."""
    return sorted((n, v) for n, v in pf.params if v is not None)


SUBJECT = Subject(50, render)
