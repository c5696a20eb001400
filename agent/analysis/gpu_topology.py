"""GPU <-> rail PCIe topology in ``nvidia-smi topo -m`` words (docs/design.md §4 ``GpuDirectNotReady``), pure.

A rail's GPU is the GPU whose resolved sysfs path shares the longest prefix with the rail PF's (ties:
the one on the PF's NUMA node, then the lowest address). The link between them, in the words of
``nvidia-smi topo -m``:

- ``PIX``: at most one PCIe bridge between them (both below the same PCIe switch);
- ``PXB``: several bridges, without crossing the host bridge (cascaded switches);
- ``PHB``: only the host bridge (root complex) in common;
- ``NODE``: different host bridges on one NUMA node;
- ``SYS``: different NUMA nodes (the SMP interconnect: UPI / Infinity Fabric).

A path is ``/sys/devices/pci<domain>:<bus>/<bridge>/.../<function>``: the first component names the
host bridge, the ones between it and the function are the PCIe bridges (a root port, a switch's
upstream and downstream ports) on the way down.
"""

from __future__ import annotations

from agent.model import GpuState, PciPath

__all__ = ["LINK_WORDS", "gpu_for", "link_word"]

#: nearest first: what one rank sees when its GPU and NIC are that far apart
LINK_WORDS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _parts(p: PciPath) -> list[str] | None:
    if p.path is None:
        return None
    parts = p.path.removeprefix("/sys/devices/").strip("/").split("/")
    return parts if len(parts) >= 2 else None


def link_word(a: PciPath, b: PciPath) -> str | None:
    """The ``nvidia-smi topo -m`` word for two functions, None when a path is unknown.

    >>> sw = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    >>> link_word(PciPath("0000:18:00.0", sw + "/0000:17:00.0/0000:18:00.0", 0),
    ...           PciPath("0000:19:00.0", sw + "/0000:17:01.0/0000:19:00.0", 0))
    'PIX'
    """
    pa, pb = _parts(a), _parts(b)
    if pa is None or pb is None:
        return None
    if pa[0] != pb[0]:
        # Different host bridges: SYS only when both NUMA nodes are known and differ.
        if a.numa_node is not None and b.numa_node is not None and a.numa_node != b.numa_node:
            return "SYS"
        return "NODE"
    ba, bb = pa[1:-1], pb[1:-1]  # the bridges below the host bridge, on the way to each function
    common = 0
    while common < min(len(ba), len(bb)) and ba[common] == bb[common]:
        common += 1
    if common == 0:
        return "PHB"
    # Below the last bridge they share, each side may cross one more (a switch's downstream port).
    if len(ba) - common <= 1 and len(bb) - common <= 1:
        return "PIX"
    return "PXB"


def _shared(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def gpu_for(rail_bdf: str | None, state: GpuState | None) -> tuple[str | None, str | None]:
    """(the rail's GPU, the link word) — (None, None) without GPUs or without the PF's path."""
    if state is None or not state.gpus or rail_bdf is None:
        return None, None
    pf = state.rail_path(rail_bdf)
    pp = _parts(pf) if pf is not None else None
    if pf is None or pp is None:
        return None, None
    best: tuple[tuple[int, int, str], PciPath] | None = None
    for g in state.gpus:
        gp = _parts(g)
        if gp is None:
            continue
        same_numa = 0 if (g.numa_node is not None and g.numa_node == pf.numa_node) else 1
        key = (-_shared(gp, pp), same_numa, g.bdf)
        if best is None or key < best[0]:
            best = (key, g)
    if best is None:
        return None, None
    return best[1].bdf, link_word(best[1], pf)
