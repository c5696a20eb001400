"""NVIDIA GPUs, the GPUDirect RDMA paths and the rail PFs' places in the PCIe tree, from sysfs only
(docs/design.md §3 "GPUs and GPUDirect": no GPU driver call, no ``nvidia-smi``).

- GPUs: every ``/sys/bus/pci/devices/<bdf>`` with vendor ``0x10de`` and class ``0x0302xx`` (3D
  controller: data-centre GPUs) or ``0x0300xx`` (VGA); NVSwitches (``0x0680xx``) are not GPUs. Each with
  its resolved sysfs path (the PCIe tree from the root complex down) and ``numa_node``.
- The peer-memory paths NCCL probes before it registers GPU memory with a NIC (``net_ib.cc``
  ``ibGdrSupportInitOnce`` since NCCL 2.23): ``/sys/kernel/mm/memory_peers/nv_mem/version``,
  ``/sys/kernel/mm/memory_peers/nv_mem_nc/version``, ``/sys/module/nvidia_peermem/version``.
- The ``nvidia`` module: ``/sys/module/nvidia/{version,taint}`` (``P`` in the taint: the proprietary
  module, which has no DMA-BUF export).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import GpuState, PciPath
from agent.readers.common import BDF_RE, Notes, read_word, to_int
from agent.readers.source import Context, Part, Source, part

__all__ = ["GPU_CLASSES", "NVIDIA", "PEER_MEMORY_PATHS", "SOURCE", "is_gpu", "parse_pci_path", "read_gpus"]

_DEVICES = "/sys/bus/pci/devices"
NVIDIA = "0x10de"
#: PCI class prefixes of a GPU: 0x0302 3D controller (H100, B200 ...), 0x0300 VGA compatible.
GPU_CLASSES = ("0x0302", "0x0300")
#: The three paths NCCL tests with access(F_OK); any one means a peer-memory client is registered.
PEER_MEMORY_PATHS = (
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
)
_CLASS = re.compile(r"\A0x[0-9a-fA-F]{6}\Z")


def is_gpu(vendor: str | None, pci_class: str | None) -> bool:
    """An NVIDIA GPU function by its sysfs ``vendor`` and ``class`` words.

    >>> is_gpu("0x10de", "0x030200"), is_gpu("0x10de", "0x068000"), is_gpu("0x15b3", "0x020000")
    (True, False, False)
    """
    if (vendor or "").lower() != NVIDIA or not pci_class or not _CLASS.match(pci_class):
        return False
    return pci_class.lower()[:6] in GPU_CLASSES


def parse_pci_path(bdf: str, realpath: str | None, numa: str | None, pci_class: str | None = None) -> PciPath:
    """A function's resolved sysfs path and NUMA node; a path that does not end in the function's own
    address, or leaves ``/sys/devices``, is not a PCIe place (None); ``-1`` is "no NUMA node".

    Sample (an H100 behind the PCIe switch it shares with a ConnectX-7 on an HGX baseboard)::

        /sys/bus/pci/devices/0000:18:00.0 -> ../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0
        /sys/bus/pci/devices/0000:18:00.0/numa_node  "0\n"
        /sys/bus/pci/devices/0000:18:00.0/class      "0x030200\n"
        /sys/bus/pci/devices/0000:18:00.0/vendor     "0x10de\n"
    """
    path = realpath if realpath and realpath.startswith("/sys/devices/") and realpath.rstrip("/").endswith(
        "/" + bdf) else None
    node = to_int(numa)
    return PciPath(bdf=bdf, path=path, numa_node=node if node is not None and node >= 0 else None,
                   pci_class=pci_class.lower() if pci_class and _CLASS.match(pci_class) else None)


def _place(host: Host, bdf: str, pci_class: str | None = None) -> PciPath:
    base = f"{_DEVICES}/{bdf}"
    return parse_pci_path(bdf, host.realpath(base), read_word(host, f"{base}/numa_node", 64), pci_class)


def read_gpus(host: Host, rail_bdfs: Iterable[str] = (), notes: Notes | None = None,
              skip: Iterable[str] = ()) -> GpuState:
    """The GPUs, the rail PFs' places and the GPUDirect paths of the node (see the module doc).

    ``skip``: functions known not to be GPUs (the NICs' VFs the links source read: 8 x 127 of them
    on a big node, each a ``vendor`` read saved every interval)."""
    notes = notes if notes is not None else Notes()
    entries = host.listdir(_DEVICES)
    gpus: list[PciPath] = []
    if entries is None:
        notes.missing("gpus", f"{_DEVICES}: not available")
    known = frozenset(skip)
    for bdf in entries or ():
        if not BDF_RE.match(bdf) or bdf in known:
            continue
        # vendor first: on a node of 300 functions only the NVIDIA ones cost a second read
        vendor = read_word(host, f"{_DEVICES}/{bdf}/vendor", 64)
        if (vendor or "").lower() != NVIDIA:
            continue
        cls = read_word(host, f"{_DEVICES}/{bdf}/class", 64)
        if is_gpu(vendor, cls):
            gpus.append(_place(host, bdf, cls))
    rails = tuple(_place(host, b) for b in dict.fromkeys(rail_bdfs) if BDF_RE.match(b))
    peers = []
    for path in PEER_MEMORY_PATHS:
        text = host.read_text(path, 256)
        if text is not None:
            peers.append((path, text.strip()))
    loaded = host.exists("/sys/module/nvidia")
    return GpuState(gpus=tuple(gpus), rail_paths=rails, peer_memory=tuple(peers), nvidia_loaded=loaded,
                    nvidia_version=read_word(host, "/sys/module/nvidia/version", 256) if loaded else None,
                    nvidia_taint=read_word(host, "/sys/module/nvidia/taint", 64) if loaded else None)


def read_gpus_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """GPUs, GPUDirect paths and the rail PFs' PCIe places: sysfs only."""
    nic_vfs = {vf for f in ctx.functions for vf in f.virtfns} | {f.bdf for f in ctx.functions if f.is_vf}
    return part("gpus", notes, fields={"gpus": read_gpus(host, ctx.rail_bdfs, notes, skip=nic_vfs)})


SOURCE = Source("gpus", "NVIDIA GPUs, the GPUDirect RDMA paths NCCL probes and the GPU <-> rail PCIe topology (sysfs)",
                (), 60.0, 0.0, ("gpus",), read_gpus_part, order=60, needs=("rail_bdfs", "functions"))
