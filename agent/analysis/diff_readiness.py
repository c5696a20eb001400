"""The readiness rows of ``railscope diff`` (docs/design.md §4): stored and running firmware, the GPUDirect paths
and the GPU module, the rails' MTU against each other, the mlx5 driver kind. Pure, like diff.py, which
calls ``rows`` before it judges the findings (so a regression here folds the finding it explains).

Regressions: GPUDirect RDMA lost on a GPU node (NCCL falls back to host memory: all-reduce at a tenth
of its bandwidth), and a rail whose MTU no longer matches the other rails. Changes: firmware running /
stored, the peer-memory paths and versions, the nvidia module, the driver kind (DOCA / OFED / inbox).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from agent.analysis.checks.readiness import common_mtu, dma_buf, gpudirect_paths, is_inbox
from agent.model import GpuState, Snapshot

__all__ = ["CHANGES", "REGRESSIONS", "rows"]

#: regression code -> the doctor finding codes it explains
REGRESSIONS: dict[str, tuple[str, ...]] = {
    "GpuDirectLost": ("GpuDirectNotReady",),
    "MtuMismatched": ("MtuMismatch",),
}
CHANGES: tuple[str, ...] = ("FirmwareRunningChanged", "FirmwareStoredChanged", "GpuDirectPathsChanged",
                            "GpuModuleChanged", "DriverKindChanged")


class _Out(Protocol):
    def reg(self, code: str, subject: str, before: Any, after: Any, message: str,
            key: tuple[tuple[str, Any], ...] = ()) -> None: ...

    def chg(self, code: str, subject: str, before: Any, after: Any, message: str,
            key: tuple[tuple[str, Any], ...] = ()) -> None: ...


class _Side(Protocol):
    snapshot: Snapshot


def _ready(state: GpuState | None, kernel: str | None) -> bool | None:
    """GPUDirect on a GPU node: True / False, None when the node has no GPUs or was not read."""
    if state is None or not state.gpus:
        return None
    if gpudirect_paths(state):
        return True
    d = dma_buf(state, kernel)
    return None if d is None else d


def _driver_kind(snap: Snapshot) -> str | None:
    v = snap.versions
    if v.kernel is None and v.mlx5_version is None:
        return None
    return "inbox" if is_inbox(v.mlx5_version, v.kernel) else "doca/ofed"


def _firmware(out: _Out, a: Snapshot, b: Snapshot) -> None:
    fa = {f.handle: f for f in a.firmware}
    fb = {f.handle: f for f in b.firmware}
    for h in sorted(set(fa) & set(fb)):
        key = (("pf", h),)
        for code, what, before, after in (
                ("FirmwareRunningChanged", "running", fa[h].version, fb[h].version),
                ("FirmwareStoredChanged", "stored", fa[h].stored_version, fb[h].stored_version)):
            if before and after and before != after:
                out.chg(code, h, before, after, f"{h}: firmware {what} {before} -> {after}", key)


def _gpudirect(out: _Out, a: Snapshot, b: Snapshot) -> None:
    ga, gb = a.gpus, b.gpus
    ra, rb = _ready(ga, a.versions.kernel), _ready(gb, b.versions.kernel)
    if ra is True and rb is False and gb is not None and ga is not None:
        out.reg("GpuDirectLost", "node", list(gpudirect_paths(ga)) or "dma-buf", None,
                f"GPUDirect RDMA lost: {', '.join(gpudirect_paths(ga)) or 'DMA-BUF'} before, no peer-memory "
                f"module and no DMA-BUF now (nvidia taint {gb.nvidia_taint or '?'}): NCCL falls back to host memory")
    if ga is not None and gb is not None:
        pa, pb = dict(ga.peer_memory), dict(gb.peer_memory)
        if pa != pb and (pa or pb):
            out.chg("GpuDirectPathsChanged", "node", pa or None, pb or None,
                    f"peer-memory paths {_paths(pa)} -> {_paths(pb)}")
        ma = (ga.nvidia_version, ga.nvidia_taint) if ga.nvidia_loaded else None
        mb = (gb.nvidia_version, gb.nvidia_taint) if gb.nvidia_loaded else None
        if ma != mb and (ma or mb):
            out.chg("GpuModuleChanged", "node", _module(ma), _module(mb),
                    f"nvidia module {_module(ma)} -> {_module(mb)}")


def _paths(p: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(p.items())) or "none"


def _module(m: tuple[str | None, str | None] | None) -> str:
    return "not loaded" if m is None else f"{m[0] or '?'} (taint {m[1] or '?'})"


def _mtus(side: _Side) -> dict[str, int]:
    topo = getattr(side, "topology", None)
    rails = topo.rails if topo is not None else ()
    return {r.expected_netdev: r.netdev.mtu for r in rails if r.netdev is not None and r.netdev.mtu is not None}


def _mtu(out: _Out, a: _Side, b: _Side) -> None:
    ma, mb = _mtus(a), _mtus(b)
    ca, cb = common_mtu(ma.values()), common_mtu(mb.values())
    for subj in sorted(set(ma) & set(mb)):
        if ma[subj] == ca and mb[subj] != cb:
            out.reg("MtuMismatched", subj, ma[subj], mb[subj],
                    f"{subj}: MTU {mb[subj]} no longer matches the other rails' {cb} (was {ma[subj]})",
                    (("mtu_of_rails", cb),))


def rows(out: _Out, before: _Side, after: _Side, _pairs: Iterable[Any] = ()) -> None:
    a, b = before.snapshot, after.snapshot
    _firmware(out, a, b)
    _gpudirect(out, a, b)
    _mtu(out, before, after)
    ka, kb = _driver_kind(a), _driver_kind(b)
    if ka and kb and ka != kb:
        out.chg("DriverKindChanged", "node", ka, kb, f"mlx5 driver {ka} -> {kb}")
