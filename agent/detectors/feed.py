"""Observations from a periodic ``Snapshot`` and its ``Topology`` (pure: records in, records out).

The watcher calls ``observations_from_snapshot`` on every sample and ``link_obs`` on every netlink
link message, with the ``link_subjects`` of the latest topology. Which links are watched: the rails
and the other uplinks of the NICs that carry rails (a second port of a dual-port rail NIC).
Representors follow their pods' VFs up and down, and a management NIC is another driver: both are
left out, so "every watched netdev recreated" means the rail driver reloaded.
"""

from __future__ import annotations

from typing import Protocol

from agent.analysis.topology import Topology
from agent.detectors.observations import (
    ConfigObs,
    CountersObs,
    DriverObs,
    HealthObs,
    LinkObs,
    Obs,
    RepresentorObs,
)
from agent.model import Link, Snapshot

__all__ = ["RESTARTS_FIELD", "link_keys_by_ifindex", "link_obs", "link_subjects", "observations_from_snapshot", "rail_counters"]

#: The snapshot field whose every fresh read feeds a detector at once, not at the next analysis: the
#: daemons' processes, which the restart detector (``agent.detectors.daemon_restarts``) follows.
RESTARTS_FIELD = "processes"


class LinkLike(Protocol):
    """A ``model.Link`` or a netlink watcher's note: the attributes ``link_obs`` reads."""

    @property
    def ifindex(self) -> int: ...
    @property
    def ifname(self) -> str | None: ...
    @property
    def parent_dev(self) -> str | None: ...
    @property
    def phys_port_name(self) -> str | None: ...
    @property
    def carrier_down_count(self) -> int | None: ...
    @property
    def carrier(self) -> int | None: ...
    @property
    def operstate(self) -> str | None: ...


def link_subjects(topo: Topology) -> dict[tuple[str, str], str]:
    """(PCI function, phys_port_name) -> subject for every watched link: the rule's expected rail
    name for a rail, the netdev name for another uplink of a rail NIC."""
    return {key: subject for key, subject, _ in _watched(topo)}


def link_keys_by_ifindex(topo: Topology) -> dict[int, tuple[str, str]]:
    """ifindex -> key of the watched links, for link messages without ``IFLA_PARENT_DEV_NAME``
    (kernels before 5.17); valid until the netdev is recreated."""
    return {link.ifindex: key for key, _, link in _watched(topo)}


def _watched(topo: Topology) -> list[tuple[tuple[str, str], str, Link]]:
    out: dict[tuple[str, str], tuple[str, Link]] = {}
    for nic in topo.nics:
        if not nic.carries_rails:
            continue
        for bdf in nic.pfs:
            pf = topo.pf(bdf)
            if pf is not None and pf.link is not None:
                out[(bdf, pf.link.phys_port_name or "")] = (pf.link.ifname, pf.link)
    for rail in topo.rails:
        if rail.pci is not None and rail.netdev is not None:
            out[(rail.pci, rail.netdev.phys_port_name or "")] = (rail.expected_netdev, rail.netdev)
    return [(key, subject, link) for key, (subject, link) in out.items()]


def link_obs(link: LinkLike, subjects: dict[tuple[str, str], str], *, admin_up: bool | None = None,
             keys_by_ifindex: dict[int, tuple[str, str]] | None = None) -> LinkObs | None:
    """The observation of one watched link (a ``Link`` or a netlink message's note), else None."""
    if not link.ifname:
        return None
    if link.parent_dev:
        key = (link.parent_dev, link.phys_port_name or "")
    elif keys_by_ifindex and link.ifindex in keys_by_ifindex:
        key = keys_by_ifindex[link.ifindex]
    else:
        return None
    subject = subjects.get(key)
    if subject is None:
        return None
    return LinkObs(key=key, netdev=link.ifname, ifindex=link.ifindex, carrier_down_count=link.carrier_down_count,
                   carrier=link.carrier, operstate=link.operstate, admin_up=admin_up, subject=subject)


def rail_counters(snap: Snapshot, topo: Topology) -> list[tuple[str, str, dict[str, int]]]:
    """(netdev, subject, counters by raw name) of each rail that has a netdev: ethtool statistics,
    ``carrier_down_count`` and the RDMA uplink port's counters / hw_counters. What the flight
    recorder keeps (under the netdev's name) and the PFC detectors judge — and the rail PF's AER totals
    (``aer_dev_*``, read by the pcie source every minute), so their rise is judged like the PHY counters'."""
    out: list[tuple[str, str, dict[str, int]]] = []
    pcie = {link.bdf: link for link in snap.pcie}
    for rail in topo.rails:
        if rail.netdev is None:
            continue
        counters: dict[str, int] = {}
        if rail.rdma_device is not None and rail.rdma is not None:
            counters.update((name, v) for port, name, v in rail.rdma_device.counters if port == rail.rdma.port)
        stats = snap.ethtool_of(rail.netdev.ifname)
        if stats is not None:
            counters.update(stats.counters)
        if rail.netdev.carrier_down_count is not None:
            counters["carrier_down_count"] = rail.netdev.carrier_down_count
        link = pcie.get(rail.pci) if rail.pci else None
        if link is not None:
            counters.update(link.aer_counters())
        out.append((rail.netdev.ifname, rail.expected_netdev, counters))
    return out


def observations_from_snapshot(snap: Snapshot, topo: Topology) -> list[Obs]:
    """Every observation one sample gives, driver first: a reload seen in this sample must be
    known before the reset counters and re-applied config values it explains."""
    obs: list[Obs] = [DriverObs(snap.versions.mlx5_srcversion, snap.versions.mlx5_version)]
    for key, subject, link in _watched(topo):
        obs.append(LinkObs(key=key, netdev=link.ifname, ifindex=link.ifindex,
                           carrier_down_count=link.carrier_down_count, carrier=link.carrier,
                           operstate=link.operstate, subject=subject))
    for pf in topo.pfs:
        obs.append(ConfigObs(pf.handle, "sriov_numvfs", pf.numvfs))
        obs.append(ConfigObs(pf.handle, "eswitch_mode", pf.eswitch_mode))
        obs.extend(ConfigObs(pf.handle, f"param:{name}", value) for name, value in pf.params)
        reps = pf.vf_representors
        obs.append(RepresentorObs(pf.handle, pf.numvfs, tuple(r.index for r in reps), tuple(r.netdev for r in reps)))
    for netdev, subject, counters in rail_counters(snap, topo):
        obs.append(CountersObs(netdev, counters, subject=subject))
    for pf in topo.rail_pfs:
        obs.extend(HealthObs(pf.handle, r.name, r.handle, r.state, r.error) for r in snap.health
                   if r.dev == pf.handle or r.dev in pf.nested)
    return obs
