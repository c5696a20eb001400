"""What a source is: the declaration every reader module makes of its own read (``SOURCE``).

A *source* is one schedulable read of the node: its name (the ``--<name>-interval`` flag, the
``source`` label of ``railscope_scrape_collector_*``, the ``--disable-source`` word), the tools it
runs, its default interval and the least one allowed, the snapshot fields it owns, whether it
touches firmware, what it needs of the sources before it and what it provides to those after it,
the roles the agent's daemon gives it, and the function that reads it. Each reader module declares
its own ``SOURCE = Source(...)``; ``agent.readers.sources`` finds them, puts them in order and
composes their reads. Nothing here names a source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Link, PciFunction, RailRule
from agent.readers.common import Notes

if TYPE_CHECKING:
    from agent.readers.links import LinkCache

__all__ = ["PROVIDED_BY_CALLER", "ROLES", "Context", "Part", "Reader", "Source", "part"]

#: The roles the agent's daemon gives sources (``Source.roles``), each a promise the daemon keeps
#: without naming the source:
#:
#: - ``boot``: read first when the agent starts, and waited on (at most its deadline) before the
#:   others start; ``/readyz`` waits for it.
#: - ``link-events``: read again (at most every couple of seconds) when a link event names a link
#:   the agent does not know yet.
#: - ``devlink-events``: read again when a devlink notification arrives.
#: - ``ports``: read again (at most every 30 s) when a NIC port (representor, uplink) came or went.
#: - ``recorder``: the rails' incident counters at the flight recorder's resolution; its interval is
#:   the recorder's, and its reads feed the detectors' counters without a new analysis.
ROLES = frozenset({"boot", "link-events", "devlink-events", "ports", "recorder"})

#: Context fields the caller sets (the daemon's topology, its caches), not any source.
PROVIDED_BY_CALLER = frozenset({"rdma_ports", "link_cache", "recorder"})


@dataclass(frozen=True, slots=True)
class Context:
    """What the sources read before this one found, that this one needs (``Source.needs``)."""

    rules: tuple[RailRule, ...] = ()
    links: tuple[Link, ...] = ()
    functions: tuple[PciFunction, ...] = ()
    #: the rail netdevs and their PCI functions (what counters and rdma read)
    rails: tuple[str, ...] = ()
    rail_bdfs: tuple[str, ...] = ()
    #: rail netdev -> (RDMA device, port) of its uplink port, from the daemon's last topology
    rdma_ports: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: the daemon's dump cache (None: decode every entry)
    link_cache: LinkCache | None = None
    #: read the flight recorder's extra counters (stats64 traffic, RDMA loss) with the counters
    recorder: bool = False
    #: why devlink answers nothing on this node (no tool, no devlink family), from the devlink read:
    #: every other devlink command would fail the same way
    devlink_gone: str | None = None


@dataclass(frozen=True, slots=True)
class Part:
    """One source's read: the snapshot fields it owns, and why anything is missing."""

    source: str
    taken_at: float
    fields: dict[str, Any] = field(default_factory=dict)
    unavailable: tuple[tuple[str, str], ...] = ()
    busy: tuple[str, ...] = ()
    #: what this read gives beyond the snapshot fields: the ``Context`` fields its source
    #: ``provides`` to the sources after it, and ``recorder_counters`` (rail netdev -> the flight
    #: recorder's extra counters: stats64 traffic, RDMA loss) for the daemon
    gives: dict[str, Any] = field(default_factory=dict)


Reader = Callable[[Host, ReadConfig, Context, Notes], Part]


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    #: the ``--<name>-interval`` help: what is read
    doc: str
    #: argv prefixes of the commands this source runs (a capture skips the tools of a hung source;
    #: a node image's items are attributed to a source by the longest prefix)
    commands: tuple[tuple[str, ...], ...]
    interval_s: float
    min_interval_s: float
    fields: tuple[str, ...]
    read: Reader
    #: its place among the sources that do not depend on one another: the order of a first sample,
    #: of ``take_snapshot`` and of the "not available" notes (a source still comes after every
    #: source that provides what it needs; the registry checks it)
    order: int = 1000
    #: the ``Context`` fields it reads, each provided by an earlier source or by the caller
    needs: tuple[str, ...] = ()
    #: the ``Context`` fields its ``Part.gives`` sets for the sources after it
    provides: tuple[str, ...] = ()
    #: what the daemon does with it beyond its interval (``ROLES``)
    roles: frozenset[str] = frozenset()
    #: reads the NIC's firmware synchronously (mlx5 ETHTOOL_GSTATS): one at a time per PF
    firmware_touching: bool = False
    #: the link dump is this source's: node images' netlink items belong to it, and its read is
    #: the snapshot's time (``taken_at``)
    netlink: bool = False
    #: the daemon runs this source in another source's thread, after it: a tool stuck in the driver
    #: (devlink waits on one lock per instance) then holds one thread, never two
    lane: str | None = None
    #: nothing else depends on it: the budget guard may pause it when the agent passes its CPU or
    #: memory budget (``agent.service.budget``)
    optional: bool = False
    #: argv prefixes among ``commands`` that reach no device even in a firmware-touching source (a
    #: tool's own ``--version``): not serialised by the firmware gate
    no_device: tuple[tuple[str, ...], ...] = ()

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c[0] for c in self.commands))


def part(source: str, notes: Notes, **kw: Any) -> Part:
    """A ``Part`` of ``source`` taken now, with what ``notes`` holds missing and busy."""
    return Part(source=source, taken_at=time.time(), unavailable=tuple(notes.unavailable),
                busy=tuple(notes.busy), **kw)
