"""Per rail: its RDMA GID table by RoCE version and address family (``railscope_rail_gids``).

NCCL picks its source GID from this table (``NCCL_IB_GID_INDEX``, else the first RoCE v2 GID of the
address family it is told to use): a rail at 0 for ``type="RoCE v2", family="ipv4"`` is one whose RoCE
traffic has no routable source address. At most four series a rail.
"""

from __future__ import annotations

from collections import Counter

from agent.metrics.families import RAIL, Families, Scrape, Subject, label

__all__ = ["SUBJECT", "render"]

_TYPES = ("RoCE v2", "IB/RoCE v1")


def render(fams: Families, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is None or topo is None or not snap.gids:
        return
    by_rail: dict[str, Counter[tuple[str, str]]] = {}
    for g in snap.gids:
        if g.type in _TYPES:
            by_rail.setdefault(g.netdev, Counter())[(g.type, "ipv4" if g.ipv4 else "ipv6")] += 1
    for rail in topo.rails:
        counts = by_rail.get(rail.netdev_name or "")
        if counts is None:
            continue  # no GID read for this rail (no RDMA device): not a 0, not known
        for kind in _TYPES:
            for family in ("ipv4", "ipv6"):
                fams.gauge("railscope_rail_gids",
                           "GID table entries of the rail netdev on its RDMA port, by RoCE version and address "
                           "family (NCCL needs a RoCE v2 GID of the family it routes).",
                           (*RAIL, "type", "family"),
                           (label(rail.rail), label(rail.plane), label(rail.netdev_name), kind, family),
                           counts.get((kind, family), 0))


SUBJECT = Subject(75, render)
