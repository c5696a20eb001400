"""Which functions firmware-touching reads may reach (docs/design.md §3 "Which functions are touched").

ethtool statistics, ``ethtool -m`` / ``-a`` / ``--show-fec``, ``dcb ... show``, ``rdma statistic``,
``devlink dev info`` / health / params / eswitch reach the NIC's firmware. They go to rail PFs and the PFs the udev rules name, never to another mlx5 function of
the node: HGX baseboards expose restricted PFs whose register reads fail and flood the kernel log at
every scrape (prometheus/node_exporter#3434, Mellanox/nic-configuration-operator#400).
``--exclude-devices REGEX`` removes more: a device whose PCI address or netdev name it matches
(``re.search``) is never asked. The daemon, ``doctor`` and every capture plan go through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from agent.model import Link

__all__ = ["compile_exclude", "excluded", "netdevs_on_functions", "pci_of_links", "touchable_bdfs", "touchable_netdevs"]


@lru_cache(maxsize=16)
def compile_exclude(pattern: str | None) -> re.Pattern[str] | None:
    """The ``--exclude-devices`` pattern compiled once; None or an empty pattern excludes nothing.

    Raises ``re.error`` for a pattern that does not compile (the CLI turns it into a usage error).
    """
    return re.compile(pattern) if pattern else None


def excluded(pattern: str | None, *names: str | None) -> bool:
    """True when the pattern matches any of ``names`` (a PCI address, a netdev, a devlink handle)."""
    rx = compile_exclude(pattern)
    if rx is None:
        return False
    return any(n and rx.search(n) for n in names)


def pci_of_links(links: Iterable[Link]) -> dict[str, str]:
    """netdev -> the PCI function it sits on, from the link dump's parent device."""
    return {lk.ifname: lk.parent_dev for lk in links if lk.parent_bus == "pci" and lk.parent_dev}


def netdevs_on_functions(links: Iterable[Link]) -> dict[str, list[str]]:
    """PCI function -> the netdevs on it: a function is excluded with any of them (its firmware is theirs)."""
    out: dict[str, list[str]] = {}
    for netdev, bdf in pci_of_links(links).items():
        out.setdefault(bdf, []).append(netdev)
    return out


def touchable_netdevs(netdevs: Iterable[str], links: Iterable[Link], pattern: str | None) -> list[str]:
    """The rail netdevs a firmware read may reach: neither their name nor their PCI function excluded."""
    if compile_exclude(pattern) is None:
        return list(netdevs)  # nothing excluded: no walk over a big node's 2,000 links
    pci = pci_of_links(links)
    return [n for n in netdevs if not excluded(pattern, n, pci.get(n))]


def touchable_bdfs(bdfs: Iterable[str], links: Iterable[Link], pattern: str | None) -> list[str]:
    """The rail PFs a firmware read may reach: neither their address nor a netdev on them excluded."""
    rx = compile_exclude(pattern)
    if rx is None:
        return list(bdfs)
    names = netdevs_on_functions(links)
    return [b for b in bdfs if not excluded(pattern, b, *names.get(b, ()))]
