"""The agent's configuration, parsed once into one frozen dataclass (STYLE: "Configuration").

``agent/commands/serve.py`` maps flags (and ``RAILSCOPE_*`` variables) onto these fields one to one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from agent.config import Expectations, ReadConfig

__all__ = ["DEFAULT_PORT", "RESERVED_PORTS", "AgentSettings", "SettingsError", "check_listen", "check_port"]

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
    #: links (bulk dump without statistics), rail statistics, PCI / SR-IOV, versions
    links_interval_s: float = 15.0
    #: devlink dev / eswitch / params / ports (a busy devlink during VF creation must not stall anything)
    devlink_interval_s: float = 60.0
    #: rdma link / system and the rails' uplink-port counters
    rdma_interval_s: float = 60.0
    #: udev naming rules, OVS interfaces
    config_interval_s: float = 60.0
    #: rail counters (ethtool stats one netdev at a time, carrier losses, RDMA loss counters):
    #: the flight recorder's resolution
    counters_interval_s: float = 1.0
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
    #: the collector to pull capture requests from and upload to (agent/service/pull.py); None: off
    collector_url: str | None = None
    collector_token_file: str | None = None
