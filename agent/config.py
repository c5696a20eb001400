"""Configuration parsed once into frozen dataclasses (STYLE: "Configuration").

Expectations come from flags, never from a silent default: a cluster may legitimately run legacy
SR-IOV, shared RDMA, or no multiport eswitch, so ``None`` means "no expectation, judge nothing".
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.naming import DEFAULT_NET_TEMPLATES, DEFAULT_RDMA_TEMPLATES

__all__ = ["Expectations", "ReadConfig"]


@dataclass(frozen=True, slots=True)
class Expectations:
    #: The RoCE lossless priority whose PFC counters are judged (Spectrum-X default 3).
    lossless_prio: int = 3
    #: "switchdev" | "legacy" | None.
    eswitch_mode: str | None = None
    #: True / False / None.
    esw_multiport: bool | None = None
    #: "shared" | "exclusive" | None.
    rdma_netns: str | None = None
    #: Rails 0..N-1 expected when there are no udev rules (``--rails N``); None: from the rules.
    rails: int | None = None
    net_templates: tuple[str, ...] = DEFAULT_NET_TEMPLATES
    rdma_templates: tuple[str, ...] = DEFAULT_RDMA_TEMPLATES
    #: Events within this many seconds before the capture become findings (``--event-window``).
    event_window_s: float = 900.0
    #: LinkFlapping: this many carrier losses of one rail ...
    flap_count: int = 3
    #: ... within this window.
    flap_window_s: float = 300.0
    #: PfcStorm: transmitted pause duration over wall time on the lossless prio.
    storm_ratio: float = 0.5
    #: Extra rows for the validated-kernel table (a JSON file), on top of the shipped one.
    kernel_table_file: str | None = None


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """What the readers read and how long they may take."""

    #: devlink params read per PF handle, one command per param (a dump can mix devices up).
    devlink_params: tuple[str, ...] = ("esw_multiport", "flow_steering_mode")
    command_timeout_s: float = 10.0
    #: Read ethtool -S on representors too (a firmware read each on mlx5: off by default).
    representor_ethtool: bool = False
    net_templates: tuple[str, ...] = DEFAULT_NET_TEMPLATES
    rdma_templates: tuple[str, ...] = DEFAULT_RDMA_TEMPLATES
