"""Is this node ready for NCCL after an upgrade? FirmwarePendingActivation, FirmwareStoredUnreadable,
GpuDirectNotReady, MtuMismatch, DriverNotDoca and RailNamingConflict (docs/design.md §4). ``RailResourcesLost`` is an event only
(``agent/detectors/rail_resources.py``): the allocatable comes from the API server, not the node.

The traps each rule steps around:

- **A stored firmware of 255.255.65535** is no firmware: since upstream 10dc35f6a443 mlx5 reports a
  failed query as all-ones version words (``UNREADABLE_VERSION``) instead of failing ``devlink dev
  info``. It is ``FirmwareStoredUnreadable``, never a ``FirmwarePendingActivation`` (nothing waits for
  a reset: the flash failed), and it is left out of the stored versions the evidence compares.

- **GPUDirect** is what NCCL itself probes. ``ncclIbGdrSupport`` (NVIDIA/nccl
  ``src/transport/net_ib.cc``, ``ibGdrSupportInitOnce``, NCCL 2.23 on; ``src/transport/net_ib/`` in
  later trees) tests with ``access(F_OK)`` ``/sys/kernel/mm/memory_peers/nv_mem/version``,
  ``.../nv_mem_nc/version`` and ``/sys/module/nvidia_peermem/version``: any one is a peer-memory
  client. Without one, ``ncclIbDmaBufSupport`` probes DMA-BUF with a dummy ``ibv_reg_dmabuf_mr`` (fd
  -1; ``EOPNOTSUPP`` / ``EPROTONOSUPPORT`` mean unsupported): RDMA memory regions from a DMA-BUF came
  with Linux 5.12, and the GPU must export its memory as DMA-BUF, which the open GPU kernel modules
  do and the proprietary ``nvidia.ko`` (``P`` in ``/sys/module/nvidia/taint``) does not. NVIDIA's
  GPUDirect RDMA documentation (CUDA "GPUDirect RDMA", 3.7 "Using nvidia-peermem"; the GPU Operator's
  "GPUDirect RDMA and GPUDirect Storage": DMA-BUF or the legacy nvidia-peermem, DMA-BUF recommended)
  names the same two paths. So open modules without ``nvidia_peermem`` are ready; a node without GPUs,
  or without rails, is not judged; a taint or kernel that cannot be read is not judged.
- **MTU** is a rail's: the management NIC (or any netdev that is not a rail) never counts, neither
  for the rail being judged nor for the most common MTU it is judged against.
- **DriverNotDoca**: inbox is ``/sys/module/mlx5_core/version`` absent or equal to the kernel
  release; DOCA and MLNX_OFED report ``YY.MM-x.y.z`` / ``N.N-x.y.z`` and are not inbox.
- **RailNamingConflict** replaces the ``RailNameMismatch`` / ``RdmaNameMismatch`` the conflicting
  rules would give (one finding per cause): ``replaced`` drops them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from agent.analysis.checks._util import Check, Refine, finding, name_list, rail_label
from agent.analysis.topology import Pf, Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import UNREADABLE_VERSION, FirmwareInfo, GpuState, RailRule, Snapshot
from agent.naming import rail_rules

__all__ = ["check", "dma_buf", "gpudirect_paths", "is_inbox", "naming_conflicts", "replaced"]

#: the first kernel with RDMA DMA-BUF memory registration (ib_umem_dmabuf, Linux 5.12)
DMA_BUF_KERNEL = (5, 12)
_KERNEL = re.compile(r"\A(\d+)\.(\d+)")


# -- FirmwarePendingActivation, FirmwareStoredUnreadable -----------------------------------------------------------------


def _firmware(snap: Snapshot, topo: Topology) -> list[Finding]:
    by_handle: dict[str, FirmwareInfo] = {fi.handle: fi for fi in snap.firmware}
    out = []
    stored_by_nic: dict[str, str] = {}
    pending: list[tuple[Pf, list[Pf]]] = []
    for nic in topo.nics:
        if not nic.carries_rails:
            continue
        pfs = [pf for b in nic.pfs if (pf := topo.pf(b)) is not None]
        if not pfs:
            continue
        lowest = pfs[0]
        for pf in pfs:
            fi = by_handle.get(pf.handle)
            if fi is not None and fi.stored_version and fi.stored_version != UNREADABLE_VERSION:
                stored_by_nic.setdefault(lowest.handle, fi.stored_version)
        waiting = [pf for pf in pfs if (fi := by_handle.get(pf.handle)) is not None and fi.pending]
        if waiting:
            pending.append((lowest, waiting))
        unreadable = [pf for pf in pfs if (fi := by_handle.get(pf.handle)) is not None and fi.unreadable]
        if unreadable:
            out.append(_stored_unreadable(unreadable, by_handle))
    differing = len(set(stored_by_nic.values())) > 1
    for lowest, waiting in pending:
        versions = [{"handle": pf.handle, "running": r, "stored": st, "version": name}
                    for pf in waiting for name, r, st in by_handle[pf.handle].pending]
        first = versions[0]
        out.append(finding(
            "FirmwarePendingActivation", lowest.handle,
            f"{lowest.handle} ({lowest.netdev or 'no netdev'}): firmware {first['stored']} is flashed but "
            f"{first['running']} runs until the next reset", pending=versions,
            stored_by_nic=dict(sorted(stored_by_nic.items())) if differing else None))
    return out


def _stored_unreadable(pfs: list[Pf], by_handle: dict[str, FirmwareInfo]) -> Finding:
    """One finding per NIC, on the lowest PF that reports the stored version as 255.255.65535: the flash
    is shared by the NIC's PFs, so each reports the same failure."""
    first = pfs[0]
    versions = [{"handle": pf.handle, "version": name, "running": r, "stored": st}
                for pf in pfs for name, r, st in by_handle[pf.handle].unreadable]
    running = by_handle[first.handle].version
    runs = f"; {running} runs" if running and running != UNREADABLE_VERSION else ""
    return finding(
        "FirmwareStoredUnreadable", first.handle,
        f"{first.handle} ({first.netdev or 'no netdev'}): the NIC could not report its stored firmware "
        f"(devlink dev info says {UNREADABLE_VERSION}{runs}) — a failed or interrupted flash; check `devlink dev "
        "info` and the flash log before any reset", unreadable=versions,
        pfs=[pf.handle for pf in pfs] if len(pfs) > 1 else None)


# -- GpuDirectNotReady -------------------------------------------------------------------------


def gpudirect_paths(state: GpuState) -> tuple[str, ...]:
    """The peer-memory paths NCCL would find (any one is enough)."""
    return tuple(p for p, _v in state.peer_memory)


def _kernel(release: str | None) -> tuple[int, int] | None:
    m = _KERNEL.match(release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def dma_buf(state: GpuState, kernel: str | None) -> bool | None:
    """True when NCCL can register GPU memory through DMA-BUF, False when it cannot, None when the
    module's taint or the kernel release could not be read."""
    if not state.nvidia_loaded:
        return False
    kv = _kernel(kernel)
    if kv is not None and kv < DMA_BUF_KERNEL:
        return False
    if state.nvidia_taint is None:
        return None
    if "P" in state.nvidia_taint:
        return False
    return True if kv is not None else None


def _gpudirect(snap: Snapshot, topo: Topology) -> list[Finding]:
    state = snap.gpus
    if state is None or not state.gpus or not topo.rails:
        return []
    if gpudirect_paths(state):
        return []
    dmabuf = dma_buf(state, snap.versions.kernel)
    if dmabuf is not False:
        return []
    if not state.nvidia_loaded:
        why = "the nvidia module is not loaded"
    elif "P" in (state.nvidia_taint or ""):
        why = f"the nvidia module is the proprietary one (taint {state.nvidia_taint}): no DMA-BUF"
    else:
        why = f"kernel {snap.versions.kernel} is older than 5.12: no DMA-BUF"
    return [finding(
        "GpuDirectNotReady", "node",
        f"{len(state.gpus)} GPU(s) and {len(topo.rails)} rail(s) but no GPUDirect RDMA path: no peer-memory "
        f"module (nvidia_peermem) and {why}; NCCL falls back to host memory",
        gpus=[g.bdf for g in state.gpus], peer_memory_paths_checked=list(_PATHS),
        nvidia_version=state.nvidia_version, nvidia_taint=state.nvidia_taint, kernel=snap.versions.kernel)]


_PATHS = ("/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
          "/sys/module/nvidia_peermem/version")


# -- MtuMismatch -------------------------------------------------------------------------------


def common_mtu(mtus: Iterable[int]) -> int | None:
    """The most common MTU; of a tie, the largest (docs/design.md §4)."""
    counts = Counter(mtus)
    if not counts:
        return None
    return max(counts, key=lambda m: (counts[m], m))


def _mtu(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    rails = [r for r in topo.rails if r.netdev is not None and r.netdev.mtu is not None]
    want = exp.mtu if exp.mtu is not None else common_mtu(r.netdev.mtu for r in rails if r.netdev and r.netdev.mtu)
    if want is None:
        return []
    out = []
    for r in rails:
        assert r.netdev is not None and r.netdev.mtu is not None
        if r.netdev.mtu == want:
            continue
        against = "--expect-mtu" if exp.mtu is not None else "the other rails"
        out.append(finding(
            "MtuMismatch", r.expected_netdev,
            f"rail {rail_label(r.rail, r.plane)}: {r.netdev.ifname} has MTU {r.netdev.mtu}, {against} {want}",
            netdev=r.netdev.ifname, mtu=r.netdev.mtu, expected=want,
            by="expect-mtu" if exp.mtu is not None else "most common rail MTU"))
    return out


# -- DriverNotDoca -----------------------------------------------------------------------------


def is_inbox(mlx5_version: str | None, kernel: str | None) -> bool:
    """The inbox mlx5 driver: no ``/sys/module/mlx5_core/version``, or the kernel release in it.

    >>> is_inbox(None, "6.8.0-60-generic"), is_inbox("6.8.0-60-generic", "6.8.0-60-generic")
    (True, True)
    >>> is_inbox("25.10-1.7.1", "6.8.0-60-generic"), is_inbox("5.8-1.0.1", "5.15.0-91-generic")
    (False, False)
    """
    v = (mlx5_version or "").strip()
    return not v or (kernel is not None and v == kernel.strip())


def _driver(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    if exp.driver != "doca" or not any(r.netdev is not None for r in topo.rails):
        return []
    v = snap.versions
    if v.kernel is None and v.mlx5_version is None:
        return []  # versions were not read: not judged
    if not is_inbox(v.mlx5_version, v.kernel):
        return []
    return [finding(
        "DriverNotDoca", "node",
        f"the rail PFs run the inbox mlx5 driver ({'version ' + v.mlx5_version if v.mlx5_version else 'no module version'}"
        f", kernel {v.kernel}), not the DOCA driver --expect-driver names",
        mlx5_version=v.mlx5_version, mlx5_srcversion=v.mlx5_srcversion, kernel=v.kernel)]


# -- RailNamingConflict ------------------------------------------------------------------------


def naming_conflicts(rules: tuple[RailRule, ...], exp: Expectations) -> list[tuple[str, str, list[RailRule]]]:
    """(kind of conflict, subject, the rules) for each function named twice (subject ``pci/<bdf>``) and
    each rail name given to two functions (subject the name); only rules that touch a rail count."""
    chosen = rail_rules(rules, exp.net_templates, exp.rdma_templates)
    rail_pcis = {r.pci for r in chosen}
    rail_names = {(r.name, r.kind) for r in chosen}
    out: list[tuple[str, str, list[RailRule]]] = []
    by_fn: dict[tuple[str, str], list[RailRule]] = {}
    by_name: dict[tuple[str, str], list[RailRule]] = {}
    for r in rules:
        if r.pci in rail_pcis:
            by_fn.setdefault((r.pci, r.kind), []).append(r)
        if (r.name, r.kind) in rail_names:
            by_name.setdefault((r.name, r.kind), []).append(r)
    for (pci, _kind), rs in sorted(by_fn.items()):
        if len({r.name for r in rs}) > 1:
            out.append(("function", f"pci/{pci}", rs))
    for (name, _kind), rs in sorted(by_name.items()):
        if len({r.pci for r in rs}) > 1:
            out.append(("name", name, rs))
    return out


def _naming(snap: Snapshot, exp: Expectations) -> list[Finding]:
    out = []
    for kind, subject, rs in naming_conflicts(snap.rules, exp):
        where = [f"{r.file}:{r.line} {r.pci} -> {r.name}" for r in rs]
        if kind == "function":
            msg = (f"{subject} is named {name_list(sorted({r.name for r in rs}))} by {len(rs)} {rs[0].kind} udev "
                   "rules: only one can win at boot")
        else:
            msg = (f"{subject} is given to {name_list(sorted({r.pci for r in rs}))} by {len(rs)} {rs[0].kind} udev "
                   "rules: only one function can have it")
        out.append(finding("RailNamingConflict", subject, msg, kind=rs[0].kind, rules=where))
    return out


def replaced(findings: list[Finding], snap: Snapshot, exp: Expectations) -> list[Finding]:
    """The findings without the ``RailNameMismatch`` / ``RdmaNameMismatch`` a naming conflict causes."""
    conflicts = naming_conflicts(snap.rules, exp)
    if not conflicts:
        return findings
    pcis = {r.pci for _k, _s, rs in conflicts for r in rs}
    names = {r.name for _k, _s, rs in conflicts for r in rs}
    return [f for f in findings
            if not (f.code in ("RailNameMismatch", "RdmaNameMismatch")
                    and (f.subject in names or f.evidence.get("pci") in pcis))]


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    return [*_firmware(snap, topo), *_gpudirect(snap, topo), *_mtu(snap, topo, exp), *_driver(snap, topo, exp),
            *_naming(snap, exp)]


CHECKS = (
    Check(80, ("FirmwarePendingActivation", "FirmwareStoredUnreadable", "GpuDirectNotReady", "MtuMismatch", "DriverNotDoca",
               "RailNamingConflict"),
          lambda i: check(i.snap, i.topo, i.exp)),
    Refine(10, lambda found, i: replaced(found, i.snap, i.exp)),
)
