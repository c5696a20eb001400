"""Per rail: the switch port its LLDP neighbour says it is cabled to (``railscope_rail_peer_info``).

One series per rail that has a neighbour, never peer labels on the counters: a recabling changes this one
series, not every series of the rail. The peer's names came off the wire: the reader kept them printable
(escaped, cut); here they are cut again to a label's size.
"""

from __future__ import annotations

from agent.metrics.families import RAIL, Families, Scrape, Subject, label

__all__ = ["LABEL_MAX", "SUBJECT", "render"]

#: a peer label value is cut to this many characters (an LLDP string may be 255 bytes)
LABEL_MAX = 64


def _cut(value: str | None) -> str:
    text = label(value)
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 3] + "..."


def render(fams: Families, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is None or topo is None:
        return
    for rail in topo.rails:
        n = snap.neighbor_of(rail.netdev_name)
        if n is None:
            continue
        fams.gauge("railscope_rail_peer_info",
                   "1 for the rail's LLDP neighbour: the switch (its system name, else its chassis ID) and port the "
                   "rail is cabled to.", (*RAIL, "peer_system", "peer_port"),
                   (label(rail.rail), label(rail.plane), label(n.netdev), _cut(n.leaf), _cut(n.port)), 1)


SUBJECT = Subject(45, render)
