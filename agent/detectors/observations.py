"""What the detectors are fed: plain frozen records, made from netlink events and periodic samples.

The watcher builds them (``agent.detectors.feed`` from a ``Snapshot``; link events from rtnetlink);
the detectors never see pyroute2 objects or files. Links are keyed by PCI function and
``phys_port_name``, never by ifindex: a driver reload recreates every netdev with a new ifindex.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigObs", "CountersObs", "DriverObs", "LinkObs", "Obs", "RepresentorObs"]


@dataclass(frozen=True, slots=True)
class LinkObs:
    """A rail or uplink netdev as one link event or sample saw it (never a representor: those
    follow their pods' VFs up and down)."""

    key: tuple[str, str]  # (PCI function, phys_port_name); "" for a netdev without a port name
    netdev: str
    ifindex: int | None = None
    carrier_down_count: int | None = None  # IFLA_CARRIER_DOWN_COUNT (kernel >= 4.16)
    carrier: int | None = None
    operstate: str | None = None
    #: IFF_UP. A netdev closed on purpose (the driver unloading, ``ip link set down``) loses
    #: carrier too; such a loss is not the cable's. None: unknown, the loss counts.
    admin_up: bool | None = None
    #: The expected rail netdev name (docs/design.md §4 subject rules); the netdev name when unknown.
    subject: str | None = None

    @property
    def name(self) -> str:
        return self.subject or self.netdev


@dataclass(frozen=True, slots=True)
class ConfigObs:
    """One configuration value of a PF: ``sriov_numvfs``, ``eswitch_mode`` or ``param:<name>``."""

    handle: str  # the PF's devlink handle, pci/<bdf>
    name: str
    value: Any  # None: could not be read (busy, not available) — never a change


@dataclass(frozen=True, slots=True)
class CountersObs:
    """The ethtool (and RDMA uplink port) counters of one rail netdev. A missing key means off or
    unsupported, never 0."""

    netdev: str
    counters: Mapping[str, int] = field(hash=False)
    subject: str | None = None  # the expected rail netdev name; the netdev name when unknown

    @property
    def name(self) -> str:
        return self.subject or self.netdev


@dataclass(frozen=True, slots=True)
class RepresentorObs:
    """The VF representors a PF owns, against its ``sriov_numvfs``."""

    handle: str  # pci/<bdf>
    numvfs: int | None  # None: sysfs could not be read, nothing is judged
    vf_indexes: tuple[int, ...] = ()
    #: Netdev names parallel to ``vf_indexes``, for the evidence.
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DriverObs:
    """``/sys/module/mlx5_core/{srcversion,version}``: srcversion changes on every driver swap."""

    srcversion: str | None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class HealthObs:
    """One devlink health reporter of a rail PF (or of one of its ports) in one sample."""

    handle: str  # the PF's devlink handle, the event's subject
    reporter: str
    reporter_handle: str  # the handle it is listed under (a port's, a nested instance's)
    state: str | None
    error: int | None


Obs = LinkObs | ConfigObs | CountersObs | RepresentorObs | DriverObs | HealthObs
