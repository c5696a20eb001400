"""Link state for the detectors: what the daemon knows of each link between two dumps.

Link messages arrive between the periodic dumps. To turn them into detector observations the daemon
needs the rails' subjects (from the last topology), which ifindexes it knows (an unknown one asks for a
links read), and the newest carrier-loss count of each link, from a message or a dump, whichever is
newer (see ``newest_downs``). Everything here runs on the event loop: no lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.analysis.topology import Topology
from agent.detectors.feed import link_keys_by_ifindex, link_obs, link_subjects, rail_counters
from agent.detectors.observations import LinkObs
from agent.host.netlink.link_events import LinkNote
from agent.model import Link, Snapshot

__all__ = ["LinkState", "NotesOutcome"]


@dataclass(slots=True)
class NotesOutcome:
    """What a batch of link notes asks for."""

    observations: list[tuple[float, LinkObs]] = field(default_factory=list)
    #: a link the daemon does not know came or went: read the links
    unknown: bool = False
    #: a NIC port (representor, uplink) came or went: devlink ports and rdma links changed with it
    ports: bool = False


class LinkState:
    def __init__(self) -> None:
        self.subjects: dict[tuple[str, str], str] = {}
        self.keys_by_ifindex: dict[int, tuple[str, str]] = {}
        #: rail netdev without a PCI function -> subject
        self.pciless: dict[str, str] = {}
        self.known_ifindexes: set[int] = set()
        #: ifindex -> the newest carrier_down_count seen (link message or dump); see newest_downs
        self.downs: dict[int, int] = {}
        self.ifindex_of: dict[str, int] = {}
        #: rail netdev -> (RDMA device, port) of its uplink port
        self.rdma_ports: dict[str, tuple[str, int]] = {}

    def on_dump(self, links: Iterable[Link]) -> None:
        """Rebuilt from each dump, so links gone while their deletion note was dropped are forgotten."""
        links = tuple(links)
        self.known_ifindexes = {lk.ifindex for lk in links}
        self.downs = {lk.ifindex: max(lk.carrier_down_count, self.downs.get(lk.ifindex, 0))
                      for lk in links if lk.carrier_down_count is not None}
        self.ifindex_of = {lk.ifname: lk.ifindex for lk in links}

    def on_topology(self, topo: Topology) -> None:
        self.subjects = link_subjects(topo)
        self.keys_by_ifindex = link_keys_by_ifindex(topo)
        self.pciless = {r.netdev.ifname: r.expected_netdev for r in topo.rails
                        if r.pci is None and r.netdev is not None}
        self.rdma_ports = {r.netdev.ifname: (r.rdma.dev, r.rdma.port) for r in topo.rails
                           if r.netdev is not None and r.rdma is not None}

    def newest_downs(self, ob: Any) -> Any:
        """A dump is read before it is analysed: a link message in between already gave the detectors
        a newer carrier loss count. Going back to the dump's count would look like a counter reset,
        and the next message would count the same loss twice."""
        if isinstance(ob, LinkObs) and ob.ifindex is not None and ob.ifindex in self.downs:
            return replace(ob, carrier_down_count=self.downs[ob.ifindex])
        return ob

    def pciless_obs(self, snap: Snapshot) -> list[LinkObs]:
        """Rails with no PCI function (a virtual netdev named like a rail, as in a test netns) are
        keyed by their name: the detectors' (function, port) key does not exist for them."""
        out = []
        for name, subject in self.pciless.items():
            lk = snap.link(name)
            if lk is not None:
                out.append(LinkObs(key=("", name), netdev=name, ifindex=lk.ifindex,
                                   carrier_down_count=self.downs.get(lk.ifindex, lk.carrier_down_count),
                                   carrier=lk.carrier, operstate=lk.operstate, subject=subject))
        return out

    def on_notes(self, notes: Iterable[LinkNote]) -> NotesOutcome:
        out = NotesOutcome()
        for note in notes:
            if note.deleted or note.ifindex not in self.known_ifindexes:
                out.unknown = True
                out.ports = out.ports or bool(note.phys_port_name)
            if note.deleted:
                self.known_ifindexes.discard(note.ifindex)
                continue
            if note.ifname:
                self.ifindex_of[note.ifname] = note.ifindex
            if note.carrier_down_count is not None:
                self.downs[note.ifindex] = max(note.carrier_down_count, self.downs.get(note.ifindex, 0))
            ob = link_obs(note, self.subjects, admin_up=note.admin_up, keys_by_ifindex=self.keys_by_ifindex)
            if ob is None and note.ifname in self.pciless:
                ob = LinkObs(key=("", note.ifname), netdev=note.ifname, ifindex=note.ifindex,
                             carrier_down_count=note.carrier_down_count, carrier=note.carrier,
                             operstate=note.operstate, admin_up=note.admin_up, subject=self.pciless[note.ifname])
            if ob is not None:
                out.observations.append((note.ts, ob))
        return out

    def counter_samples(self, snap: Snapshot, topo: Topology,
                        extra: dict[str, dict[str, int]]) -> list[tuple[str, str, dict[str, int]]]:
        """(netdev, subject, counters) of every rail: ethtool counters, the newest carrier loss count and
        the recorder's extras."""
        out = []
        for netdev, subject, counters in rail_counters(snap, topo):
            idx = self.ifindex_of.get(netdev)
            if idx in self.downs:
                counters["carrier_down_count"] = self.downs[idx]
            counters.update(extra.get(netdev, {}))
            out.append((netdev, subject, counters))
        return out
