"""The readiness series: firmware running and stored per rail PF, GPUDirect readiness, the GPU <-> rail
topology (docs/design.md §4 ``FirmwarePendingActivation``, ``GpuDirectNotReady``). The per-rail MTU is
``railscope_rail_mtu_bytes`` (collector.py); the node's allocatable rail resources are the node
watch's (``railscope_node_allocatable``, agent/service/maintenance.py).

At most 3 series per rail PF and 3 per rail, plus one per GPUDirect path: bounded on any node.
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.analysis.checks.readiness import dma_buf, gpudirect_paths
from agent.analysis.gpu_topology import LINK_WORDS, gpu_for
from agent.analysis.topology import Topology
from agent.metrics.families import Scrape, Subject
from agent.model import Snapshot

__all__ = ["SUBJECT", "readiness"]


class _Fams(Protocol):
    def gauge(self, name: str, doc: str, labels: Any, values: Any, value: float) -> None: ...
    def info(self, name: str, doc: str, labels: Any, values: Any, facts: dict[str, str]) -> None: ...


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def readiness(fams: _Fams, snap: Snapshot, topo: Topology) -> None:
    by_handle = {fi.handle: fi for fi in snap.firmware}
    for pf in topo.rail_pfs:
        fi = by_handle.get(pf.handle)
        if fi is None:
            continue
        base = (_s(pf.bdf), _s(pf.netdev))
        fams.info("railscope_pf_firmware", "The rail PF's firmware: running, and stored for the next reset "
                  "(devlink dev info).", ("pci", "device"), base,
                  {"running": _s(fi.version), "stored": _s(fi.stored_version), "psid": _s(fi.psid)})
        if fi.running and fi.stored:
            fams.gauge("railscope_firmware_pending_activation",
                       "1 when a flashed firmware differs from the running one and waits for a reset.",
                       ("pci", "device"), base, 1 if fi.pending else 0)
    state = snap.gpus
    if state is None or not state.gpus:
        return
    paths = gpudirect_paths(state)
    ready = bool(paths) or dma_buf(state, snap.versions.kernel) is not False
    fams.gauge("railscope_gpudirect_ready",
               "1 when NCCL finds a GPUDirect RDMA path on this GPU node (a peer-memory module, or DMA-BUF with the "
               "open GPU kernel modules on Linux >= 5.12), 0 when it falls back to host memory.", (), (),
               1 if ready else 0)
    for path, version in state.peer_memory:
        fams.info("railscope_gpudirect_peer_memory", "A peer-memory path NCCL probes that exists, with its version.",
                  ("path",), (path,), {"version": version})
    if state.nvidia_loaded:
        fams.info("railscope_nvidia_module", "The nvidia GPU kernel module (/sys/module/nvidia): version and taint "
                  "(P: proprietary, no DMA-BUF).", (), (),
                  {"version": _s(state.nvidia_version), "taint": _s(state.nvidia_taint)})
    fams.gauge("railscope_gpus", "NVIDIA GPU functions on the node (vendor 0x10de, class 0x0302xx / 0x0300xx).",
               (), (), len(state.gpus))
    for rail in topo.rails:
        gpu, word = gpu_for(rail.pci, state)
        if gpu is None or rail.netdev is None:
            continue  # a missing rail has only railscope_rail_up and _info
        netdev = rail.netdev.ifname
        fams.info("railscope_rail_gpu", "The GPU nearest the rail PF in the PCIe tree and how near, in nvidia-smi "
                  "topo -m words (PIX, PXB, PHB, NODE, SYS).", ("rail", "plane", "device"),
                  (_s(rail.rail), _s(rail.plane), netdev), {"gpu": gpu, "link": _s(word)})
        if word in LINK_WORDS:
            fams.gauge("railscope_rail_gpu_distance",
                       "How far the rail's nearest GPU is: 0 PIX, 1 PXB, 2 PHB, 3 NODE, 4 SYS (one slow rank: a "
                       "rail far from its GPU).", ("rail", "plane", "device"),
                       (_s(rail.rail), _s(rail.plane), netdev), LINK_WORDS.index(word))


def _render(fams: _Fams, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is not None and topo is not None:
        readiness(fams, snap, topo)  # type: ignore[arg-type]


SUBJECT = Subject(80, _render)
