"""Rail naming rules that nic-configuration-operator writes: PCI function -> netdev / RDMA name.

https://github.com/Mellanox/nic-configuration-operator (``pkg/udev/manager.go``). The rule says what
the name *should* be; the link dump says what it *is*.
"""

from __future__ import annotations

import re

from agent.host import Host
from agent.model import RailRule
from agent.readers.common import BDF_RE, Notes

__all__ = ["NET_RULES", "RDMA_RULES", "parse_rules", "read_rules"]

NET_RULES = "/etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA_RULES = "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules"

_KERNELS = re.compile(r'KERNELS=="(?P<bdf>[^"]+)"')
_NAME = re.compile(r'(?:^|[\s,])NAME:?="(?P<name>[^"]*)"')
# Two forms of the RDMA rename: the operator's RUN+="/usr/bin/rdma dev set %k name X" and
# rdma-core's PROGRAM="rdma_rename %k NAME_FIXED X".
_RDMA_RUN = re.compile(r'RUN\+?="[^"]*\brdma\s+dev\s+set\s+%k\s+name\s+(?P<name>[^"\s]+)\s*"')
_RDMA_RENAME = re.compile(r'PROGRAM="[^"]*\brdma_rename\s+%k\s+NAME_FIXED\s+(?P<name>[^"\s]+)\s*"')


def parse_rules(text: str, file: str, kind: str) -> tuple[RailRule, ...]:
    """Rules text -> ``RailRule`` per naming line (``kind`` ``net`` or ``rdma``), with its line number.

    Samples::

        SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.0", NAME="net_rail0"
        ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", RUN+="/usr/bin/rdma dev set %k name rdma_rail0"
        ACTION=="add", KERNELS=="0000:1a:00.0", PROGRAM="rdma_rename %k NAME_FIXED rdma_rail0"
    """
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        km = _KERNELS.search(s)
        if not km or not BDF_RE.match(km.group("bdf")):
            continue
        if kind == "net":
            m = _NAME.search(s)
        else:
            m = _RDMA_RUN.search(s) or _RDMA_RENAME.search(s)
        if m and m.group("name"):
            out.append(RailRule(pci=km.group("bdf").lower(), name=m.group("name"), kind=kind, file=file, line=n))
    return tuple(out)


def read_rules(host: Host, notes: Notes | None = None) -> tuple[RailRule, ...]:
    """Both rules files; an absent file is normal (no rails named by udev) and noted as such."""
    notes = notes if notes is not None else Notes()
    out: list[RailRule] = []
    for path, kind in ((NET_RULES, "net"), (RDMA_RULES, "rdma")):
        text = host.read_text(path, 1 << 20)
        if text is None:
            notes.missing(f"udev {kind} rules", f"{path}: not present")
            continue
        out.extend(parse_rules(text, path, kind))
    return tuple(out)
