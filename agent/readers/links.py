"""Links: the rtnetlink dump (``host.links()``, the ``netlink/links.json`` schema of docs/design.md §2).

The bulk dump carries no statistics (mlx5 would query firmware for every representor, docs/design.md §3);
``read_link_stats`` asks for stats64 of the rails only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Link, PciFunction, RailRule, VfInfo, new_link
from agent.naming import parse_name, parse_port_name, rail_rules
from agent.readers.common import Notes, to_int
from agent.readers.pci import functions_of_links, read_bus_devices, read_pci
from agent.readers.source import Context, Part, Source, part
from agent.readers.versions import read_versions

__all__ = [
    "SOURCE",
    "LinkCache",
    "is_representor",
    "is_uplink_port_name",
    "parse_link",
    "parse_links",
    "parse_speed",
    "parse_stats",
    "rail_netdevs",
    "read_link_stats",
    "read_links",
    "read_links_part",
    "read_speeds",
    "with_parents",
    "with_stats",
]

_U64 = 1 << 64
# ethtool's SPEED_UNKNOWN is -1; older kernels printed it as the u32 4294967295.
_SPEED_UNKNOWN = (-1, 0xFFFFFFFF)


def _str(value: Any) -> str | None:
    # The live dump holds only str and None: test those first (2,000 links x 8 fields).
    if type(value) is str:
        return value.strip() or None
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value).strip() or None


def _int(value: Any) -> int | None:
    # The live dump already holds ints: skip the general conversion for them (2,000 links x 6 fields).
    return value if type(value) is int else to_int(value)


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("true", "on", "false", "off"):
        return value.strip().lower() in ("true", "on")
    return None


def _switch_id(value: Any) -> str | None:
    text = _str(value)
    if text is None:
        return None
    if text.isalnum() and text.islower():
        return text
    # Some dumps print the id with separators or in upper case; the schema is bare lower-case hex.
    return text.replace(":", "").replace("-", "").lower() or None


def _vfinfo(value: Any) -> tuple[VfInfo, ...] | None:
    if not isinstance(value, list):
        return None
    out = []
    for vf in value:
        index = to_int(vf.get("vf")) if isinstance(vf, dict) else None
        if index is None:
            continue
        out.append(VfInfo(
            vf=index,
            # iproute2's vfinfo_list says "address"; the image schema says "mac".
            mac=_str(vf.get("mac", vf.get("address"))),
            link_state=_str(vf.get("link_state")),
            spoofchk=_bool(vf.get("spoofchk")),
            trust=_bool(vf.get("trust")),
        ))
    return tuple(out)


def parse_stats(value: Any) -> tuple[tuple[str, int], ...] | None:
    """A stats64 object -> ``((name, value), ...)``; values that are not u64 integers are dropped
    (a node image may hold anything: a negative count must not become a Prometheus ``_total``)."""
    if not isinstance(value, dict):
        return None
    out = []
    for k, v in value.items():
        n = to_int(v)
        if n is not None and 0 <= n < _U64:
            out.append((str(k), n))
    return tuple(out)


def parse_link(d: dict[str, Any]) -> Link | None:
    """One link object of the dump -> ``Link``; None when it has no ifindex or name.

    Sample (``netlink/links.json``)::

        {"ifindex": 4, "ifname": "net_rail0", "operstate": "UP", "carrier": 1, "carrier_changes": 2,
         "carrier_up_count": 1, "carrier_down_count": 1, "mtu": 9000, "address": "b8:3f:d2:aa:00:10",
         "phys_port_name": "p0", "phys_switch_id": "9a3f21c0ffee0001", "parent_bus": "pci",
         "parent_dev": "0000:0c:00.0", "master": null, "kind": null, "stats64": null,
         "vfinfo": [{"vf": 0, "mac": "02:00:00:00:00:01", "link_state": "auto", "spoofchk": false,
                     "trust": false}]}
    """
    get = d.get
    ifindex = _int(get("ifindex"))
    ifname = _str(get("ifname"))
    if ifindex is None or ifname is None:
        return None
    master = get("master")
    if not isinstance(master, (str, int)) or isinstance(master, bool):
        master = None
    stats = get("stats64")
    vfs = get("vfinfo")
    return new_link(
        ifindex=ifindex,
        ifname=ifname,
        operstate=_str(get("operstate")),
        carrier=_int(get("carrier")),
        carrier_changes=_int(get("carrier_changes")),
        carrier_up_count=_int(get("carrier_up_count")),
        carrier_down_count=_int(get("carrier_down_count")),
        mtu=_int(get("mtu")),
        address=_str(get("address")),
        phys_port_name=_str(get("phys_port_name")),
        phys_switch_id=_switch_id(get("phys_switch_id")),
        parent_bus=_str(get("parent_bus")),
        parent_dev=_str(get("parent_dev")),
        master=master,
        kind=_str(get("kind")),
        stats64=parse_stats(stats) if stats is not None else None,
        vfinfo=_vfinfo(vfs) if vfs is not None else None,
    )


def parse_links(dump: list[Any]) -> tuple[Link, ...]:
    """The whole dump -> links sorted by ifindex; entries without ifindex/ifname are skipped."""
    out = [lk for lk in (parse_link(d) for d in dump if isinstance(d, dict)) if lk is not None]
    out.sort(key=lambda lk: lk.ifindex)
    return tuple(out)


def read_links(host: Host, notes: Notes | None = None) -> tuple[Link, ...]:
    notes = notes if notes is not None else Notes()
    try:
        dump = host.links()
    except Exception as exc:  # netlink errors come from pyroute2 (NetlinkError, OSError, ...)
        notes.missing("netlink", f"link dump failed: {exc}")
        return ()
    if dump is None:
        notes.missing("netlink", host.links_error or "link dump not available")
        return ()
    return parse_links(dump)


def read_link_stats(host: Host, ifnames: list[str], notes: Notes | None = None) -> dict[str, tuple[tuple[str, int], ...]]:
    """stats64 of the named links only."""
    notes = notes if notes is not None else Notes()
    if not ifnames:
        return {}
    try:
        raw = host.link_stats(list(ifnames))
    except Exception as exc:  # see read_links
        notes.missing("netlink stats", f"link statistics failed: {exc}")
        return {}
    out = {}
    for name, stats in (raw or {}).items():
        parsed = parse_stats(stats)
        if parsed is not None:
            out[name] = parsed
    return out


def parse_speed(text: str | None) -> int | None:
    """``/sys/class/net/<if>/speed`` (Mb/s) -> int; None for ``-1`` (no link: mlx5 while down), 0, garbage."""
    n = to_int(text) if text is not None else None
    if n is None or n <= 0 or n in _SPEED_UNKNOWN:
        return None
    return n


def read_speeds(host: Host, ifnames: list[str]) -> dict[str, int]:
    """Link speed in Mb/s of the named links that report one (reading ``speed`` of a link that is
    down fails with EINVAL on some drivers: that is "no speed", not an error)."""
    out = {}
    for name in ifnames:
        n = parse_speed(host.read_text(f"/sys/class/net/{name}/speed", 64))
        if n is not None:
            out[name] = n
    return out


def with_stats(links: tuple[Link, ...], stats: dict[str, tuple[tuple[str, int], ...]],
               speeds: dict[str, int] | None = None) -> tuple[Link, ...]:
    """The links with ``stats64`` (and ``speed_mbps``) filled in for the names given."""
    speeds = speeds or {}
    out = []
    for lk in links:
        if lk.ifname in stats:
            lk = dataclasses.replace(lk, stats64=stats[lk.ifname])
        if lk.ifname in speeds:
            lk = dataclasses.replace(lk, speed_mbps=speeds[lk.ifname])
        out.append(lk)
    return tuple(out)


#: PCI vendor id of Mellanox / NVIDIA networking (ConnectX, BlueField).
MELLANOX_VENDOR = "0x15b3"


def is_uplink_port_name(name: str | None) -> bool:
    """``p0``, ``p1``: the port name of a NIC's physical (uplink) port in switchdev-capable drivers."""
    pn = parse_port_name(name)
    return pn is not None and not pn.is_representor


def is_representor(link: Link) -> bool:
    """``pf<N>vf<M>``, ``pf<N>sf<M>``, with a controller prefix ``c<C>pf...`` (a DPU's host-side
    ports); a bare ``pf<N>`` / ``c<C>pf<N>`` is the representor of a host PF seen from a DPU."""
    pn = parse_port_name(link.phys_port_name)
    return pn is not None and pn.is_representor


def rail_netdevs(links: Iterable[Link], pci_of: dict[str, str], functions: dict[str, PciFunction],
                 rules: Iterable[RailRule], templates: tuple[str, ...], mapped: Iterable[str] = ()) -> list[str]:
    """Netdevs whose statistics, ethtool counters and RDMA port belong to a rail, sorted by name.

    A netdev counts when it is not a representor and not on a VF, and one of:
    - its PCI function has a udev naming rule, ``net`` or ``rdma`` (whatever name it has now: a failed
      rename is still the rail's netdev, and a function named by an RDMA rule alone is a rail too), or
      is in ``mapped`` (the functions ``--rail-map`` names: as a rule's);
    - its name matches a rail name template;
    - on a node without rules only: it is an uplink (``phys_port_name`` ``p<N>``) of a Mellanox
      function (other vendors' uplinks, such as a management NIC, are not rails). Where rules exist,
      another Mellanox function (an HGX baseboard's restricted PF, a management port) is not read:
      its statistics are a firmware read (docs/design.md §3 "Which functions are touched").
    """
    ruled = {r.pci for r in rules} | set(mapped)
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
        elif not ruled and is_uplink_port_name(lk.phys_port_name) and bdf and \
                (fn is None or fn.vendor in (None, MELLANOX_VENDOR)):
            out.append(lk.ifname)
    return sorted(out)


def with_parents(links: Iterable[Link], pci_of: dict[str, str]) -> tuple[Link, ...]:
    """The links with ``parent_dev`` filled from the ``device`` symlink where netlink named no parent.

    Kernels older than the commit that added ``IFLA_PARENT_DEV_NAME`` (torvalds/linux 00e77ed8e64d,
    2021) send no parent; the rules "a rail's netdev is the uplink whose ``parent_dev`` (or ``device``
    link) is the function" and "a representor belongs to its ``parent_dev``" then need the symlink's
    answer (docs/design.md §2, §4).
    """
    out = []
    for lk in links:
        bdf = pci_of.get(lk.ifname)
        if lk.parent_dev is None and bdf is not None:
            lk = dataclasses.replace(lk, parent_bus=lk.parent_bus or "pci", parent_dev=bdf)
        out.append(lk)
    return tuple(out)


class LinkCache:
    """The links of the previous dump, so that an unchanged link is not decoded into a record again.

    On a node of 2,050 netdevs almost nothing changes between two dumps 15 s apart, and turning
    every dump entry into a ``Link`` costs as much CPU as the dump itself (measured: about 40 ms of
    84 ms). Comparing an entry with the previous one costs a small fraction of that.
    """

    def __init__(self) -> None:
        self._prev: dict[Any, tuple[dict[str, Any], Link]] = {}

    def links(self, host: Host, notes: Notes) -> tuple[Link, ...]:
        """``read_links``, with the unchanged entries' records reused."""
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


def read_links_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """Versions, the link dump (no statistics in bulk), PCI / SR-IOV, then the rails' statistics."""
    # A site's rules file also names storage / management NICs: only the rules that name rails count.
    rules = rail_rules(ctx.rules, cfg.net_templates, cfg.rdma_templates)
    # --rail-map names rail functions as the rules do: their netdevs are read, whatever their names
    mapped = [pci for _, pci in cfg.rail_map or ()]
    versions = read_versions(host, notes)
    links = (ctx.link_cache or LinkCache()).links(host, notes)
    pci_of = functions_of_links(host, links)
    # Older kernels name no parent in netlink: fill it from the device symlink.
    links = with_parents(links, pci_of)
    # SR-IOV of devices on another bus (netdevsim) too.
    functions = read_pci(host, [*pci_of.values(), *(r.pci for r in rules), *mapped], notes) + read_bus_devices(host, links)
    fn_by_bdf = {f.bdf: f for f in functions}
    rails = rail_netdevs(links, pci_of, fn_by_bdf, rules, cfg.net_templates, mapped)
    rail_bdfs = sorted({pci_of[n] for n in rails if n in pci_of} | {r.pci for r in rules} | set(mapped))
    links = with_stats(links, read_link_stats(host, rails, notes), read_speeds(host, rails))
    return part("links", notes, fields={"versions": versions, "links": links, "pci": functions,
                                        "node": versions.hostname},
                gives={"links": links, "functions": functions, "rails": tuple(rails), "rail_bdfs": tuple(rail_bdfs)})


SOURCE = Source("links", "the links (bulk dump without statistics), the rails' statistics, PCI / SR-IOV and versions; "
                         "a known link's events update its state at once, an unknown link's trigger a read",
                (), 15.0, 0.0, ("versions", "links", "pci", "node"), read_links_part, order=20,
                needs=("rules", "link_cache"), provides=("links", "functions", "rails", "rail_bdfs"),
                roles=frozenset({"boot", "link-events"}), netlink=True)
