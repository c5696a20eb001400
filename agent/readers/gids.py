"""gids: the RDMA GID table of each rail's RDMA port (sysfs), what NCCL picks its source GID from.

A RoCE port's GID table (``/sys/class/infiniband/<dev>/ports/<p>/gids/<i>``) holds one entry per
address of each netdev on the port and RoCE version; ``gid_attrs/types/<i>`` says the version
(``RoCE v2`` or ``IB/RoCE v1``), ``gid_attrs/ndevs/<i>`` the netdev (drivers/infiniband/core/sysfs.c).
NCCL takes ``NCCL_IB_GID_INDEX`` or else the first RoCE v2 GID of the address family it is told to
use; a rail with no RoCE v2 GID of an IPv4 address is one whose NCCL traffic cannot be routed
(an address lost after a reboot, a netplan that left the rail without one).

The port read is the rail's RDMA device's port 1 (docs/design.md §4 "A rail's RDMA port": the uplink; in
switchdev the other ports are representors'), found under the rail's PCI function
(``/sys/class/net/<rail>/device/infiniband/<dev>``). Only GIDs whose ``ndevs`` entry is the rail itself
are kept. An empty slot reads all zeros and its ``types`` file answers EINVAL on read (the UCX fix
openucx/ucx#11237): zero GIDs are skipped before their attributes are read. sysfs only, no firmware.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import RdmaGid
from agent.readers.common import Notes, read_word
from agent.readers.source import Context, Part, Source, part

__all__ = ["SOURCE", "parse_gid", "parse_gid_type", "read_gids"]

_GID = re.compile(r"\A[0-9a-f]{4}(?::[0-9a-f]{4}){7}\Z")
_ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
#: a port's GID table has at most 256 entries (ib_verbs ``gid_tbl_len`` is a u8 index); a node image
#: may list anything
_MAX_GIDS = 256
#: RDMA devices under one PCI function read at most (mlx5 has one per function)
_MAX_DEVICES = 4
_TYPES = {"roce v2": "RoCE v2", "ib/roce v1": "IB/RoCE v1"}


def parse_gid(text: str | None) -> str | None:
    """``gids/<i>`` -> the GID, lower case; None for an empty slot (all zeros) or junk.

    Sample (``show_gids`` of a ConnectX pod's ``mlx5_0`` port 1, NVIDIA/nccl#1573)::

        fe80:0000:0000:0000:a4ed:ccff:fe8b:1994      index 4 and 5 (v1, v2): the link-local address
        0000:0000:0000:0000:0000:ffff:0a98:000c      index 6 and 7: IPv4 10.152.0.12, mapped
    """
    if text is None:
        return None
    gid = text.strip().lower()
    if not _GID.match(gid) or gid == _ZERO:
        return None
    return gid


def parse_gid_type(text: str | None) -> str | None:
    """``gid_attrs/types/<i>`` -> ``RoCE v2`` / ``IB/RoCE v1``; None for anything else. Sample: ``RoCE v2``."""
    if text is None:
        return None
    return _TYPES.get(text.strip().lower())


def _index(name: str) -> int | None:
    return int(name) if name.isdigit() and len(name) <= 3 and int(name) < _MAX_GIDS else None


def read_gids(host: Host, rails: Iterable[str], notes: Notes | None = None) -> tuple[RdmaGid, ...]:
    """The populated GID entries of each rail netdev on port 1 of its RDMA device(s)."""
    notes = notes if notes is not None else Notes()
    out: list[RdmaGid] = []
    for rail in dict.fromkeys(rails):
        devices = sorted(host.listdir(f"/sys/class/net/{rail}/device/infiniband") or ())[:_MAX_DEVICES]
        if not devices:
            continue  # no RDMA device on the rail's function: the rdma source and RailRdmaMissing say so
        for dev in devices:
            base = f"/sys/class/infiniband/{dev}/ports/1"
            slots = host.listdir(f"{base}/gids")
            if slots is None:
                # a node image recorded before this source has no GID table: say which it is
                where = "not recorded in this image" if not host.live else "not readable"
                # keyed by the rail netdev, as the per-netdev sources are (``ethtool -m net_rail1``)
                notes.missing(f"gids {rail}", f"{base}/gids: {where}")
                continue
            for i in sorted(n for n in (_index(s) for s in slots) if n is not None):
                gid = parse_gid(read_word(host, f"{base}/gids/{i}", 64))
                if gid is None:
                    continue  # an empty slot: its attributes answer EINVAL
                if read_word(host, f"{base}/gid_attrs/ndevs/{i}", 64) != rail:
                    continue
                out.append(RdmaGid(netdev=rail, device=dev, port=1, index=i, gid=gid,
                                   type=parse_gid_type(read_word(host, f"{base}/gid_attrs/types/{i}", 32))))
    return tuple(out)


def read_gids_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rails' GID tables (sysfs: no firmware access)."""
    return part("gids", notes, fields={"gids": read_gids(host, ctx.rails, notes)})


SOURCE = Source("gids", "the RDMA GID table of each rail's RDMA port (sysfs: RoCE v1 / v2 per address)",
                (), 60.0, 5.0, ("gids",), read_gids_part, order=105, needs=("rails",))
