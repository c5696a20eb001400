"""Per rail: the rail itself (netdev, PCI function, RDMA device), its link state, carrier changes, speed,
MTU and stats64 traffic, its firmware, then its pause counters (``pfc``) and RDMA port (``rdma``)."""

from __future__ import annotations

from agent.analysis.topology import Rail
from agent.findings import RailRow
from agent.metrics import pfc, rdma
from agent.metrics.families import RAIL, Families, Scrape, Subject, label
from agent.model import Link, Snapshot

__all__ = ["OPER_STATES", "SUBJECT", "render"]

#: rtnetlink ``IF_OPER_*`` values (RFC 2863), include/uapi/linux/if.h.
OPER_STATES = {"UNKNOWN": 0, "NOTPRESENT": 1, "DOWN": 2, "LOWERLAYERDOWN": 3, "TESTING": 4,
               "DORMANT": 5, "UP": 6}

_DIRECTIONS = ("rx", "tx")


def render(fams: Families, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is None or topo is None:
        return
    rows = scrape.rows
    # Always served: 0 is the one series of a node where no rail was found (no naming rule, no name a
    # template matches, no --rail-map or --rails), which would otherwise serve no per-rail series at all
    # and look like a healthy node to an alert on railscope_rail_up == 0. A rail the topology lists twice
    # (two rules naming one rail) is one rail, as its series are.
    fams.gauge("railscope_rails", "Rails found on the node (udev naming rules, --rail-map, template names or "
               "--rails); 0: nothing is judged per rail.", (), (), len({(r.rail, r.plane) for r in topo.rails}))
    for rail in topo.rails:
        _rail(fams, snap, rail, rows.get((rail.rail, rail.plane)))


def _rail(fams: Families, snap: Snapshot, rail: Rail, row: RailRow | None) -> None:
    link: Link | None = rail.netdev
    netdev = link.ifname if link is not None else rail.expected_netdev
    base = (label(rail.rail), label(rail.plane), label(netdev))
    rdma_link = rail.rdma
    fams.info("railscope_rail", "A rail: its netdev, PCI function and RDMA device.",
              RAIL, base, {"pci": label(rail.pci), "rdma": label(rdma_link.dev if rdma_link else None)})
    fams.gauge("railscope_rail_up",
               "1 when the rail netdev is oper up with carrier, 0 when it is down or missing.",
               RAIL, base, 1 if link is not None and link.is_oper_up else 0)
    if link is None:
        return
    if link.operstate in OPER_STATES:
        fams.gauge("railscope_rail_oper_state",
                   "Kernel operstate as IF_OPER_* (0 unknown, 2 down, 3 lowerlayerdown, 5 dormant, 6 up).",
                   RAIL, base, OPER_STATES[link.operstate])
    if link.carrier is not None:
        fams.gauge("railscope_rail_carrier", "1 when the rail netdev has carrier.", RAIL, base, link.carrier)
    for attr, name, doc in (
        ("carrier_changes", "railscope_rail_carrier_changes", "Carrier changes of the rail netdev."),
        ("carrier_up_count", "railscope_rail_carrier_up_changes", "Carrier gains of the rail netdev."),
        ("carrier_down_count", "railscope_rail_carrier_down_changes", "Carrier losses of the rail netdev."),
    ):
        val = getattr(link, attr)
        if val is not None:
            fams.counter(name, doc, RAIL, base, val)
    speed = link.speed_mbps
    if speed is None and row is not None:
        speed = row.speed_mbps
    if speed is not None and speed > 0:
        fams.gauge("railscope_rail_speed_bytes", "Link speed in bytes per second (/sys/class/net/<if>/speed).",
                   RAIL, base, speed * 1_000_000 / 8)
    if link.mtu is not None:
        fams.gauge("railscope_rail_mtu_bytes", "MTU of the rail netdev.", RAIL, base, link.mtu)
    stats = dict(link.stats64 or ())
    for key, name, doc in (
        ("bytes", "railscope_rail_bytes", "Bytes through the rail netdev (rtnetlink stats64)."),
        ("packets", "railscope_rail_packets", "Packets through the rail netdev (rtnetlink stats64)."),
        ("errors", "railscope_rail_errors", "Errored packets on the rail netdev (rtnetlink stats64)."),
        ("dropped", "railscope_rail_dropped", "Packets the rail netdev dropped (rtnetlink stats64)."),
    ):
        for d in _DIRECTIONS:
            if f"{d}_{key}" in stats:
                fams.counter(name, doc, (*RAIL, "direction"), (*base, d), stats[f"{d}_{key}"])
    est = snap.ethtool_of(link.ifname)
    if est is not None:
        pfc.render_rail(fams, base, est.as_dict())
    drv = snap.driver_of(link.ifname)
    if drv is not None and (drv.firmware or drv.psid):
        fams.info("railscope_firmware", "NIC firmware of the rail (ethtool -i).", RAIL, base,
                  {"version": label(drv.firmware), "psid": label(drv.psid)})
    if rdma_link is not None:
        rdma.render_rail(fams, snap, rail, rdma_link)


SUBJECT = Subject(40, render)
