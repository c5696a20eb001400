"""The agent's sources: each reads one part of a ``Snapshot`` on its own schedule.

``take_snapshot`` (``agent/snapshot.py``) reads everything in one go, which is what ``doctor`` and a
capture want. The agent instead keeps the latest ``Snapshot`` and lets each source replace its own
fields, so that devlink and rdma (slow, and busy while the SR-IOV daemon creates VFs) are read
every minute while links are read every 15 s and the rail counters every second (DESIGN §3). The
readers, their order and the rail selection are the snapshot module's own, so a composed snapshot
reads the same as ``take_snapshot`` on the same node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Link, Snapshot
from agent.readers.common import Notes, read_word, to_int
from agent.readers.devlink import read_devlink
from agent.readers.ethtool import read_ethtool
from agent.readers.links import parse_link, read_link_stats, read_speeds, with_stats
from agent.readers.ovs import read_ovs
from agent.readers.pci import functions_of_links, read_bus_devices, read_pci
from agent.readers.rdma import read_rdma
from agent.readers.snapshot import rail_netdevs, with_parents
from agent.readers.udev import read_rules
from agent.readers.versions import read_versions

__all__ = ["SOURCES", "LinkCache", "Part", "Progress", "compose", "read_config", "read_counters", "read_devlink_part",
           "read_links_part", "read_rdma_part"]

#: The agent's sources, in the order a first sample reads them (the snapshot's dependency order).
SOURCES = ("config", "links", "devlink", "rdma", "counters")

#: Snapshot fields each source owns.
FIELDS: dict[str, tuple[str, ...]] = {
    "config": ("rules", "ovs"),
    "links": ("versions", "links", "pci", "node"),
    "devlink": ("devlink_devs", "eswitch", "params", "ports"),
    "rdma": ("rdma_links", "rdma_netns", "rdma_devices"),
    "counters": ("ethtool", "drivers"),
}

#: RDMA port counters read every second for the flight recorder (the rest every rdma interval).
RDMA_RECORDED = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled")

#: stats64 keys the recorder keeps beside the incident counters: the traffic around an incident.
TRAFFIC = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped")


class Progress:
    """What a source's thread is reading right now (for the ``device`` label of a hung source)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._device = ""

    def set(self, device: str) -> None:
        with self._lock:
            self._device = device

    def get(self) -> str:
        with self._lock:
            return self._device


@dataclass(frozen=True, slots=True)
class Part:
    """One source's read: the snapshot fields it owns, and why anything is missing."""

    source: str
    taken_at: float
    fields: dict[str, Any] = field(default_factory=dict)
    unavailable: tuple[tuple[str, str], ...] = ()
    busy: tuple[str, ...] = ()
    #: links part: the rail netdevs and their PCI functions (what counters and rdma read)
    rails: tuple[str, ...] = ()
    rail_bdfs: tuple[str, ...] = ()
    #: counters part: rail netdev -> extra counters (stats64 traffic, RDMA loss) for the recorder
    extra: dict[str, dict[str, int]] = field(default_factory=dict)


def _part(source: str, notes: Notes, **kw: Any) -> Part:
    return Part(source=source, taken_at=time.time(), unavailable=tuple(notes.unavailable),
                busy=tuple(notes.busy), **kw)


def read_config(host: Host, cfg: ReadConfig) -> Part:
    """udev naming rules and OVS interfaces: they change with the operators, not by the second."""
    notes = Notes()
    rules = read_rules(host, notes)
    ovs = read_ovs(host, cfg.command_timeout_s, notes)
    return _part("config", notes, fields={"rules": rules, "ovs": ovs})


class LinkCache:
    """The links of the previous dump, so that an unchanged link is not decoded into a record again.

    On a node of 2,050 netdevs almost nothing changes between two dumps 15 s apart, and turning
    every dump entry into a ``Link`` costs as much CPU as the dump itself (measured: about 40 ms of
    84 ms). Comparing an entry with the previous one costs a small fraction of that.
    """

    def __init__(self) -> None:
        self._prev: dict[Any, tuple[dict[str, Any], Link]] = {}

    def links(self, host: Host, notes: Notes) -> tuple[Link, ...]:
        """``agent.readers.links.read_links``, with the unchanged entries' records reused."""
        try:
            dump = host.links()
        except Exception as exc:  # the reader's contract: a failing dump is "not available"
            notes.missing("netlink", f"link dump failed: {exc}")
            return ()
        if dump is None:
            notes.missing("netlink", host.links_error or "link dump not available")
            return ()
        out: list[Link] = []
        seen: dict[Any, tuple[dict[str, Any], Link]] = {}
        for entry in dump:
            if not isinstance(entry, dict):
                continue
            key = entry.get("ifindex")
            hit = self._prev.get(key)
            link = hit[1] if hit is not None and hit[0] == entry else parse_link(entry)
            if link is None:
                continue
            seen[key] = (entry, link)
            out.append(link)
        self._prev = seen
        out.sort(key=lambda lk: lk.ifindex)
        return tuple(out)


def read_links_part(host: Host, cfg: ReadConfig, rules: Iterable[Any], cache: LinkCache | None = None) -> Part:
    """Versions, the link dump (no statistics in bulk), PCI / SR-IOV, then the rails' statistics."""
    notes = Notes()
    rules = tuple(rules)
    versions = read_versions(host, notes)
    links = (cache or LinkCache()).links(host, notes)
    pci_of = functions_of_links(host, links)
    # Older kernels name no parent in netlink: fill it from the device symlink, as take_snapshot does.
    links = with_parents(links, pci_of)
    # SR-IOV of devices on another bus (netdevsim) as take_snapshot reads them.
    functions = read_pci(host, [*pci_of.values(), *(r.pci for r in rules)], notes) + read_bus_devices(host, links)
    fn_by_bdf = {f.bdf: f for f in functions}
    rails = rail_netdevs(links, pci_of, fn_by_bdf, rules, cfg.net_templates)
    rail_bdfs = sorted({pci_of[n] for n in rails if n in pci_of} | {r.pci for r in rules})
    links = with_stats(links, read_link_stats(host, rails, notes), read_speeds(host, rails))
    return _part("links", notes, fields={"versions": versions, "links": links, "pci": functions,
                                         "node": versions.hostname},
                 rails=tuple(rails), rail_bdfs=tuple(rail_bdfs))


def read_devlink_part(host: Host, cfg: ReadConfig, functions: Iterable[Any], rail_bdfs: Iterable[str],
                      links: Iterable[Any] = ()) -> Part:
    notes = Notes()
    dl = read_devlink(host, tuple(functions), tuple(rail_bdfs), cfg.devlink_params, cfg.command_timeout_s, notes,
                      links=tuple(links))
    return _part("devlink", notes, fields={"devlink_devs": dl.devs, "eswitch": dl.eswitch, "params": dl.params,
                                           "ports": dl.ports})


def read_rdma_part(host: Host, cfg: ReadConfig, rails: Iterable[str], rail_bdfs: Iterable[str]) -> Part:
    notes = Notes()
    links, netns, devices = read_rdma(host, tuple(rails), tuple(rail_bdfs), cfg.command_timeout_s, notes)
    return _part("rdma", notes, fields={"rdma_links": links, "rdma_netns": netns, "rdma_devices": devices})


def read_counters(host: Host, cfg: ReadConfig, rails: Iterable[str],
                  rdma_ports: dict[str, tuple[str, int]], progress: Progress | None = None) -> Part:
    """The rails' ethtool statistics (one netdev at a time: on mlx5 each is a firmware read), their
    stats64 traffic, and the RDMA loss counters of their uplink ports."""
    notes = Notes()
    stats, drivers = [], []
    extra: dict[str, dict[str, int]] = {}
    rails = tuple(rails)
    for name in rails:
        if progress is not None:
            progress.set(name)
        st, di = read_ethtool(host, [name], cfg.command_timeout_s, notes)
        stats.extend(st)
        drivers.extend(di)
        counters: dict[str, int] = {}
        port = rdma_ports.get(name)
        if port is not None:
            dev, p = port
            for cname in RDMA_RECORDED:
                val = to_int(read_word(host, f"/sys/class/infiniband/{dev}/ports/{p}/hw_counters/{cname}", 64))
                if val is not None:
                    counters[cname] = val
        extra[name] = counters
    if progress is not None:
        progress.set("")
    for name, pairs in read_link_stats(host, list(rails), notes).items():
        extra.setdefault(name, {}).update((k, v) for k, v in pairs if k in TRAFFIC)
    return _part("counters", notes, fields={"ethtool": tuple(stats), "drivers": tuple(drivers)}, extra=extra)


def compose(base: Snapshot | None, parts: dict[str, Part]) -> Snapshot:
    """A snapshot from the latest part of every source (fields of missing parts stay as in ``base``)."""
    snap = base or Snapshot(taken_at=time.time())
    values: dict[str, Any] = {}
    unavailable: list[tuple[str, str]] = []
    busy: list[str] = []
    for src in SOURCES:
        part = parts.get(src)
        if part is None:
            continue
        values.update(part.fields)
        unavailable.extend(part.unavailable)
        busy.extend(b for b in part.busy if b not in busy)
    links = parts.get("links")
    if links is not None:
        values["taken_at"] = links.taken_at
    return replace(snap, **values, unavailable=tuple(unavailable), busy=tuple(busy))
