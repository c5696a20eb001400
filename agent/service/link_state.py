"""Link state for the detectors: what the daemon knows of each link between two dumps.

Link messages arrive between the periodic dumps (every 15 s). To turn them into detector observations
the daemon needs the rails' subjects (from the last topology), which ifindexes it knows (an unknown one
asks for a links read), and the newest carrier-loss count of each link, from a message or a dump,
whichever is newer (see ``newest_downs``).

A message of a known link also updates that link's record in the daemon's last dump (``on_notes``):
operstate, carrier and the carrier counters come in every RTM_NEWLINK (rtnl_fill_ifinfo), so a rail's
``railscope_rail_up``, its carrier counters and its ``RailLinkDown`` follow the cable within a second,
with no read of the node. A dump read while messages were arriving would put the older state back:
the messages read after the dump started are laid over it (``on_dump``).

Everything here runs on the event loop: no lock, except ``last_rail_change``, which an event capture's
thread reads (one attribute, assigned whole).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    #: the dump's links with the messages' state of the known links they changed; None: none changed
    links: tuple[Link, ...] | None = None
    #: a rail's record changed: its metrics and findings must be judged again
    rail_changed: bool = False


def _follow(lk: Link, note: LinkNote) -> Link:
    """``lk`` as the message says it is now. The counters only rise while the ifindex stays: the larger
    is the newer (a dump read after the message has it already)."""
    def most(a: int | None, b: int | None) -> int | None:
        return b if a is None else a if b is None else max(a, b)

    return replace(lk, operstate=note.operstate if note.operstate is not None else lk.operstate,
                   carrier=note.carrier if note.carrier is not None else lk.carrier,
                   carrier_changes=most(lk.carrier_changes, note.carrier_changes),
                   carrier_up_count=most(lk.carrier_up_count, note.carrier_up_count),
                   carrier_down_count=most(lk.carrier_down_count, note.carrier_down_count))


def _same(a: Link, b: Link) -> bool:
    return (a.operstate == b.operstate and a.carrier == b.carrier and a.carrier_changes == b.carrier_changes
            and a.carrier_up_count == b.carrier_up_count and a.carrier_down_count == b.carrier_down_count)


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
        #: the rail netdevs of the last links read
        self.rails: frozenset[str] = frozenset()
        #: ifindex -> where its record sits in the last dump's links
        self._pos: dict[int, int] = {}
        #: ifindex -> the newest message that changed its record since the last dump started
        self._live: dict[int, LinkNote] = {}
        #: (unix s, netdev, oper up) of the newest operstate / carrier change of a rail a message told
        self.last_rail_change: tuple[float, str, bool] | None = None

    def on_dump(self, links: Iterable[Link], rails: Iterable[str] = (), started: float | None = None) -> tuple[Link, ...]:
        """Rebuilt from each dump, so links gone while their deletion note was dropped are forgotten.
        Returns the dump with the state of the messages read since the dump ``started`` (unix s) laid
        over it: the dump may have been answered before them."""
        links = tuple(links)
        self._live = {} if started is None else {i: n for i, n in self._live.items() if n.ts >= started}
        if self._live:
            live = self._live
            links = tuple(_follow(lk, live[lk.ifindex]) if lk.ifindex in live else lk for lk in links)
        self.known_ifindexes = {lk.ifindex for lk in links}
        self.downs = {lk.ifindex: max(lk.carrier_down_count, self.downs.get(lk.ifindex, 0))
                      for lk in links if lk.carrier_down_count is not None}
        self.ifindex_of = {lk.ifname: lk.ifindex for lk in links}
        self._pos = {lk.ifindex: i for i, lk in enumerate(links)}
        self.rails = frozenset(rails)
        return links

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

    def on_notes(self, notes: Iterable[LinkNote], links: Sequence[Link] = ()) -> NotesOutcome:
        """What a batch of messages asks for; ``links``: the last dump's, whose records of known links
        follow the messages (``out.links``)."""
        out = NotesOutcome()
        patched: list[Link] | None = None
        for note in notes:
            if note.deleted or note.ifindex not in self.known_ifindexes:
                out.unknown = True
                out.ports = out.ports or bool(note.phys_port_name)
            if note.deleted:
                self.known_ifindexes.discard(note.ifindex)
                continue
            pos = self._pos.get(note.ifindex)
            cur = links if patched is None else patched
            if pos is not None and pos < len(cur) and cur[pos].ifindex == note.ifindex:
                old = cur[pos]
                if note.ifname and note.ifname != old.ifname:
                    out.unknown = True  # renamed: what it is to the topology takes a links read
                else:
                    new = _follow(old, note)
                    if not _same(old, new):
                        if patched is None:
                            patched = list(links)
                        patched[pos] = new
                        self._live[note.ifindex] = note
                        if old.ifname in self.rails:
                            out.rail_changed = True
                            if old.operstate != new.operstate or old.carrier != new.carrier:
                                self.last_rail_change = (note.ts, old.ifname, new.is_oper_up)
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
        if patched is not None:
            out.links = tuple(patched)
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
