"""Every setting, parsed once into frozen dataclasses, with its validation (STYLE: "Configuration").

``Expectations`` (what the checks judge against), ``ReadConfig`` (what the readers read),
``Thresholds`` (the detectors' windows) and ``AgentSettings`` (the daemon). Expectations come from
flags, never from a silent default: a cluster may legitimately run legacy SR-IOV, shared RDMA, or no
multiport eswitch, so ``None`` means "no expectation, judge nothing". The CLI maps flags (and
``RAILSCOPE_*`` variables) onto these fields one to one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agent.naming import DEFAULT_NET_TEMPLATES, DEFAULT_RDMA_TEMPLATES

__all__ = ["DEFAULT_PORT", "RESERVED_PORTS", "AgentSettings", "Expectations", "ReadConfig", "SettingsError",
           "Thresholds", "check_intervals", "check_listen", "check_port"]


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
    #: LinkDegrading: the pre-FEC corrected-bit ratio above which a rail is degrading (``--ber-warning``).
    #: 2.4e-4 is the BER that IEEE 802.3 (802.3bs / 802.3cd, 50G-per-lane PAM4 PMDs) specifies at the input
    #: of the RS(544,514) "KP4" FEC: a link above it is out of its specification.
    ber_warning: float = 2.4e-4
    #: ... measured over this window (``--ber-window``): the daemon's two samples, the recorder's span.
    ber_window_s: float = 300.0


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
    #: ``--exclude-devices``: a regular expression of PCI addresses / netdev names that firmware-touching
    #: reads (ethtool statistics and module EEPROM, devlink per instance) never reach, beyond the rule that
    #: only rail PFs and the PFs the udev rules name are ever asked (``agent/readers/scope.py``)
    exclude_devices: str | None = None


_INT_FIELDS = ("flap_count", "config_flap_changes", "lossless_prio")


@dataclass(frozen=True, slots=True)
class Thresholds:
    #: LinkFlapping: this many carrier losses of one rail or uplink ...
    flap_count: int = 3
    #: ... within this many seconds. A flapping link re-arms after a whole window without a
    #: qualifying loss, so one episode gives one event.
    flap_window_s: float = 300.0
    #: ConfigFlapping: this many changes of one value, at least one back to a value it had,
    #: within this many seconds (A -> B -> A is two changes).
    config_flap_changes: int = 2
    config_flap_window_s: float = 600.0
    #: RepresentorStale: a representor for a VF index >= sriov_numvfs older than this.
    representor_grace_s: float = 60.0
    #: The RoCE lossless priority whose pause and discard counters are judged.
    lossless_prio: int = 3
    #: PfcStorm: transmitted pause duration on the lossless prio over wall time ...
    storm_ratio: float = 0.5
    #: ... measured over this many seconds (or between two samples while fewer exist).
    storm_window_s: float = 60.0
    #: PfcStorm / LosslessDrops re-arm after this many seconds without the condition.
    storm_quiet_s: float = 60.0
    drops_quiet_s: float = 60.0
    #: DriverReload: carrier losses and config changes this long after a reload (and since the
    #: sample before it) are the reload's, not flaps.
    reload_grace_s: float = 30.0

    @classmethod
    def from_expectations(cls, exp: Expectations, overrides: Iterable[tuple[str, Any]] = ()) -> Thresholds:
        """The thresholds the doctor also judges by (``--flap-count``, ``--lossless-prio`` ...), then
        ``overrides`` as (field name, value) pairs; an unknown name is a ValueError naming it."""
        base = cls(flap_count=exp.flap_count, flap_window_s=exp.flap_window_s, storm_ratio=exp.storm_ratio,
                   lossless_prio=exp.lossless_prio)
        known = {f.name for f in fields(cls)}
        changes = dict(overrides)
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown detector threshold(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return replace(base, **changes)

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():
                # flags and settings may carry every threshold as a float; counts are whole numbers
                object.__setattr__(self, name, int(value))
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if self.flap_count < 1:
            raise ValueError(f"flap_count must be at least 1, got {self.flap_count}")
        if self.config_flap_changes < 2:
            raise ValueError(f"config_flap_changes must be at least 2 (A -> B -> A), got {self.config_flap_changes}")
        if not 0 <= self.lossless_prio <= 7:
            raise ValueError(f"lossless_prio must be 0-7, got {self.lossless_prio}")
        if not 0 < self.storm_ratio <= 1:
            raise ValueError(f"storm_ratio must be in (0, 1], got {self.storm_ratio}")
        for name in ("flap_window_s", "config_flap_window_s", "storm_window_s", "storm_quiet_s",
                     "drops_quiet_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("representor_grace_s", "reload_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


#: Ports of the exporters that already run on a GPU node: node_exporter (9100), DCGM / DTS (9189),
#: sriov-network-metrics-exporter (9808), rdma_exporter (9879).
RESERVED_PORTS: dict[int, str] = {
    9100: "node_exporter",
    9189: "DTS",
    9808: "sriov-network-metrics-exporter",
    9879: "rdma_exporter",
}

#: Clear of RESERVED_PORTS and of the other exporters that a GPU node runs (dcgm-exporter 9400).
DEFAULT_PORT = 9841


class SettingsError(ValueError):
    """A setting that cannot work; the message is one line for the operator."""


def check_listen(addr: str, allow_any: bool) -> str:
    """The address to bind: a literal IP; the wildcard only when explicitly allowed.

    A DaemonSet pod runs in the host network, where NetworkPolicy does not apply: binding to every
    address would expose the node's NIC facts on every interface, hence the explicit gate.
    """
    text = addr.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise SettingsError(f"--listen {addr!r}: not an IP address (give the node's IP, e.g. from the "
                            "downward API status.hostIP)") from None
    if ip.is_unspecified and not allow_any:
        raise SettingsError(f"--listen {addr}: refusing to bind to all addresses without --listen-any")
    return str(ip)


def check_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise SettingsError(f"--port {port}: not a TCP port")
    if port in RESERVED_PORTS:
        raise SettingsError(f"--port {port}: taken by {RESERVED_PORTS[port]} on GPU nodes; pick another "
                            f"(default {DEFAULT_PORT})")
    return port


@dataclass(frozen=True, slots=True)
class AgentSettings:
    listen: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    host_root: str = "/"
    #: source name -> seconds between reads (``--<source>-interval``); a source not named here reads at
    #: its registry default (``agent/readers/sources.py``)
    intervals: tuple[tuple[str, float], ...] = ()
    #: sources never read (``--disable-source``): their series and findings are absent, and
    #: ``unavailable`` says so
    disabled: frozenset[str] = frozenset()
    #: a source still running after this long is reported hung (and never started twice)
    source_deadline_s: float = 20.0
    command_timeout_s: float = 10.0
    #: flight recorder: how far back it keeps 1 s samples; 0 disables it
    recorder_window_s: float = 900.0
    #: bounded event history (events.json)
    event_history: int = 1000
    #: bounded queue between the netlink watcher thread and the event loop (coalesced per link)
    event_queue: int = 4096
    #: node / cluster names written into the images the agent records
    node: str | None = None
    cluster: str | None = None
    #: regular expression of representor netdevs that get their own series (off by default)
    representor_include: str | None = None
    expectations: Expectations = field(default_factory=Expectations)
    read: ReadConfig = field(default_factory=ReadConfig)
    #: mapped onto the detectors' ``Thresholds`` (only fields that are set override the defaults)
    thresholds: tuple[tuple[str, float], ...] = ()
    #: run the netlink link watcher (off only in tests that drive observations by hand)
    watch_links: bool = True
    #: the byte cap of one node image served by /v1/image
    image_max_bytes: int = 256 << 20
    #: detector event codes that capture a bundle into the spool (``--capture-on``), and the
    #: least time between two such captures per code and node
    capture_on: frozenset[str] = frozenset()
    capture_cooldown_s: float = 600.0
    #: overall deadline of one capture: what finished by then is packed (a partial bundle)
    capture_deadline_s: float = 300.0
    #: the node spool (``--spool``, None: event captures are off) and its size cap
    spool_dir: str | None = None
    spool_max_bytes: int = 1 << 30
    #: the collector the spool is emptied into (``--collector``; None: bundles stay in the spool) and
    #: that capture requests are pulled from (agent/service/pull.py), the agent's token for it, and how
    #: often the spool is tried
    collector_url: str | None = None
    collector_token_file: str | None = None
    upload_interval_s: float = 30.0
    #: the data endpoints (/v1/image, /v1/events, /v1/recorder): on this Unix socket, and over TCP
    #: only with the bearer token in this file
    data_socket: str | None = None
    data_token_file: str | None = None

    def interval_s(self, source: str, default: float) -> float:
        return dict(self.intervals).get(source, default)


def check_intervals(intervals: Mapping[str, float], minimums: Mapping[str, float]) -> None:
    """Every interval at least its source's minimum, and the counters (the flight recorder's resolution)
    never slower than the links they are the rails of."""
    for name, value in intervals.items():
        low = minimums.get(name, 0.0)
        if value < low:
            why = (": devlink and rdma are slow and busy while the SR-IOV daemon creates VFs"
                   if low >= 60 else "")
            raise SettingsError(f"--{name}-interval must be at least {low:g}s{why}")
    if "counters" in intervals and "links" in intervals and intervals["counters"] > intervals["links"]:
        raise SettingsError("--counters-interval must not be longer than --links-interval")
