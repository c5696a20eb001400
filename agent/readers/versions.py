"""Versions: kernel, hostname, cmdline, the mlx5 driver and the RDMA netns mode asked for vs running.

The inbox mlx5 driver has no ``/sys/module/mlx5_core/version`` (ethtool reports the kernel release
instead); the DOCA/OFED driver writes ``YY.MM-x.y.z`` there. ``srcversion`` changes on every driver
swap (the DOCA driver container restores the inbox driver when its pod ends).
"""

from __future__ import annotations

import re

from agent.host import Host
from agent.model import Versions
from agent.readers.common import Notes, read_word

__all__ = ["parse_modprobe_netns", "read_versions"]

_OPTIONS = re.compile(r"^\s*options\s+ib_core\s+(?P<rest>.*)$")
_NETNS = re.compile(r"(?:^|\s)netns_mode=(?P<v>\S+)")


def parse_modprobe_netns(text: str, file: str) -> list[tuple[str, str]]:
    """``(file, line)`` for every ``options ib_core ... netns_mode=<v>`` line of a modprobe.d file.

    Sample (``/etc/modprobe.d/ib_core.conf``)::

        # rdma-cni needs exclusive mode
        options ib_core netns_mode=0
    """
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _OPTIONS.match(line)
        if m and _NETNS.search(m.group("rest")):
            out.append((file, line.strip()))
    return out


def read_versions(host: Host, notes: Notes | None = None) -> Versions:
    notes = notes if notes is not None else Notes()
    kernel = read_word(host, "/proc/sys/kernel/osrelease")
    if kernel is None:
        notes.missing("versions", "/proc/sys/kernel/osrelease: not readable")
    modprobe: list[tuple[str, str]] = []
    for path in host.glob("/etc/modprobe.d/*.conf"):
        text = host.read_text(path, 256 << 10)
        if text:
            modprobe.extend(parse_modprobe_netns(text, path))
    return Versions(
        kernel=kernel,
        hostname=read_word(host, "/proc/sys/kernel/hostname"),
        cmdline=read_word(host, "/proc/cmdline", 64 << 10),
        mlx5_version=read_word(host, "/sys/module/mlx5_core/version"),
        mlx5_srcversion=read_word(host, "/sys/module/mlx5_core/srcversion"),
        netns_mode=read_word(host, "/sys/module/ib_core/parameters/netns_mode"),
        modprobe_netns_mode=tuple(modprobe),
    )
