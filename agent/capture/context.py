"""What a capture's plug-ins are expanded against: the rails, PFs and devlink handles the replay
readers found, and what the caller (the CLI or the daemon) brings (events, flight recorder)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import Snapshot

__all__ = ["CaptureContext", "fill_from_snapshot", "rails_of"]


@dataclass
class CaptureContext:
    host: Host
    cfg: ReadConfig = field(default_factory=ReadConfig)
    snapshot: Snapshot | None = None
    #: rail netdev -> the PCI function it is on ("" when none)
    rail_pf: dict[str, str] = field(default_factory=dict)
    #: devlink handle of each rail PF -> its PCI function
    handle_pf: dict[str, str] = field(default_factory=dict)
    #: each rail's RDMA port (``mlx5_0/1``) -> the PCI function of its rail ("" when none)
    rdma_pf: dict[str, str] = field(default_factory=dict)
    #: (handle, reporter) of the rail PFs' health reporters
    reporters: tuple[tuple[str, str], ...] = ()
    #: the running agent's events (``events.json`` document) and flight recorder, when in the daemon
    events: list[dict[str, Any]] | None = None
    recorder_jsonl: Callable[[], bytes] | None = None
    #: without a running agent: seconds between the two offline counter samples
    recorder_gap_s: float = 10.0
    #: the capture's deadline (monotonic); a Generated step waits no longer than this
    deadline: float = float("inf")
    sleep: Callable[[float], None] = time.sleep
    pod_netns: bool = False

    @property
    def netns(self) -> tuple[str, ...]:
        """Named network namespaces (``ip netns``: CNI pod sandboxes), when ``--pod-netns`` asks."""
        if not self.pod_netns:
            return ()
        names: set[str] = set()
        for base in ("/var/run/netns", "/run/netns"):
            names.update(n for n in self.host.listdir(base) or () if not n.startswith("."))
        return tuple(sorted(names))[:512]

    @property
    def rails(self) -> tuple[str, ...]:
        return tuple(sorted(self.rail_pf))

    @property
    def pfs(self) -> tuple[str, ...]:
        return tuple(sorted({pf for pf in self.rail_pf.values() if pf}))

    @property
    def handles(self) -> tuple[str, ...]:
        return tuple(sorted(self.handle_pf))

    @property
    def rdma_ports(self) -> tuple[str, ...]:
        return tuple(sorted(self.rdma_pf))


def rails_of(snap: Snapshot) -> dict[str, str]:
    """Rail netdev -> its PCI function: the netdevs the readers read ethtool on (rails and uplinks)."""
    names = {st.netdev for st in snap.ethtool} | {d.netdev for d in snap.drivers}
    out = {}
    for name in names:
        link = snap.link(name)
        pf = ""
        if link is not None and link.parent_bus == "pci" and link.parent_dev:
            pf = link.parent_dev
        out[name] = pf
    return out


def fill_from_snapshot(ctx: CaptureContext, snap: Snapshot) -> None:
    ctx.snapshot = snap
    ctx.rail_pf = rails_of(snap)
    known = {d.handle for d in snap.devlink_devs}
    # A rail PF's devlink handle is ``<parent bus>/<parent device>`` of its netdev when devlink lists
    # it, as the readers take it (``pci/<bdf>`` on mlx5; another bus, netdevsim's, in the kernel lab).
    # A handle on no PCI function is its own firmware-gate key, as ``function_of`` makes it.
    ctx.handle_pf = {}
    for name, pf in ctx.rail_pf.items():
        link = snap.link(name)
        if link is None or not link.parent_bus or not link.parent_dev:
            continue
        handle = f"{link.parent_bus}/{link.parent_dev}"
        if handle in known:
            ctx.handle_pf[handle] = pf or handle
    # The rails' own RDMA ports: in switchdev a PF's RDMA device has one port per representor as well.
    ctx.rdma_pf = {f"{rl.dev}/{rl.port}": ctx.rail_pf[rl.netdev] for rl in snap.rdma_links
                   if rl.netdev in ctx.rail_pf}
    # The rail PFs' own health reporters, as the readers parsed them (a port's are listed apart).
    ctx.reporters = tuple(sorted({(r.handle, r.name) for r in snap.health if r.handle in ctx.handle_pf}))
