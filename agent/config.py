"""Every setting, parsed once into frozen dataclasses, with its validation (docs/design.md §11 "Configuration").

``Expectations`` (what the checks judge against), ``ReadConfig`` (what the readers read),
``Thresholds`` (the detectors' windows) and ``AgentSettings`` (the daemon). Expectations come from
flags, never from a silent default: a cluster may legitimately run legacy SR-IOV, shared RDMA, or no
multiport eswitch, so ``None`` means "no expectation, judge nothing". The CLI maps flags (and
``RAILSCOPE_*`` variables) onto these fields one to one.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agent.naming import (
    DEFAULT_NET_TEMPLATES,
    DEFAULT_RDMA_TEMPLATES,
    RAIL_MAP_MAX,
    RailMapError,
    rail_map_from_pairs,
)

__all__ = [
    "DEFAULT_PORT",
    "EXPECTATION_FLAGS",
    "RESERVED_PORTS",
    "AgentSettings",
    "Expectations",
    "Judged",
    "ReadConfig",
    "SettingsError",
    "Thresholds",
    "cabling_of_node",
    "check_intervals",
    "check_listen",
    "check_port",
    "expectations_from_json",
    "expectations_to_json",
    "judge_image",
    "node_named",
]


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
    #: LinkDegrading, warning: the pre-FEC corrected-bit ratio above which a rail is degrading while FEC still
    #: hides it (``--ber-warning``). 1e-5 is 24x below the FEC's limit: the least strict link-degrade threshold
    #: Junos accepts on a 400GbE (PAM4, RS(544,514)) port ("link-degrade-monitor thresholds", Junos CLI
    #: Reference: "The permissible range of BER is between 1E-5 to 1E-10"); a warning at the limit itself
    #: fires when the link is about to lose frames.
    ber_warning: float = 1e-5
    #: LinkDegrading, critical: the ratio at / above which FEC is at its limit (``--ber-critical``). 2.4e-4 is
    #: the BER IEEE 802.3 (802.3bs / 802.3cd, 50G-per-lane PAM4 PMDs) specifies at the input of the
    #: RS(544,514) "KP4" FEC: a link above it is out of its specification and loses frames.
    ber_critical: float = 2.4e-4
    #: ... measured over this window (``--ber-window``): the daemon's two samples, the recorder's span.
    ber_window_s: float = 300.0
    #: MtuMismatch: the MTU every rail must have (``--expect-mtu``); None: the rails' most common MTU.
    mtu: int | None = None
    #: DriverNotDoca: "doca" when the rail PFs must run the DOCA / OFED mlx5 driver (``--expect-driver``).
    driver: str | None = None
    #: RailRdmaMissing: True when every rail must have an RDMA device (``--expect-rdma``), even where no
    #: udev rule names one and its PF is not mlx5 with RoCE enabled; None: no expectation.
    rdma: bool | None = None
    #: RailPeerMismatch: the cabling map (``--cabling FILE``, CSV ``node,rail,leaf,port``) as rows of text;
    #: None: no map, nothing judged. The rows, not the file's name, are the expectation: a bundle records
    #: them and a replay judges with them
    cabling: tuple[tuple[str, str, str, str], ...] | None = None
    #: ``--rail-map``: the rails by PCI function, (rail, ``0000:0c:00.0``) pairs, for a node whose netdevs
    #: keep names no template matches (``enp12s0f0np0``); None: rails from the udev rules or the names.
    #: The pairs are the expectation: a bundle records them and a replay finds the same rails
    rail_map: tuple[tuple[int, str], ...] | None = None


#: Expectations field -> the flag that states it. A bundle's manifest records the expectations in force
#: under the flag's words (``--expect-eswitch-mode`` -> ``expect_eswitch_mode``; docs/design.md §2), so a replay
#: judges as the node did and says which flag it would take to judge otherwise.
EXPECTATION_FLAGS: dict[str, str] = {
    "lossless_prio": "--lossless-prio",
    "eswitch_mode": "--expect-eswitch-mode",
    "esw_multiport": "--expect-esw-multiport",
    "rdma_netns": "--expect-rdma-netns",
    "rails": "--rails",
    "net_templates": "--net-template",
    "rdma_templates": "--rdma-template",
    "event_window_s": "--event-window",
    "flap_count": "--flap-count",
    "flap_window_s": "--flap-window",
    "storm_ratio": "--storm-ratio",
    "kernel_table_file": "--kernel-table",
    "ber_warning": "--ber-warning",
    "ber_critical": "--ber-critical",
    "ber_window_s": "--ber-window",
    "mtu": "--expect-mtu",
    "driver": "--expect-driver",
    "rdma": "--expect-rdma",
    "cabling": "--cabling",
    "rail_map": "--rail-map",
}


_DEFAULT = Expectations()


def _key(field_name: str) -> str:
    return EXPECTATION_FLAGS[field_name].lstrip("-").replace("-", "_")


def expectations_to_json(exp: Expectations) -> dict[str, Any]:
    """The manifest's ``expectations``: every judging value in force, keyed by its flag's words."""
    out: dict[str, Any] = {}
    for name in EXPECTATION_FLAGS:
        value = getattr(exp, name)
        out[_key(name)] = list(value) if isinstance(value, tuple) else value
    return out


def _template_list(v: Any) -> tuple[str, ...] | None:
    from agent.naming import validate_template

    if isinstance(v, list) and 0 < len(v) <= 16 and all(isinstance(t, str) and not validate_template(t) for t in v):
        return tuple(v)
    return None


def _number(v: Any, low: float, high: float, whole: bool = False) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= high:
        return None
    if whole:
        return int(v) if float(v).is_integer() else None
    return float(v)


#: a cabling map holds at most this many rows, each field at most this many characters
CABLING_ROWS = 100_000
CABLING_FIELD = 128


def _cabling(v: Any) -> tuple[tuple[str, str, str, str], ...] | None:
    # as --cabling reads its file: rows of four non-empty strings
    if not isinstance(v, list) or len(v) > CABLING_ROWS:
        return None
    rows = []
    for row in v:
        if (not isinstance(row, list) or len(row) != 4
                or not all(isinstance(x, str) and 0 < len(x) <= CABLING_FIELD for x in row)):
            return None
        rows.append((row[0], row[1], row[2], row[3]))
    return tuple(rows)


def _rail_map(v: Any) -> tuple[tuple[int, str], ...] | None:
    # as --rail-map reads it: [rail, PCI function] pairs, every rail and function once
    if not isinstance(v, list) or len(v) > RAIL_MAP_MAX:
        return None
    pairs = []
    for row in v:
        if (not isinstance(row, list) or len(row) != 2 or isinstance(row[0], bool) or not isinstance(row[0], int)
                or not isinstance(row[1], str)):
            return None
        pairs.append(("", str(row[0]), row[1]))
    try:
        return rail_map_from_pairs(pairs)
    except RailMapError:
        return None


def node_named(row_node: str, names: Iterable[str | None]) -> bool:
    """A cabling map row's node names this node: its name or short name (``gpu-node-017`` and
    ``gpu-node-017.dc1.example``), either side, case aside."""
    want = {n.strip().lower() for n in names if n and n.strip()}
    want |= {n.split(".")[0] for n in want}
    low = row_node.strip().lower()
    return low in want or low.split(".")[0] in want


def cabling_of_node(exp: dict[str, Any], names: Iterable[str | None]) -> dict[str, Any]:
    """``expectations_to_json``'s document with only this node's rows of the cabling map: a bundle is one
    node's, and a site map of every node (100,000 rows) would weigh every bundle and tell each node's
    collector reader the whole fabric. ``names``: the node's names (the capture's node, the hostname)."""
    rows = exp.get("cabling")
    if not isinstance(rows, list | tuple):
        return exp
    names = list(names)
    mine = [list(r) for r in rows if isinstance(r, list | tuple) and r and isinstance(r[0], str)
            and node_named(r[0], names)]
    return {**exp, "cabling": mine or None}


def _ratio(v: Any) -> float | None:
    # as --ber-warning / --ber-critical take it: a ratio strictly between 0 and 1
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
        return None
    return float(v)


#: Expectations field -> its validator: the value, or None when it is not valid. A bundle is untrusted
#: input: each value is checked as its flag would check it. The manifest key is the flag's words.
_VALID: dict[str, Any] = {
    "lossless_prio": lambda v: _number(v, 0, 7, whole=True),
    "eswitch_mode": lambda v: v if v in ("switchdev", "legacy") else None,
    "esw_multiport": lambda v: v if isinstance(v, bool) else None,
    "rdma_netns": lambda v: v if v in ("shared", "exclusive") else None,
    "rails": lambda v: _number(v, 0, 1024, whole=True),
    "net_templates": _template_list,
    "rdma_templates": _template_list,
    "event_window_s": lambda v: _number(v, 1e-3, 30 * 86400),
    "flap_count": lambda v: _number(v, 1, 1e6, whole=True),
    "flap_window_s": lambda v: _number(v, 1e-3, 30 * 86400),
    "storm_ratio": lambda v: _number(v, 1e-9, 1),
    # a file on the node, not in the bundle: recorded for people, never opened by a replay
    "kernel_table_file": lambda v: v if isinstance(v, str) and 0 < len(v) <= 4096 else None,
    "ber_warning": _ratio,
    "ber_critical": _ratio,
    "ber_window_s": lambda v: _number(v, 1e-3, 30 * 86400),
    # as --expect-mtu takes it: ETH_MIN_MTU (68) .. the largest netdev MTU, whole bytes
    "mtu": lambda v: _number(v, 68, 65535, whole=True),
    "driver": lambda v: v if v == "doca" else None,
    "rdma": lambda v: True if v is True else None,
    "cabling": _cabling,
    "rail_map": _rail_map,
}
#: manifest key -> (Expectations field, validator)
_PARSERS: dict[str, tuple[str, Any]] = {_key(name): (name, _VALID[name]) for name in EXPECTATION_FLAGS}


def expectations_from_json(doc: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Expectations fields a manifest's ``expectations`` gives, and one problem line per value that
    is refused. A ``null`` is a recorded "no expectation" and is kept; an unknown key is ignored (a
    newer agent's); ``kernel_table`` names a file on the node and is not applied."""
    if doc is None:
        return {}, ()
    if not isinstance(doc, dict):
        return {}, ("manifest.json: expectations: not a JSON object, ignored",)
    got: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in doc.items():
        if key not in _PARSERS:
            continue
        name, parse = _PARSERS[key]
        if value is None:
            if getattr(_DEFAULT, name) is not None:
                continue  # these always have a value; null is not a statement
            got[name] = None
            continue
        parsed = parse(value)
        if parsed is None:
            text = json.dumps(value)[:40]
            problems.append(f"manifest.json: expectations: {key}: {text} is not a valid value, ignored")
            continue
        got[name] = parsed
    return got, tuple(problems)


@dataclass(frozen=True)
class Judged:
    """The expectations a node image was judged with, and where each came from (docs/design.md §2): the
    command line (a flag or its ``RAILSCOPE_*`` variable) over the bundle's manifest over the
    defaults."""

    expectations: Expectations
    #: Expectations field -> "bundle" | the flag | the variable | "default"
    origin: dict[str, str] = field(default_factory=dict)
    #: what the bundle recorded (Expectations fields), overridden or not
    recorded: dict[str, Any] = field(default_factory=dict)
    #: the recorded values refused as invalid, one line each
    problems: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """``{"rails": {"value": 2, "from": "bundle"}, ...}``, keyed by the flag's words; ``bundle``
        names the recorded value a flag overrode."""
        out: dict[str, Any] = {}
        for name, flag in EXPECTATION_FLAGS.items():
            if name not in self.origin:
                continue
            value = getattr(self.expectations, name)
            entry: dict[str, Any] = {"value": list(value) if isinstance(value, tuple) else value,
                                     "from": self.origin[name]}
            if self.origin[name] != "bundle" and name in self.recorded:
                rec = self.recorded[name]
                entry["bundle"] = list(rec) if isinstance(rec, tuple) else rec
            out[flag.lstrip("-").replace("-", "_")] = entry
        return out

    def from_bundle(self, base: Expectations) -> bool:
        """Whether a recorded value judged the image where ``base`` (the command line's alone) would
        have judged otherwise: only then is the judgement not the one the command line implies."""
        return any(o == "bundle" and getattr(self.expectations, n) != getattr(base, n) for n, o in self.origin.items())

    def words(self) -> str:
        """One line for people: the values that are not a flag's default, with where each came from,
        e.g. ``rails=2 (bundle), expect_eswitch_mode=switchdev (--expect-eswitch-mode)``."""
        default = Expectations()
        parts = []
        for key, entry in self.as_json().items():
            name = next(n for n, f in EXPECTATION_FLAGS.items() if f.lstrip("-").replace("-", "_") == key)
            shown = entry["value"]
            if entry["from"] == "default" or (entry["from"] == "bundle"
                                              and getattr(default, name) == getattr(self.expectations, name)):
                continue
            if name == "rail_map" and isinstance(shown, list):
                shown = ",".join(f"{rail}={pci}" for rail, pci in shown)
            elif isinstance(shown, list):
                # the cabling map's rows are lists themselves: say how many, not what
                shown = ",".join(shown) if all(isinstance(x, str) for x in shown) else f"{len(shown)} rows"
            extra = f"; the bundle had {entry['bundle']}" if "bundle" in entry and entry["bundle"] != entry["value"] else ""
            parts.append(f"{key}={'none' if shown is None else shown} ({entry['from']}{extra})")
        if not self.recorded and not parts:
            return "the command line's (the image records no expectations)"
        return ", ".join(parts) or "the defaults (the bundle records no expectation beyond them)"


def judge_image(exp: Expectations, given: dict[str, str], manifest_extra: Any) -> Judged:
    """The expectations to judge an image with: ``exp`` (the command line's) for every field in
    ``given``, the bundle's recorded value (``manifest.json`` ``expectations``) for the others."""
    recorded, problems = expectations_from_json(manifest_extra)
    origin: dict[str, str] = {}
    use: dict[str, Any] = {}
    for name in EXPECTATION_FLAGS:
        if name in given:
            origin[name] = given[name]
        elif name in recorded and name != "kernel_table_file":  # a file on the node, not in the bundle
            use[name] = recorded[name]
            origin[name] = "bundle"
        elif name in ("flap_count", "flap_window_s", "storm_ratio"):
            continue  # not flags of the reading commands: only a bundle states them
        else:
            origin[name] = "default"
    return Judged(replace(exp, **use), origin, recorded, problems)


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """What the readers read and how long they may take."""

    #: devlink params read per PF handle, one command per param (a dump can mix devices up).
    #: ``enable_roce`` says whether a rail PF must have an RDMA device (RailRdmaMissing)
    devlink_params: tuple[str, ...] = ("esw_multiport", "flow_steering_mode", "enable_roce")
    command_timeout_s: float = 10.0
    #: Read ethtool -S on representors too (a firmware read each on mlx5: off by default).
    representor_ethtool: bool = False
    net_templates: tuple[str, ...] = DEFAULT_NET_TEMPLATES
    rdma_templates: tuple[str, ...] = DEFAULT_RDMA_TEMPLATES
    #: ``--exclude-devices``: a regular expression of PCI addresses / netdev names that firmware-touching
    #: reads (ethtool statistics, module EEPROM, pause and FEC, dcb, RDMA port statistics, devlink per instance)
    #: never reach, beyond the rule that only rail PFs and the PFs the udev rules name are ever asked
    #: (``agent/readers/scope.py``)
    exclude_devices: str | None = None
    #: ``--lldp``: how the rails' LLDP neighbours are read: "lldpd" (``lldpcli``), "listen" (the agent's
    #: passive listener), "off"; None: lldpd when lldpcli answers, else none
    lldp: str | None = None
    #: ``--rail-map`` (Expectations.rail_map): the functions it names are rails, read as the udev rules'
    rail_map: tuple[tuple[int, str], ...] | None = None
    #: ``doctor --lldp-wait``: a one-shot read of the listener listens up to this many seconds, ending as soon
    #: as every rail has heard its neighbour (a process that reads once hears nothing otherwise); 0: what the
    #: listener heard so far (the agent's, whose listener runs between samples)
    lldp_wait_s: float = 0.0
    #: called while the one-shot read listens: (rails heard, rails, seconds left); the doctor's terminal line
    lldp_progress: Callable[[int, int, float], None] | None = None


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
    #: the CA that issued the collector's TLS certificate (None: the system's CAs)
    collector_ca_file: str | None = None
    upload_interval_s: float = 30.0
    #: the agent's own bounds on capture requests: least time between two, captures per hour, and
    #: whether a request may enter pod network namespaces (tenant data; CAP_SYS_ADMIN)
    request_min_interval_s: float = 300.0
    request_budget: int = 6
    allow_pod_netns: bool = False
    #: the data endpoints (/v1/image, /v1/events, /v1/recorder): on this Unix socket, and over TCP
    #: only with the bearer token in this file
    data_socket: str | None = None
    data_token_file: str | None = None
    #: the agent's own HTTP server, bounded as the collector's (proto/connections.py): a connection
    #: whose request headers are not complete by then is closed (also the idle time between two
    #: requests), and connections one peer address may hold open (0: no cap)
    header_timeout_s: float = 10.0
    max_conns_per_peer: int = 32
    #: the agent's own budget (``--budget-cpu`` cores, ``--budget-rss`` bytes; None: no guard) and how
    #: often the guard looks (``agent.service.budget``)
    budget_cpu: float | None = None
    budget_rss: int | None = None
    budget_interval_s: float = 10.0
    #: RailResourcesLost: the extended resources of the Node object watched for a drop to 0 allocatable
    #: (``--rail-resources``, shell patterns on the resource name)
    rail_resources: tuple[str, ...] = ("nvidia.com/*", "rdma/*", "openshift.io/*")

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
