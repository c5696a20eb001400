"""RDMA: ``rdma -j link show``, ``rdma -j system show`` and ``/sys/class/infiniband``.

In switchdev the PF's RDMA device has one port per representor (about 1,000 ``rdma link`` entries
on a big node): port state and counters are read from sysfs only for the ports asked for (the rails'
uplink ports), never for all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import RdmaDevice, RdmaLink, RdmaPort
from agent.readers.common import BDF_RE, Notes, basename, parse_json, read_word, to_int
from agent.readers.scope import excluded, pci_of_links
from agent.readers.source import Context, Part, Source, part

__all__ = ["SOURCE",
    "netns_from_sysfs",
    "parse_link_layer",
    "parse_rdma_links",
    "parse_rdma_system",
    "parse_sysfs_state",
    "rail_ports",
    "read_rdma",
    "read_rdma_devices",
]

_IB = "/sys/class/infiniband"
# The text forms of ``rdma link show``:
#   iproute2 >= 5.5:  "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0"
#   iproute2 < 5.5:   "0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ens1f0 "
#                     (device index / port, then "<name>/<port>"; rdma/link.c link_parse_cb printed
#                     pr_out("%u/%u: %s: ", idx, port, name) with name = "<dev>/<port>")
_TEXT_LINK = re.compile(r"\Alink\s+(?P<dev>\S+)/(?P<port>[0-9]+)(?:\s+(?P<rest>.*))?\Z")
_TEXT_LINK_OLD = re.compile(r"\A(?P<idx>[0-9]+)/(?P<port0>[0-9]+):\s+(?P<dev>\S+)/(?P<port>[0-9]+):(?:\s+(?P<rest>.*))?\Z")
# IB_DEVICE_NAME_MAX is 64; a name never holds "/" or whitespace.
_DEV_NAME = re.compile(r"\A[^\s/]{1,63}\Z")


def _s(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value.strip() or None


#: Made once: a decoder per call leaves its scanner's attribute-name strings in CPython's type
#: cache (``agent.safejson._DECODER`` says more); a decoder keeps nothing between documents.
_DECODER = json.JSONDecoder()


def _json_values(text: str, what: str, truncated: bool) -> list[Any]:
    """Every top-level JSON value of ``text``: one array, one object, or objects one after another."""
    dec = _DECODER
    out: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return out
        try:
            doc, pos = dec.raw_decode(text, pos)
        except ValueError:
            _doc, err = parse_json(text[pos:], what, truncated)
            raise ValueError(err or f"{what}: not valid JSON") from None
        out.extend(doc if isinstance(doc, list) else [doc])


def _device_and_port(ifname: str | None, port: int | None, where: str) -> tuple[str, int]:
    """The RDMA device name and port of one ``rdma link`` entry.

    iproute2 before 5.5 put the port into the name (JSON ``"ifname": "mlx5_0/1"``); later ones give
    ``"ifname": "mlx5_0", "port": 1``. Anything else is not read: a wrong device name would hide the
    rail's RDMA port and raise nothing.
    """
    if ifname is None:
        raise ValueError(f"rdma link show: {where} has no ifname")
    dev = ifname
    if "/" in ifname:
        dev, _, tail = ifname.rpartition("/")
        if not tail.isdigit() or (port is not None and int(tail) != port):
            raise ValueError(f"rdma link show: {where}: cannot read device and port from ifname {ifname!r}")
        port = int(tail)
    if port is None:
        raise ValueError(f"rdma link show: {where} ({ifname!r}) has no port")
    if not _DEV_NAME.match(dev):
        raise ValueError(f"rdma link show: {where}: {ifname!r} is not an RDMA device name")
    return dev, port


def _words_after(rest: str) -> dict[str, str]:
    words = rest.split()
    return {k: words[i + 1] for i, k in enumerate(words[:-1]) if k in ("state", "physical_state", "netdev")}


def parse_rdma_links(text: str, truncated: bool = False) -> tuple[RdmaLink, ...]:
    """``rdma -j link show`` in every shape iproute2 has printed since 4.13 -> links.

    Samples, JSON (iproute2 >= 5.5, then < 5.5 with the port in ``ifname``)::

        [{"ifindex":0,"ifname":"rdma_rail0","port":1,"state":"ACTIVE","physical_state":"LINK_UP",
          "netdev":"net_rail0","netdev_index":4}]
        [{"ifindex":0,"port":1,"ifname":"mlx5_0/1","state":"ACTIVE","physical_state":"LINK_UP",
          "netdev":"ens1f0","netdev_index":4}]

    Samples, text (an iproute2 that ignores ``-j``; note the trailing space after the netdev)::

        link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev p1p1
        0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev eth0

    Raises ``ValueError`` (the source is then "not available" with the reason) for output it cannot
    read whole: corrupt JSON, an entry without a device or port, a text line of no known form.
    """
    stripped = text.lstrip()
    out = []
    if stripped.startswith(("[", "{")):
        for n, d in enumerate(_json_values(text, "rdma -j link show", truncated)):
            if not isinstance(d, dict):
                raise ValueError(f"rdma link show: entry {n} is not an object")
            dev, port = _device_and_port(_s(d.get("ifname")), to_int(d.get("port")), f"entry {n}")
            out.append(RdmaLink(dev=dev, port=port, state=_s(d.get("state")),
                                physical_state=_s(d.get("physical_state")), netdev=_s(d.get("netdev"))))
        return tuple(out)
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (line[:1].isspace() and line.strip().startswith("caps:")):
            continue  # "    caps: <...>" continues the entry above (-d)
        s = line.strip()
        m = _TEXT_LINK.match(s) or _TEXT_LINK_OLD.match(s)
        if not m:
            raise ValueError(f"rdma link show: line {n} is in no known form: {s[:80]!r}")
        dev, port = _device_and_port(f"{m.group('dev')}/{m.group('port')}", None, f"line {n}")
        kv = _words_after(m.group("rest") or "")
        out.append(RdmaLink(dev=dev, port=port, state=kv.get("state"),
                            physical_state=kv.get("physical_state"), netdev=kv.get("netdev")))
    if not out and stripped:
        raise ValueError("rdma link show: no 'link <dev>/<port>' line in the output")
    return tuple(out)


def parse_rdma_system(text: str) -> str | None:
    """``rdma -j system show`` -> ``"shared"`` | ``"exclusive"`` | None (the tool printed no netns).

    JSON (an array of one object): ``[{"netns":"exclusive","privileged-qkey":false,...}]``; older
    iproute2 prints fewer keys, or one object. Text: ``netns shared copy-on-fork on``. A netns word
    other than those two raises ``ValueError``: it is not guessed.
    """
    stripped = text.strip()
    found: list[str] = []
    if stripped.startswith(("[", "{")):
        for d in _json_values(text, "rdma -j system show", False):
            if isinstance(d, dict) and "netns" in d:
                found.append(str(_s(d.get("netns")) or d.get("netns")))
    else:
        words = stripped.split()
        found = [val for key, val in pairwise(words) if key == "netns"]
    for val in found:
        if val in ("shared", "exclusive"):
            return val
    if found:
        raise ValueError(f"rdma system show: netns {found[0][:40]!r} is neither shared nor exclusive")
    return None


def netns_from_sysfs(value: str | None) -> str | None:
    """``/sys/module/ib_core/parameters/netns_mode``: ``Y`` (or 1) shared, ``N`` (or 0) exclusive."""
    v = (value or "").strip().upper()
    if v in ("Y", "1"):
        return "shared"
    if v in ("N", "0"):
        return "exclusive"
    return None


def parse_sysfs_state(text: str | None) -> str | None:
    """A sysfs port ``state`` / ``phys_state`` -> the word ``rdma link`` prints for it.

    ``4: ACTIVE`` and ``ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` and ``LinkUp`` -> ``LINK_UP``
    (sysfs writes ``<number>: <CamelCase>`` for the physical state, rdma upper case with ``_``).
    """
    if text is None:
        return None
    word = text.strip()
    if ":" in word:
        word = word.split(":", 1)[1].strip()
    if not word:
        return None
    if word.isupper():
        return word
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", word).upper()


def parse_link_layer(text: str | None) -> str | None:
    """A sysfs port ``link_layer`` -> ``ethernet`` | ``infiniband`` (lower case, as it is compared)."""
    word = (text or "").strip().lower()
    return word or None


def rail_ports(links: Iterable[RdmaLink], rail_netdevs: Iterable[str]) -> set[tuple[str, int]]:
    """(device, port) of the ``rdma link`` entries whose netdev is a rail netdev."""
    want = set(rail_netdevs)
    return {(lk.dev, lk.port) for lk in links if lk.netdev in want}


def _pci_of(host: Host, device_link: str) -> str | None:
    """The PCI function a ``device`` symlink names; None for a non-PCI parent (an SF's auxiliary device)."""
    for target in (host.readlink(device_link), host.realpath(device_link)):
        name = basename(target)
        if name and BDF_RE.match(name):
            return name
    return None


def _counters(host: Host, base: str) -> list[tuple[str, int]]:
    out = []
    for sub in ("counters", "hw_counters"):
        for name in host.listdir(f"{base}/{sub}") or []:
            n = to_int(read_word(host, f"{base}/{sub}/{name}", 64))
            if n is not None:
                out.append((name, n))
    return out


def read_rdma_devices(host: Host, ports_wanted: set[tuple[str, int]], rail_bdfs: Iterable[str],
                      notes: Notes | None = None,
                      skip_counters: Callable[[str, str | None], bool] | None = None) -> tuple[RdmaDevice, ...]:
    """Every RDMA device with its PCI function; identity, port state and counters for rail devices only.

    A rail device is one with a wanted port or on a rail's PCI function; one on a rail's function
    with no wanted port gets port 1 (docs/design.md §4: a rail's RDMA port is its ``rdma link`` entry, else
    port 1 of the RDMA device on its function). Other devices (VFs' in shared netns mode: up to one
    per VF) cost one symlink walk each.
    """
    notes = notes if notes is not None else Notes()
    names = host.listdir(_IB)
    if names is None:
        notes.missing("infiniband", f"{_IB}: not present (no RDMA devices or ib_core not loaded)")
        return ()
    rails = set(rail_bdfs)
    out = []
    for name in names:
        base = f"{_IB}/{name}"
        pci = _pci_of(host, f"{base}/device")
        wanted = sorted(p for d, p in ports_wanted if d == name)
        if not wanted and pci in rails:
            wanted = [1]
        if not wanted:
            out.append(RdmaDevice(name=name, pci=pci))
            continue
        ports: list[RdmaPort] = []
        counters: list[tuple[int, str, int]] = []
        no_counters = skip_counters is not None and skip_counters(name, pci)
        if no_counters:
            notes.missing(f"rdma counters {name}", "excluded by --exclude-devices")
        for p in wanted:
            pbase = f"{base}/ports/{p}"
            if not host.exists(pbase):
                continue
            ports.append(RdmaPort(p, parse_sysfs_state(read_word(host, f"{pbase}/state")),
                                  parse_sysfs_state(read_word(host, f"{pbase}/phys_state")),
                                  parse_link_layer(read_word(host, f"{pbase}/link_layer"))))
            if not no_counters:
                counters.extend((p, k, v) for k, v in _counters(host, pbase))
        out.append(RdmaDevice(
            name=name, pci=pci,
            fw_ver=read_word(host, f"{base}/fw_ver"),
            hca_type=read_word(host, f"{base}/hca_type"),
            node_guid=read_word(host, f"{base}/node_guid"),
            ports=tuple(ports),
            counters=tuple(counters),
        ))
    return tuple(out)


def read_rdma(host: Host, rail_netdevs: Iterable[str], rail_bdfs: Iterable[str], timeout_s: float = 10.0,
              notes: Notes | None = None, skip_counters: Callable[[str, str | None], bool] | None = None,
              ) -> tuple[tuple[RdmaLink, ...], str | None, tuple[RdmaDevice, ...]]:
    """``(rdma links, netns mode, RDMA devices)``.

    The netns mode comes from ``rdma system show``, else from ib_core's ``netns_mode`` parameter.
    """
    notes = notes if notes is not None else Notes()
    links: tuple[RdmaLink, ...] = ()
    res = host.run(["rdma", "-j", "link", "show"], timeout_s=timeout_s)
    if res.ok:
        try:
            links = parse_rdma_links(res.text, res.truncated)
        except ValueError as exc:
            notes.missing("rdma", str(exc))
    else:
        notes.command("rdma", res)
    netns = None
    # Both commands use the same NETLINK_RDMA socket: when the first could not run or failed, the
    # second would too (no ib_core, or no rdma tool).
    if res.ok:
        res = host.run(["rdma", "-j", "system", "show"], timeout_s=timeout_s)
        if res.ok:
            try:
                netns = parse_rdma_system(res.text)
            except ValueError as exc:
                notes.missing("rdma system", str(exc))
        else:
            notes.command("rdma system", res)
    if netns is None:
        netns = netns_from_sysfs(read_word(host, "/sys/module/ib_core/parameters/netns_mode"))
    devices = read_rdma_devices(host, rail_ports(links, rail_netdevs), rail_bdfs, notes, skip_counters)
    return links, netns, devices


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
    return part("rdma", notes, fields={"rdma_links": links, "rdma_netns": netns, "rdma_devices": devices})


SOURCE = Source("rdma", "rdma links, the netns mode and the rails' RDMA port counters",
                (("rdma",),), 60.0, 60.0, ("rdma_links", "rdma_netns", "rdma_devices"), read_rdma_part, order=70,
                needs=("rails", "rail_bdfs", "links"), roles=frozenset({"ports"}))
