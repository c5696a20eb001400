"""PCI functions and SR-IOV: ``/sys/bus/pci/devices/<bdf>/...``, once per distinct function.

Read for the functions the link dump names as parents (a representor's parent is its PF, so 1,000
representors cost nothing here), the functions udev rules name, and the PF of every VF among them.

A netdev whose parent sits on another bus (netdevsim, the kernel lab's NIC: ``parent_bus``
``netdevsim``, ``parent_dev`` ``netdevsim10``) keeps its SR-IOV files under
``/sys/bus/<bus>/devices/<dev>/``; ``read_bus_devices`` reads those, keyed by the device name as a
``PciFunction`` (the same name the link's ``parent_dev`` and the topology use).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.host import Host
from agent.model import Link, PciFunction
from agent.naming import NOT_PF_BUSES
from agent.readers.common import BDF_RE, Notes, basename, read_word, to_int

__all__ = ["bus_devices_of_links", "functions_of_links", "parse_pci_function", "read_bus_devices", "read_pci"]

_DEVICES = "/sys/bus/pci/devices"
_DEV_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.:-]*\Z")
_VIRTFN = re.compile(r"\Avirtfn([0-9]+)\Z")
_HEX_ID = re.compile(r"\A0x[0-9a-fA-F]{4}\Z")


def _bdf(target: str | None) -> str | None:
    name = basename(target)
    return name if name and BDF_RE.match(name) else None


def _count(text: str | None) -> int | None:
    n = to_int(text) if text is not None else None
    return n if n is not None and n >= 0 else None


def _hex_id(text: str | None) -> str | None:
    return text.lower() if text and _HEX_ID.match(text) else None


def parse_pci_function(
    bdf: str,
    files: dict[str, str | None],
    links: dict[str, str | None],
    virtfns: dict[int, str | None] | None = None,
) -> PciFunction:
    """Raw sysfs values of one function -> ``PciFunction``; truncated or garbage values -> None.

    ``files`` holds the text of ``sriov_numvfs``, ``sriov_totalvfs``, ``vendor``, ``device``;
    ``links`` the symlink targets of ``physfn`` and ``driver``; ``virtfns`` index -> ``virtfnN`` target.
    Sample::

        /sys/bus/pci/devices/0000:0c:00.0/sriov_numvfs   "1\\n"
        /sys/bus/pci/devices/0000:0c:00.0/sriov_totalvfs "127\\n"
        /sys/bus/pci/devices/0000:0c:00.0/vendor         "0x15b3\\n"
        /sys/bus/pci/devices/0000:0c:00.0/virtfn0 -> ../0000:0c:00.1
        /sys/bus/pci/devices/0000:0c:00.1/physfn  -> ../0000:0c:00.0
        /sys/bus/pci/devices/0000:0c:00.0/driver  -> ../../../../bus/pci/drivers/mlx5_core
    """
    vfs = tuple(b for _, b in sorted((virtfns or {}).items()) if b is not None)
    return PciFunction(
        bdf=bdf,
        sriov_numvfs=_count(files.get("sriov_numvfs")),
        sriov_totalvfs=_count(files.get("sriov_totalvfs")),
        physfn=_bdf(links.get("physfn")),
        virtfns=vfs,
        driver=basename(links.get("driver")),
        vendor=_hex_id(files.get("vendor")),
        device=_hex_id(files.get("device")),
    )


def _read_one(host: Host, bdf: str) -> PciFunction | None:
    base = f"{_DEVICES}/{bdf}"
    entries = host.listdir(base)
    if entries is None:
        return None
    names = set(entries)
    files = {n: read_word(host, f"{base}/{n}", 64) if n in names else None
             for n in ("sriov_numvfs", "sriov_totalvfs", "vendor", "device")}
    links = {n: host.readlink(f"{base}/{n}") if n in names else None for n in ("physfn", "driver")}
    virtfns: dict[int, str | None] = {}
    for n in entries:
        m = _VIRTFN.match(n)
        if m:
            virtfns[int(m.group(1))] = _bdf(host.readlink(f"{base}/{n}"))
    return parse_pci_function(bdf, files, links, virtfns)


def functions_of_links(host: Host, links: Iterable[Link]) -> dict[str, str]:
    """netdev -> PCI function: netlink's parent, else the ``/sys/class/net/<if>/device`` symlink.

    The symlink is read only for physical links netlink gave no parent for (old kernels), never for
    the representors, which all carry their PF as parent.
    """
    out: dict[str, str] = {}
    for lk in links:
        if lk.parent_dev:
            if (lk.parent_bus in (None, "pci")) and BDF_RE.match(lk.parent_dev):
                out[lk.ifname] = lk.parent_dev
            continue
        if lk.kind is not None or lk.ifname == "lo":
            continue
        bdf = _bdf(host.readlink(f"/sys/class/net/{lk.ifname}/device"))
        if bdf:
            out[lk.ifname] = bdf
    return out


def read_pci(host: Host, bdfs: Iterable[str], notes: Notes | None = None) -> tuple[PciFunction, ...]:
    """The named functions plus the PF of each VF among them, sorted by address."""
    notes = notes if notes is not None else Notes()
    todo = sorted({b for b in bdfs if BDF_RE.match(b)}, reverse=True)
    queued = set(todo)
    seen: dict[str, PciFunction] = {}
    absent = []
    while todo:
        bdf = todo.pop()
        fn = _read_one(host, bdf)
        if fn is None:
            absent.append(bdf)
            continue
        seen[bdf] = fn
        if fn.physfn and fn.physfn not in queued:
            queued.add(fn.physfn)
            todo.append(fn.physfn)
    if absent:
        notes.missing("pci", f"no {_DEVICES}/<bdf> for {', '.join(absent)}")
    return tuple(fn for _, fn in sorted(seen.items()))


def bus_devices_of_links(links: Iterable[Link]) -> list[tuple[str, str]]:
    """``(bus, dev)`` of every link parent on a bus other than PCI / auxiliary, sorted, once each.

    netdevsim: ``[("netdevsim", "netdevsim10")]``. The names become sysfs paths and devlink handles, so
    a name that could leave ``/sys/bus/<bus>/devices`` (a ``/``, ``..``) is not taken.
    """
    out = set()
    for lk in links:
        bus, dev = lk.parent_bus, lk.parent_dev
        if bus and dev and bus not in NOT_PF_BUSES and _DEV_NAME.match(bus) and _DEV_NAME.match(dev):
            out.add((bus, dev))
    return sorted(out)


def read_bus_devices(host: Host, links: Iterable[Link]) -> tuple[PciFunction, ...]:
    """SR-IOV of the non-PCI parents of ``links``: ``/sys/bus/<bus>/devices/<dev>/sriov_{num,total}vfs``.

    Only a device that has one of the two files is returned (a virtio or vmbus NIC has neither and is
    no SR-IOV PF). netdevsim (recorded on Linux 6.1) has ``sriov_numvfs`` and no ``sriov_totalvfs``,
    so its ``sriov_totalvfs`` stays None.
    """
    out = []
    for bus, dev in bus_devices_of_links(links):
        base = f"/sys/bus/{bus}/devices/{dev}"
        entries = host.listdir(base)
        if entries is None:
            continue
        names = set(entries)
        if not names & {"sriov_numvfs", "sriov_totalvfs"}:
            continue
        files = {n: read_word(host, f"{base}/{n}", 64) if n in names else None
                 for n in ("sriov_numvfs", "sriov_totalvfs")}
        driver = host.readlink(f"{base}/driver") if "driver" in names else None
        out.append(parse_pci_function(dev, files, {"driver": driver}))
    return tuple(out)
