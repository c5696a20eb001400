"""The source registry: every part of a ``Snapshot`` the agent reads, declared once, as data.

A *source* is one schedulable read of the node: its name (the ``--<name>-interval`` flag, the
``source`` label of ``railscope_scrape_collector_*``, the ``--disable-source`` word), the tools it
runs, its default interval and the least one allowed, the snapshot fields it owns, whether it
touches firmware, and the function that reads it. ``take_snapshot`` (``readers/snapshot.py``) runs
every source once in registry order, which is their dependency order (rules before links, links
before everything that needs the rails); the daemon schedules the same objects each on its own
interval and composes their latest reads into one snapshot with ``compose``. Adding a source is a
reader module plus one entry in ``SOURCES``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Link, PciFunction, RailRule, Snapshot
from agent.naming import NOT_PF_BUSES, rail_rules
from agent.readers.common import BDF_RE, Notes, read_word, to_int
from agent.readers.devlink import read_devlink
from agent.readers.ethtool import read_ethtool
from agent.readers.firmware import read_firmware
from agent.readers.gpus import read_gpus
from agent.readers.health import read_health
from agent.readers.links import (
    is_representor,
    parse_link,
    rail_netdevs,
    read_link_stats,
    read_speeds,
    with_parents,
    with_stats,
)
from agent.readers.optics import read_optics
from agent.readers.ovs import read_ovs
from agent.readers.pci import functions_of_links, read_bus_devices, read_pci
from agent.readers.pcie import read_pcie
from agent.readers.processes import read_processes
from agent.readers.rdma import read_rdma
from agent.readers.scope import excluded, pci_of_links, touchable_bdfs, touchable_netdevs
from agent.readers.thermal import read_thermal
from agent.readers.udev import RuleProblem, read_rules
from agent.readers.versions import read_versions

__all__ = ["SOURCES", "Context", "LinkCache", "Part", "Source", "by_name", "compose", "names", "source_of", "touches_firmware"]

#: RDMA port counters read with every counters sample for the flight recorder.
RDMA_RECORDED = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled")

#: stats64 keys the recorder keeps beside the incident counters: the traffic around an incident.
TRAFFIC = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped")


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
            notes.missing("netlink", getattr(host, "links_error", None) or "link dump not available")
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


@dataclass(frozen=True, slots=True)
class Context:
    """What the sources read before this one found, that this one needs."""

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
    #: links part: the rail netdevs and their PCI functions
    rails: tuple[str, ...] = ()
    rail_bdfs: tuple[str, ...] = ()
    #: counters part: rail netdev -> extra counters (stats64 traffic, RDMA loss) for the recorder
    extra: dict[str, dict[str, int]] = field(default_factory=dict)


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
    #: reads the NIC's firmware synchronously (mlx5 ETHTOOL_GSTATS): one at a time per PF
    firmware_touching: bool = False
    #: the link dump is this source's: node images' netlink items belong to it
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


def _part(source: str, notes: Notes, **kw: Any) -> Part:
    return Part(source=source, taken_at=time.time(), unavailable=tuple(notes.unavailable),
                busy=tuple(notes.busy), **kw)


def read_config(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """udev naming rules and OVS interfaces: they change with the operators, not by the second."""
    problems: list[RuleProblem] = []
    rules = read_rules(host, notes, problems)
    ovs = read_ovs(host, cfg.command_timeout_s, notes)
    return _part("config", notes, fields={"rules": rules, "ovs": ovs,
                                          "rule_problems": tuple((p.file, p.line, p.why) for p in problems)})


def read_links_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """Versions, the link dump (no statistics in bulk), PCI / SR-IOV, then the rails' statistics."""
    # A site's rules file also names storage / management NICs: only the rules that name rails count.
    rules = rail_rules(ctx.rules, cfg.net_templates, cfg.rdma_templates)
    versions = read_versions(host, notes)
    links = (ctx.link_cache or LinkCache()).links(host, notes)
    pci_of = functions_of_links(host, links)
    # Older kernels name no parent in netlink: fill it from the device symlink.
    links = with_parents(links, pci_of)
    # SR-IOV of devices on another bus (netdevsim) too.
    functions = read_pci(host, [*pci_of.values(), *(r.pci for r in rules)], notes) + read_bus_devices(host, links)
    fn_by_bdf = {f.bdf: f for f in functions}
    rails = rail_netdevs(links, pci_of, fn_by_bdf, rules, cfg.net_templates)
    rail_bdfs = sorted({pci_of[n] for n in rails if n in pci_of} | {r.pci for r in rules})
    links = with_stats(links, read_link_stats(host, rails, notes), read_speeds(host, rails))
    return _part("links", notes, fields={"versions": versions, "links": links, "pci": functions,
                                         "node": versions.hostname},
                 rails=tuple(rails), rail_bdfs=tuple(rail_bdfs))


def read_devlink_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    # Only rail PFs and the PFs the rules name, less --exclude-devices: another SR-IOV capable mlx5
    # function (an HGX baseboard's restricted PF) fails its register reads and floods the kernel log.
    bdfs = touchable_bdfs(ctx.rail_bdfs, ctx.links, cfg.exclude_devices)
    keep = set(bdfs)
    functions = [f for f in ctx.functions if f.bdf in keep or f.is_vf]
    dl = read_devlink(host, functions, bdfs, cfg.devlink_params, cfg.command_timeout_s, notes,
                      links=ctx.links)
    return _part("devlink", notes, fields={"devlink_devs": dl.devs, "eswitch": dl.eswitch, "params": dl.params,
                                           "ports": dl.ports})


def read_health_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    if ctx.devlink_gone is not None:
        notes.missing("devlink health", ctx.devlink_gone)
        return _part("health", notes, fields={"health": ()})
    return _part("health", notes, fields={"health": read_health(host, cfg.command_timeout_s, notes)})


def rail_pf_handles(ctx: Context) -> list[str]:
    """The devlink handles of the rail PFs: ``pci/<bdf>``, or ``<bus>/<dev>`` for a rail whose parent
    is on another bus (netdevsim: ``netdevsim/netdevsim10``, which ``rail_bdfs`` does not hold); VFs never."""
    vfs = {f.bdf for f in ctx.functions if f.is_vf}
    out = [f"pci/{bdf}" for bdf in ctx.rail_bdfs if BDF_RE.match(bdf) and bdf not in vfs]
    rails = set(ctx.rails)
    for lk in ctx.links:
        if lk.ifname in rails and lk.parent_dev and lk.parent_bus and lk.parent_bus != "pci" \
                and lk.parent_bus not in NOT_PF_BUSES:
            out.append(f"{lk.parent_bus}/{lk.parent_dev}")
    return list(dict.fromkeys(out))


def read_firmware_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """``devlink dev info`` of the rail PFs only (a firmware read on mlx5: never other functions)."""
    if ctx.devlink_gone is not None:
        notes.missing("firmware", ctx.devlink_gone)
        return _part("firmware", notes, fields={"firmware": ()})
    # devlink dev info asks each PF's firmware (MCQI): --exclude-devices keeps it off the excluded ones.
    handles = rail_pf_handles(ctx)
    if cfg.exclude_devices:
        keep = set(touchable_bdfs([h[4:] for h in handles if h.startswith("pci/")], ctx.links, cfg.exclude_devices))
        allowed = [h for h in handles
                   if (h[4:] in keep if h.startswith("pci/") else not excluded(cfg.exclude_devices, h))]
        for h in handles:
            if h not in allowed:
                notes.missing(f"devlink dev info {h}", "excluded by --exclude-devices")
        handles = allowed
    return _part("firmware", notes, fields={"firmware": read_firmware(host, handles, cfg.command_timeout_s, notes)})


def read_gpus_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """GPUs, GPUDirect paths and the rail PFs' PCIe places: sysfs only."""
    nic_vfs = {vf for f in ctx.functions for vf in f.virtfns} | {f.bdf for f in ctx.functions if f.is_vf}
    return _part("gpus", notes, fields={"gpus": read_gpus(host, ctx.rail_bdfs, notes, skip=nic_vfs)})


def read_rdma_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    # A port's counters are firmware reads on mlx5: none of a device on an excluded function, or named
    # by --exclude-devices itself (its identity and port state are sysfs and still read).
    on_pf: dict[str, list[str]] = {}
    for netdev, bdf in pci_of_links(ctx.links).items():
        on_pf.setdefault(bdf, []).append(netdev)

    def skip_counters(dev: str, pci: str | None) -> bool:
        return excluded(cfg.exclude_devices, dev, *((pci, *on_pf.get(pci, ())) if pci else ()))

    links, netns, devices = read_rdma(host, ctx.rails, ctx.rail_bdfs, cfg.command_timeout_s, notes,
                                      skip_counters=skip_counters if cfg.exclude_devices else None)
    return _part("rdma", notes, fields={"rdma_links": links, "rdma_netns": netns, "rdma_devices": devices})


def read_counters(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rails' ethtool statistics, one netdev at a time (on mlx5 each is a firmware read), and with
    ``ctx.recorder`` their stats64 traffic and the RDMA loss counters of their uplink ports."""
    targets = list(ctx.rails)
    if cfg.representor_ethtool:
        targets += sorted(lk.ifname for lk in ctx.links if is_representor(lk))
    allowed = set(touchable_netdevs(targets, ctx.links, cfg.exclude_devices))
    stats, drivers = [], []
    for name in targets:
        if name not in allowed:
            notes.missing(f"ethtool -S {name}", "excluded by --exclude-devices")
            continue
        st, di = read_ethtool(host, [name], cfg.command_timeout_s, notes)
        stats.extend(st)
        drivers.extend(di)
    extra: dict[str, dict[str, int]] = {}
    if ctx.recorder:
        # the RDMA loss counters are firmware reads on mlx5 too: rails --exclude-devices leaves alone only
        for name in (n for n in ctx.rails if n in allowed):
            counters: dict[str, int] = {}
            port = ctx.rdma_ports.get(name)
            if port is not None:
                dev, p = port
                for cname in RDMA_RECORDED:
                    val = to_int(read_word(host, f"/sys/class/infiniband/{dev}/ports/{p}/hw_counters/{cname}", 64))
                    if val is not None:
                        counters[cname] = val
            extra[name] = counters
        for name, pairs in read_link_stats(host, list(ctx.rails), notes).items():
            extra.setdefault(name, {}).update((k, v) for k, v in pairs if k in TRAFFIC)
    return _part("counters", notes, fields={"ethtool": tuple(stats), "drivers": tuple(drivers)}, extra=extra)


def read_pcie_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rail PFs' PCIe link, their upstream ports' and their AER totals (sysfs: no firmware access)."""
    return _part("pcie", notes, fields={"pcie": read_pcie(host, ctx.rail_bdfs, notes)})


def read_thermal_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rail PFs' mlx5 hwmon sensors (sysfs)."""
    return _part("thermal", notes, fields={"thermal": read_thermal(host, ctx.rail_bdfs, notes)})


def read_optics_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """``ethtool -m`` of each rail netdev (a firmware read: rails only, less --exclude-devices).

    A rail that is a software netdev has no transceiver of its own: the link dump gives it a kind
    (veth, bond, vlan, macvlan, ...) and no parent device, and none of those drivers implements
    ``get_module_info`` or ``get_module_eeprom_by_page``, so ``ethtool -m`` could only answer
    "Operation not supported". It is not asked; a note says why, as the refusal did. A netdev with a
    kind *and* a device under it (IPoIB's ``ib0`` on its PCI function, a DSA port) is a port of
    hardware and is asked.
    """
    allowed = set(touchable_netdevs(ctx.rails, ctx.links, cfg.exclude_devices))
    # a kernel's kind is a short rtnl_link_ops name (veth, macvlan); a bundle's may be anything: the
    # note quotes at most 32 characters of it
    software = {lk.ifname: lk.kind[:32] for lk in ctx.links if lk.kind and not lk.parent_dev}
    targets = []
    for name in ctx.rails:
        if name not in allowed:
            notes.missing(f"ethtool -m {name}", "excluded by --exclude-devices")
        elif name in software:
            notes.missing(f"ethtool -m {name}",
                          f"not read: a {software[name]} with no device under it is a software netdev, no module of its own")
        else:
            targets.append(name)
    optics = read_optics(host, targets, cfg.command_timeout_s, notes, pf_of=pci_of_links(ctx.links)) if targets else ()
    return _part("optics", notes, fields={"optics": optics})


def read_processes_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The daemons a rail depends on: start time, CPU, RSS and threads of each of their processes."""
    return _part("processes", notes, fields={"processes": read_processes(host, notes)})


#: Every source, in dependency order (the order of a first sample and of ``take_snapshot``).
SOURCES: tuple[Source, ...] = (
    Source("config", "the udev naming rules and OVS interfaces",
           (("ovs-vsctl",),), 60.0, 0.0, ("rules", "ovs", "rule_problems"), read_config),
    Source("links", "the links (bulk dump without statistics), the rails' statistics, PCI / SR-IOV and versions; "
                    "link events also trigger a read",
           (), 15.0, 0.0, ("versions", "links", "pci", "node"), read_links_part, netlink=True),
    Source("devlink", "devlink (eswitch mode, params, ports)",
           (("devlink",),), 60.0, 60.0, ("devlink_devs", "eswitch", "params", "ports"), read_devlink_part),
    Source("health", "the devlink health reporters (devlink -j health show)",
           (("devlink", "-j", "health"),), 60.0, 60.0, ("health",), read_health_part, lane="devlink"),
    # mlx5 answers dev info from the firmware (devlink.c mlx5_devlink_info_get -> fw.c
    # mlx5_fw_version_query: MCQI / MCQS register reads): firmware_touching, so the daemon's worker host
    # takes the PF's firmware gate for each ``dev info <PF>`` and skips it past the wait, like the statistics
    # (https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/fw.c)
    Source("firmware", "the rail PFs' running and stored firmware (devlink -j dev info <PF>)",
           (("devlink", "-j", "dev", "info"),), 60.0, 60.0, ("firmware",), read_firmware_part, firmware_touching=True,
           lane="devlink"),
    Source("gpus", "NVIDIA GPUs, the GPUDirect RDMA paths NCCL probes and the GPU <-> rail PCIe topology (sysfs)",
           (), 60.0, 0.0, ("gpus",), read_gpus_part),
    Source("rdma", "rdma links, the netns mode and the rails' RDMA port counters",
           (("rdma",),), 60.0, 60.0, ("rdma_links", "rdma_netns", "rdma_devices"), read_rdma_part),
    Source("counters", "the rails' incident counters (ethtool statistics, one netdev at a time; carrier losses; "
                       "RDMA loss counters): the flight recorder's resolution",
           (("ethtool",),), 1.0, 0.0, ("ethtool", "drivers"), read_counters, firmware_touching=True),
    Source("pcie", "the rail PFs' PCIe link speed / width, their upstream ports' and their AER counters (sysfs)",
           (), 60.0, 5.0, ("pcie",), read_pcie_part),
    Source("thermal", "the rail PFs' mlx5 hwmon temperature sensors (sysfs)",
           (), 60.0, 5.0, ("thermal",), read_thermal_part),
    Source("optics", "the rails' transceivers (ethtool -m, a firmware read: in the counters' thread, after the "
                     "statistics)",
           (("ethtool", "-m"), ("ethtool", "--json", "-m"), ("ethtool", "--version")), 60.0, 60.0, ("optics",),
           read_optics_part, firmware_touching=True, lane="counters", no_device=(("ethtool", "--version"),)),
    Source("processes", "the processes of the daemons a rail depends on (OVS, the SR-IOV config daemon, the device "
                        "plugins, the NVIDIA driver container): start time, CPU, RSS",
           (), 15.0, 1.0, ("processes",), read_processes_part, optional=True),
)


def names() -> tuple[str, ...]:
    return tuple(s.name for s in SOURCES)


def by_name(name: str) -> Source:
    for s in SOURCES:
        if s.name == name:
            return s
    raise KeyError(f"no source {name!r} (known: {', '.join(names())})")


def source_of(argv: Iterable[str]) -> str | None:
    """The source that runs ``argv`` (longest declared prefix): ``ethtool -S net_rail0`` -> ``counters``."""
    args = tuple(argv)
    best: tuple[int, str | None] = (0, None)
    for s in SOURCES:
        for prefix in s.commands:
            if args[:len(prefix)] == prefix and len(prefix) > best[0]:
                best = (len(prefix), s.name)
    return best[1]


def touches_firmware(argv: Iterable[str]) -> bool:
    """Whether ``argv`` reads a NIC's firmware: the source that runs it is ``firmware_touching``
    and ``argv`` is not one of its ``no_device`` queries (the one declaration the daemon's firmware
    gate goes by)."""
    args = tuple(argv)
    name = source_of(args)
    if name is None:
        return False
    src = by_name(name)
    return src.firmware_touching and not any(args[:len(p)] == p for p in src.no_device)


def after(ctx: Context, part: Part) -> Context:
    """The context the next sources see once ``part`` is read."""
    if part.source == "config":
        return replace(ctx, rules=tuple(part.fields.get("rules", ())))
    if part.source == "links":
        return replace(ctx, links=tuple(part.fields.get("links", ())), functions=tuple(part.fields.get("pci", ())),
                       rails=part.rails, rail_bdfs=part.rail_bdfs)
    if part.source == "devlink":
        # ``devlink dev show`` failed (the reader's one "devlink" note, no instance read): not busy
        gone = next((why for src, why in part.unavailable if src == "devlink"), None)
        listed = part.fields.get("devlink_devs")
        return replace(ctx, devlink_gone=gone if not listed and "devlink" not in part.busy else None)
    return ctx


def compose(base: Snapshot | None, parts: Mapping[str, Part]) -> Snapshot:
    """A snapshot from the latest part of every source (fields of missing parts stay as in ``base``);
    the reasons of what is missing in registry order."""
    snap = base or Snapshot(taken_at=time.time())
    values: dict[str, Any] = {}
    unavailable: list[tuple[str, str]] = []
    busy: list[str] = []
    for src in SOURCES:
        part = parts.get(src.name)
        if part is None:
            continue
        values.update(part.fields)
        unavailable.extend(part.unavailable)
        busy.extend(b for b in part.busy if b not in busy)
    links = parts.get("links")
    if links is not None:
        values["taken_at"] = links.taken_at
    return replace(snap, **values, unavailable=tuple(unavailable), busy=tuple(busy))
