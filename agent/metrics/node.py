"""Node-wide facts: the kernel, the mlx5 driver, the RDMA netns mode."""

from __future__ import annotations

from agent.metrics.families import Families, Scrape, Subject, label

__all__ = ["SUBJECT", "render"]


def render(fams: Families, scrape: Scrape) -> None:
    snap = scrape.state.snapshot
    if snap is None:
        return
    v = snap.versions
    if v.kernel:
        fams.info("railscope_kernel", "The running kernel (/proc/sys/kernel/osrelease).",
                  ("release",), (v.kernel,), {})
    if v.mlx5_version or v.mlx5_srcversion:
        # srcversion changes on every driver swap, including the DOCA driver container putting
        # the inbox driver back when its pod ends; the version string alone may not.
        fams.info("railscope_driver", "The loaded mlx5_core module (/sys/module/mlx5_core).",
                  ("driver", "version", "srcversion"),
                  ("mlx5_core", label(v.mlx5_version), label(v.mlx5_srcversion)), {})
    mode = snap.rdma_netns or {"Y": "shared", "N": "exclusive"}.get((v.netns_mode or "").strip().upper())
    if mode:
        fams.info("railscope_rdma_netns", "The RDMA subsystem's network namespace mode (shared or exclusive).",
                  ("mode",), (mode,), {})


SUBJECT = Subject(20, render)
