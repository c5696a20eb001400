"""One read of the node: run every reader in dependency order and assemble a ``Snapshot``.

Order: versions, udev rules, links, PCI functions (and the SR-IOV of link parents on another bus, such
as netdevsim), then which netdevs are rails / uplinks and which devlink handles are PFs, then devlink,
RDMA, ethtool (rails only, one at a time) and OVS. Every source
that gives nothing adds ``(source, reason)`` to ``Snapshot.unavailable``; nothing raises for a node
that lacks a tool.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Link, PciFunction, RailRule, Snapshot
from agent.naming import parse_name
from agent.readers.common import Notes
from agent.readers.devlink import read_devlink
from agent.readers.ethtool import read_ethtool
from agent.readers.links import read_link_stats, read_links, read_speeds, with_stats
from agent.readers.ovs import read_ovs
from agent.readers.pci import functions_of_links, read_bus_devices, read_pci
from agent.readers.rdma import read_rdma
from agent.readers.udev import read_rules
from agent.readers.versions import read_versions

__all__ = ["is_representor", "is_uplink_port_name", "rail_netdevs", "take_snapshot", "with_parents"]

_UPLINK = re.compile(r"\Ap[0-9]+\Z")
# pf<N>vf<M>, pf<N>sf<M>, and with a controller prefix c<C>pf... (a DPU's host-side ports); a bare
# pf<N> / c<C>pf<N> is the representor of a host PF seen from a DPU.
_REPRESENTOR = re.compile(r"\A(?:c[0-9]+)?pf[0-9]+(?:(?:vf|sf)[0-9]+)?\Z")
#: PCI vendor id of Mellanox / NVIDIA networking (ConnectX, BlueField).
MELLANOX_VENDOR = "0x15b3"


def is_uplink_port_name(name: str | None) -> bool:
    """``p0``, ``p1``: the port name of a NIC's physical (uplink) port in switchdev-capable drivers."""
    return bool(name) and bool(_UPLINK.match(name or ""))


def is_representor(link: Link) -> bool:
    return bool(link.phys_port_name) and bool(_REPRESENTOR.match(link.phys_port_name or ""))


def rail_netdevs(links: Iterable[Link], pci_of: dict[str, str], functions: dict[str, PciFunction],
                 rules: Iterable[RailRule], templates: tuple[str, ...]) -> list[str]:
    """Netdevs whose statistics, ethtool counters and RDMA port belong to a rail, sorted by name.

    A netdev counts when it is not a representor and not on a VF, and one of:
    - its PCI function has a udev naming rule, ``net`` or ``rdma`` (whatever name it has now: a failed
      rename is still the rail's netdev, and a function named by an RDMA rule alone is a rail too);
    - its name matches a rail name template;
    - it is an uplink (``phys_port_name`` ``p<N>``) of a Mellanox function (other vendors' uplinks,
      such as a management NIC, are not rails).
    """
    ruled = {r.pci for r in rules}
    out = []
    for lk in links:
        if is_representor(lk):
            continue
        bdf = pci_of.get(lk.ifname)
        fn = functions.get(bdf) if bdf else None
        if fn is not None and fn.is_vf:
            continue
        if bdf in ruled or parse_name(lk.ifname, templates) is not None:
            out.append(lk.ifname)
        elif is_uplink_port_name(lk.phys_port_name) and bdf and \
                (fn is None or fn.vendor in (None, MELLANOX_VENDOR)):
            out.append(lk.ifname)
    return sorted(out)


def with_parents(links: Iterable[Link], pci_of: dict[str, str]) -> tuple[Link, ...]:
    """The links with ``parent_dev`` filled from the ``device`` symlink where netlink named no parent.

    Kernels older than the commit that added ``IFLA_PARENT_DEV_NAME`` (torvalds/linux 00e77ed8e64d,
    2021) send no parent; the rules "a rail's netdev is the uplink whose ``parent_dev`` (or ``device``
    link) is the function" and "a representor belongs to its ``parent_dev``" then need the symlink's
    answer (DESIGN §2, §4).
    """
    out = []
    for lk in links:
        bdf = pci_of.get(lk.ifname)
        if lk.parent_dev is None and bdf is not None:
            lk = dataclasses.replace(lk, parent_bus=lk.parent_bus or "pci", parent_dev=bdf)
        out.append(lk)
    return tuple(out)


def _capture_time(host: Host) -> float | None:
    manifest = host.image.manifest if host.image is not None else None
    if manifest is None:
        return None
    return manifest.time_of("ended_at") or manifest.time_of("started_at")


def _node_name(host: Host, hostname: str | None) -> str | None:
    manifest = host.image.manifest if host.image is not None else None
    if manifest is not None and manifest.node and manifest.node.strip():
        return manifest.node.strip()
    return hostname


def take_snapshot(host: Host, cfg: ReadConfig | None = None, *, now: float | None = None) -> Snapshot:
    """Read the node through ``host``.

    ``now`` is the snapshot time; by default the capture time of a node image (manifest
    ``ended_at``), else the wall clock.
    """
    cfg = cfg or ReadConfig()
    notes = Notes()
    timeout = cfg.command_timeout_s
    if now is None:
        now = (None if host.live else _capture_time(host)) or time.time()

    versions = read_versions(host, notes)
    rules = read_rules(host, notes)
    links = read_links(host, notes)

    pci_of = functions_of_links(host, links)
    links = with_parents(links, pci_of)
    functions = read_pci(host, [*pci_of.values(), *(r.pci for r in rules)], notes) + read_bus_devices(host, links)
    fn_by_bdf = {f.bdf: f for f in functions}

    rails = rail_netdevs(links, pci_of, fn_by_bdf, rules, cfg.net_templates)
    rail_bdfs = sorted({pci_of[n] for n in rails if n in pci_of} | {r.pci for r in rules})
    links = with_stats(links, read_link_stats(host, rails, notes), read_speeds(host, rails))

    dl = read_devlink(host, functions, rail_bdfs, cfg.devlink_params, timeout, notes, links=links)
    rdma_links, rdma_netns, rdma_devices = read_rdma(host, rails, rail_bdfs, timeout, notes)

    ethtool_targets = list(rails)
    if cfg.representor_ethtool:
        ethtool_targets += sorted(lk.ifname for lk in links if is_representor(lk))
    stats, drivers = read_ethtool(host, ethtool_targets, timeout, notes)
    ovs = read_ovs(host, timeout, notes)

    return Snapshot(
        taken_at=float(now),
        node=_node_name(host, versions.hostname),
        versions=versions,
        links=links,
        pci=functions,
        devlink_devs=dl.devs,
        eswitch=dl.eswitch,
        params=dl.params,
        ports=dl.ports,
        rdma_links=rdma_links,
        rdma_netns=rdma_netns,
        rdma_devices=rdma_devices,
        ethtool=stats,
        drivers=drivers,
        rules=rules,
        ovs=ovs,
        unavailable=tuple(notes.unavailable),
        busy=tuple(notes.busy),
    )
