"""Plain frozen records that readers return and checks, detectors and metrics consume.

Nothing above the readers sees pyroute2 objects or raw command text (docs/design.md §3). Every record is
immutable and made of plain values, so a snapshot can be compared, hashed into tests and handed
between threads without copying.

A value that could not be read is ``None`` (not available on that node), never a guessed default;
``Snapshot.unavailable`` says why, per source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, TypeVar

_V = TypeVar("_V")
_C = TypeVar("_C")


def value_of(pairs: Iterable[tuple[str, _V]] | None, name: str) -> _V | None:
    """The value of ``name`` in (name, value) pairs, the records' frozen stand-in for a dict."""
    for k, v in pairs or ():
        if k == name:
            return v
    return None


# --------------------------------------------------------------------------------------------
# netlink / sysfs


@dataclass(frozen=True, slots=True)
class VfInfo:
    vf: int
    mac: str | None = None
    link_state: str | None = None  # auto | enable | disable
    spoofchk: bool | None = None
    trust: bool | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """One netdev, as the rtnetlink dump names it (the ``netlink/links.json`` schema)."""

    ifindex: int
    ifname: str
    operstate: str | None = None  # UP, DOWN, LOWERLAYERDOWN, UNKNOWN, ...
    carrier: int | None = None
    carrier_changes: int | None = None
    carrier_up_count: int | None = None
    carrier_down_count: int | None = None
    mtu: int | None = None
    address: str | None = None
    phys_port_name: str | None = None
    phys_switch_id: str | None = None  # lower-case hex, no separators
    parent_bus: str | None = None
    parent_dev: str | None = None  # PCI BDF for a PCI netdev (a representor's is its PF)
    master: str | int | None = None
    kind: str | None = None  # veth, bridge, ... (None for a physical NIC)
    stats64: tuple[tuple[str, int], ...] | None = None  # rails only (docs/design.md §3)
    vfinfo: tuple[VfInfo, ...] | None = None
    #: /sys/class/net/<if>/speed in Mb/s for rails and uplinks; None when sysfs says -1 (no link) or nothing
    speed_mbps: int | None = None

    @property
    def is_oper_up(self) -> bool:
        return self.operstate in ("UP", "UNKNOWN") and self.carrier == 1

    def stat(self, name: str) -> int | None:
        return value_of(self.stats64, name)


def _fast_init(cls: type[_C]) -> Callable[..., _C]:
    """A constructor of the frozen slots dataclass ``cls``, about 2.5x faster than its ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__`` (its own ``__setattr__``
    refuses): 4.5 us for a ``Link`` built by keywords, and ``doctor`` builds one per netdev of a
    2,050-netdev node. A twin class with the same fields, not frozen, sets them with plain slot
    stores, and its ``__post_init__`` turns the object into a ``cls`` by ``__class__`` assignment,
    which CPython allows between classes of the same slot layout: 1.8 us. The result is a ``cls`` in
    every respect, frozen included. Where the interpreter refuses the assignment, or a field has a
    default factory, this is ``cls`` itself.
    """
    specs: list[Any] = []
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default_factory is not MISSING:
            return cls
        specs.append((f.name, f.type) if f.default is MISSING else (f.name, f.type, field(default=f.default)))

    def __post_init__(self: Any) -> None:
        self.__class__ = cls

    twin = make_dataclass(f"_{cls.__name__}Init", specs, slots=True, eq=False, repr=False, match_args=False,
                          namespace={"__post_init__": __post_init__})
    try:
        # a dataclass checks no types: zeros fill the fields that have no default
        required = [0 for f in fields(cls) if f.default is MISSING]  # type: ignore[arg-type]
        probe = twin(*required)
        if type(probe) is not cls or probe != cls(*required):
            return cls
    except TypeError:
        return cls
    return twin  # type: ignore[return-value]


#: ``Link(...)``, faster (see ``_fast_init``): the link dump's reader builds thousands.
new_link: Callable[..., Link] = _fast_init(Link)


@dataclass(frozen=True, slots=True)
class PciFunction:
    """A PCI function that carries a netdev or SR-IOV (``/sys/bus/pci/devices/<bdf>``)."""

    bdf: str
    sriov_numvfs: int | None = None
    sriov_totalvfs: int | None = None
    physfn: str | None = None  # the PF's BDF when this function is a VF
    virtfns: tuple[str, ...] = ()  # VF BDFs, by VF index order
    driver: str | None = None
    vendor: str | None = None
    device: str | None = None

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None


# --------------------------------------------------------------------------------------------
# devlink


@dataclass(frozen=True, slots=True)
class DevlinkDev:
    handle: str  # pci/0000:0c:00.0 or auxiliary/mlx5_core.eth.0
    nested: tuple[str, ...] = ()  # nested_devlink handles (kernel >= 6.7)


@dataclass(frozen=True, slots=True)
class Eswitch:
    handle: str
    mode: str | None  # legacy | switchdev | None (the device has no eswitch)
    inline_mode: str | None = None
    encap_mode: str | None = None


@dataclass(frozen=True, slots=True)
class DevlinkParam:
    handle: str
    name: str
    #: cmode -> value. Booleans are bool even when old iproute2 printed "true"/"false"; a boolean
    #: param the checks judge (``esw_multiport``) is bool in whatever form it was given (``"true"``,
    #: ``1``, ``"enabled"``), and a value of it no form reads stays as printed.
    values: tuple[tuple[str, Any], ...] = ()

    def value(self, cmode: str | None = None) -> Any:
        """The value in ``cmode``, else the runtime value, else the first one; None when empty."""
        vals = dict(self.values)
        if cmode is not None:
            return vals.get(cmode)
        if "runtime" in vals:
            return vals["runtime"]
        return self.values[0][1] if self.values else None


@dataclass(frozen=True, slots=True)
class DevlinkPort:
    handle: str  # pci/0000:0c:00.0/1 or auxiliary/mlx5_core.eth.0/65535
    dev: str  # the devlink instance part of the handle
    index: int
    netdev: str | None = None
    flavour: str | None = None  # physical | pcipf | pcivf | pcisf | virtual
    controller: int | None = None
    pfnum: int | None = None
    vfnum: int | None = None
    sfnum: int | None = None
    external: bool | None = None


@dataclass(frozen=True, slots=True)
class HealthReporter:
    """One devlink health reporter (``devlink -j health show``)."""

    handle: str  # the key it is listed under: pci/0000:0c:00.0, pci/0000:0c:00.0/1, auxiliary/mlx5_core.eth.0/65535
    dev: str  # the devlink instance part of the handle
    port: int | None  # the port index when the reporter is a port's
    name: str  # fw, fw_fatal, tx, rx, vnic, dummy ...
    state: str | None  # healthy | error; None when not printed (not judged)
    error: int | None = None  # errors since the driver loaded
    recover: int | None = None  # recoveries since the driver loaded


# --------------------------------------------------------------------------------------------
# RDMA


@dataclass(frozen=True, slots=True)
class RdmaLink:
    dev: str  # rdma_rail0 / mlx5_0
    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT, ...
    physical_state: str | None = None  # LINK_UP, DISABLED, POLLING, ...
    netdev: str | None = None


@dataclass(frozen=True, slots=True)
class RdmaPort:
    """``/sys/class/infiniband/<dev>/ports/<port>``, in the words ``rdma link`` uses.

    sysfs writes ``4: ACTIVE`` and ``5: LinkUp``; the reader gives ``ACTIVE`` and ``LINK_UP``, so a
    port read from sysfs compares equal to the same port read from ``rdma link``.
    """

    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT, ...
    physical_state: str | None = None  # LINK_UP, DISABLED, POLLING, ...
    link_layer: str | None = None  # "ethernet" | "infiniband" (lower case)


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """``/sys/class/infiniband/<dev>``: identity and the counters of the ports asked for."""

    name: str
    pci: str | None = None  # the PCI function of ``device``
    fw_ver: str | None = None
    hca_type: str | None = None
    node_guid: str | None = None
    #: the ports asked for that sysfs has, by port number
    ports: tuple[RdmaPort, ...] = ()
    #: (port, counter name, value) — counters/* and hw_counters/*, only for rail ports
    counters: tuple[tuple[int, str, int], ...] = ()

    def port(self, n: int) -> RdmaPort | None:
        for p in self.ports:
            if p.port == n:
                return p
        return None


# --------------------------------------------------------------------------------------------
# ethtool


@dataclass(frozen=True, slots=True)
class EthtoolStats:
    netdev: str
    #: counter name (whitespace stripped) -> value. A missing key means off / unsupported.
    counters: tuple[tuple[str, int], ...]

    def get(self, name: str) -> int | None:
        return value_of(self.counters, name)

    def as_dict(self) -> dict[str, int]:
        return dict(self.counters)


@dataclass(frozen=True, slots=True)
class DriverInfo:
    netdev: str
    driver: str | None = None
    version: str | None = None
    firmware: str | None = None  # the version token only: 28.43.1014
    psid: str | None = None  # MT_0000000838 from "28.43.1014 (MT_0000000838)"
    bus_info: str | None = None


# --------------------------------------------------------------------------------------------
# versions, rails, OVS


@dataclass(frozen=True, slots=True)
class Versions:
    kernel: str | None = None  # /proc/sys/kernel/osrelease
    hostname: str | None = None
    cmdline: str | None = None
    mlx5_version: str | None = None  # /sys/module/mlx5_core/version (DOCA: 25.10-1.7.1)
    mlx5_srcversion: str | None = None
    netns_mode: str | None = None  # /sys/module/ib_core/parameters/netns_mode: "Y" shared, "N" exclusive
    #: (file, line) of ``options ib_core netns_mode=...`` in /etc/modprobe.d/*.conf
    modprobe_netns_mode: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One row of the validated-kernel table: a driver line is validated on a kernel line up to an ABI."""

    driver: str  # YY.MM (DOCA / MLNX_OFED 23.04+) or N.N (MLNX_OFED up to 5.9)
    flavour: str  # generic, nvidia, aws, azure, ... ; el9_4, amzn2023, default ...
    kernel_line: str
    max_abi: str  # <kernel_line>-<abi>
    source: str = ""


#: The files nic-configuration-operator writes: every rule in them names a rail, and they win over
#: a site's own file that names the same PCI function (docs/design.md §4 "Rails").
OPERATOR_RULE_FILES: tuple[str, ...] = (
    "/etc/udev/rules.d/10-nic-net-interface-naming.rules",
    "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules",
)


@dataclass(frozen=True, slots=True)
class RailRule:
    """One udev naming rule: a PCI function -> the name its netdev or RDMA device should get."""

    pci: str
    name: str
    kind: str  # "net" | "rdma"
    file: str  # absolute node path of the rules file
    line: int


@dataclass(frozen=True, slots=True)
class OvsInterface:
    name: str
    type: str | None = None
    ifindex: int | None = None
    ofport: int | None = None
    link_state: str | None = None
    error: str | None = None


# --------------------------------------------------------------------------------------------
# firmware, GPUs and GPUDirect (the readiness sources)


#: The version mlx5 reports when a firmware query fails: upstream 10dc35f6a443 ("net/mlx5: Avoid "No data
#: available" when FW version queries fail", net tree April 2026, backported to 6.19.y) sets the version word to
#: U32_MAX, printed ``%d.%d.%04d`` as major 0xff, minor 0xff, subminor 0xffff. As a stored version it
#: means the pending image could not be read (a failed or interrupted flash, "can't read pending fw
#: version while fw state is N"); no such firmware exists.
UNREADABLE_VERSION = "255.255.65535"


@dataclass(frozen=True, slots=True)
class FirmwareInfo:
    """``devlink -j dev info <PF handle>``: the versions the NIC runs and the ones flashed for the next
    reset. ``running`` / ``stored`` are (name, value) pairs as devlink prints them (mlx5: ``fw.version``
    and ``fw``; netdevsim: ``fw.mgmt``)."""

    handle: str
    driver: str | None = None
    running: tuple[tuple[str, str], ...] = ()
    stored: tuple[tuple[str, str], ...] = ()
    psid: str | None = None  # versions.fixed fw.psid

    @property
    def pending(self) -> tuple[tuple[str, str, str], ...]:
        """(name, running, stored) of every version that is in both sets and differs: flashed, not active.
        A version the NIC could not read (``UNREADABLE_VERSION``) on either side is never pending."""
        run = dict(self.running)
        return tuple((k, run[k], v) for k, v in self.stored
                     if k in run and run[k] != v and UNREADABLE_VERSION not in (run[k], v))

    @property
    def unreadable(self) -> tuple[tuple[str, str | None, str], ...]:
        """(name, running, stored) of every stored version the NIC reports as ``UNREADABLE_VERSION``
        (running None when the running set has no such name)."""
        run = dict(self.running)
        return tuple((k, run.get(k), v) for k, v in self.stored if v == UNREADABLE_VERSION)

    @property
    def version(self) -> str | None:
        """The firmware version word: ``fw.version``, else ``fw``, else the only running version."""
        run = dict(self.running)
        return run.get("fw.version") or run.get("fw") or (self.running[0][1] if len(self.running) == 1 else None)

    @property
    def stored_version(self) -> str | None:
        st = dict(self.stored)
        return st.get("fw.version") or st.get("fw") or (self.stored[0][1] if len(self.stored) == 1 else None)


@dataclass(frozen=True, slots=True)
class PciPath:
    """A PCI function's place in the PCIe tree: the resolved ``/sys/bus/pci/devices/<bdf>`` path
    (``/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0``) and its NUMA node
    (None when sysfs says -1 or nothing)."""

    bdf: str
    path: str | None
    numa_node: int | None = None
    pci_class: str | None = None  # 0x030200 (3D controller), 0x030000 (VGA), ...


@dataclass(frozen=True, slots=True)
class GpuState:
    """The node's NVIDIA GPUs and what makes GPUDirect RDMA possible on it (no GPU driver call)."""

    gpus: tuple[PciPath, ...] = ()
    #: the rail PFs' places in the PCIe tree, for the GPU <-> rail topology
    rail_paths: tuple[PciPath, ...] = ()
    #: (path, version) for each of the peer-memory paths NCCL probes that exists
    peer_memory: tuple[tuple[str, str], ...] = ()
    nvidia_loaded: bool = False
    nvidia_version: str | None = None  # /sys/module/nvidia/version
    nvidia_taint: str | None = None  # /sys/module/nvidia/taint: "P" proprietary, "O" out of tree, "E" unsigned

    def rail_path(self, bdf: str | None) -> PciPath | None:
        for p in self.rail_paths:
            if p.bdf == bdf:
                return p
        return None


# --------------------------------------------------------------------------------------------
# events (agent detectors, events.json)


@dataclass(frozen=True, slots=True)
class Event:
    ts: float  # unix seconds
    code: str
    severity: str
    subject: str
    message: str = ""
    evidence: tuple[tuple[str, Any], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "code": self.code, "severity": self.severity, "subject": self.subject,
                "message": self.message, "evidence": dict(self.evidence)}


# --------------------------------------------------------------------------------------------
# degradation: PCIe link, optics, NIC temperature (docs/design.md §3)


#: ``current_link_width`` of a Link Status register that reads 0xffff: ``(lnksta & PCI_EXP_LNKSTA_NLW) >> 4``
#: (drivers/pci/pci-sysfs.c ``current_link_width_show``). No link has 63 lanes: "Looks like all 1's was
#: returned ... as that equals the mask's 0x3f value" (Keith Busch on a "x63" link, linux-pci, 2020-10-07,
#: tests/fixtures/public/pcie/).
ALL_ONES_WIDTH = 63


@dataclass(frozen=True, slots=True)
class PcieLink:
    """A rail PF's PCIe link and its upstream port's (``/sys/bus/pci/devices/<bdf>/*_link_*``, AER)."""

    bdf: str
    #: GT/s per lane (``32.0 GT/s PCIe`` -> 32.0); None for ``Unknown`` or a missing file
    speed_gts: float | None = None
    max_speed_gts: float | None = None
    width: int | None = None
    max_width: int | None = None
    #: the parent directory of the PF's resolved sysfs path (a root port or a switch's downstream port)
    upstream: str | None = None
    upstream_max_speed_gts: float | None = None
    upstream_max_width: int | None = None
    #: ``TOTAL_ERR_COR`` / ``TOTAL_ERR_NONFATAL`` / ``TOTAL_ERR_FATAL`` of ``aer_dev_*``; None without AER
    aer_correctable: int | None = None
    aer_nonfatal: int | None = None
    aer_fatal: int | None = None
    #: the link is gone: ``current_link_speed`` ``Unknown`` with ``current_link_width`` 63, what the
    #: kernel prints when the Link Status register reads all ones (the width field's mask is 0x3f):
    #: the function answers config space with all ones and carries no traffic
    gone: bool = False

    def aer_counters(self) -> dict[str, int]:
        """The AER totals under their sysfs file names (``AER_COUNTERS``), the known ones only, and
        the function they were read from (``AER_FUNCTION``): what a rail's flight-recorder line
        carries so a rise is judged between two samples (docs/design.md §4) — of one function only: a rail
        name that moved to another PF within the window compares nothing."""
        vals = (self.aer_correctable, self.aer_nonfatal, self.aer_fatal)
        out = {k: v for k, v in zip(AER_COUNTERS, vals, strict=True) if v is not None}
        fn = pci_function_number(self.bdf)
        if out and fn is not None:
            out[AER_FUNCTION] = fn
        return out


#: A rail PF's AER totals as flight-recorder counters, named after the sysfs files they come from.
AER_COUNTERS: tuple[str, ...] = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
#: Beside them on a recorder line: the PCI function they are of, as one number (``pci_function_number``).
AER_FUNCTION = "aer_pci_function"

_BDF_PARTS = re.compile(r"\A([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([01][0-9a-fA-F])\.([0-7])\Z")


def pci_function_number(bdf: str) -> int | None:
    """``0000:0c:00.1`` -> domain << 16 | bus << 8 | device << 3 | function (a u64 a recorder row can
    hold); None for a name that is not a PCI address."""
    m = _BDF_PARTS.match(bdf)
    if not m:
        return None
    dom, bus, dev, fn = (int(g, 16) for g in m.groups())
    return dom << 16 | bus << 8 | dev << 3 | fn


@dataclass(frozen=True, slots=True)
class OpticsLane:
    lane: int  # 1-based, as ethtool prints "Channel N"
    tx_bias_ma: float | None = None
    tx_power_mw: float | None = None
    rx_power_mw: float | None = None
    #: the lane's warning / alarm flags as ethtool printed them, (quantity, kind, raised):
    #: ("rx_power_mw", "low_alarm", True). A quantity with no entry: the module printed none for it
    flags: tuple[tuple[str, str, bool], ...] = ()
    #: "Rx loss of signal" / "Tx loss of signal" / "Tx fault" of this lane; None where ethtool prints none
    rx_los: bool | None = None
    tx_los: bool | None = None
    tx_fault: bool | None = None


@dataclass(frozen=True, slots=True)
class ModuleOptics:
    """``ethtool -m <rail>``: the transceiver's monitors and its own thresholds (SFF-8636 or CMIS)."""

    netdev: str
    identifier: str | None = None  # "0x11 (QSFP28)", "0x18 (QSFP-DD ...)", "0x19 (OSFP ...)"
    vendor: str | None = None
    part: str | None = None
    serial: str | None = None
    temperature_c: float | None = None
    voltage_v: float | None = None
    lanes: tuple[OpticsLane, ...] = ()
    #: (quantity, kind, value): quantity temperature_c | voltage_v | tx_bias_ma | tx_power_mw | rx_power_mw,
    #: kind high_alarm | low_alarm | high_warning | low_warning. Empty: the module reports none
    thresholds: tuple[tuple[str, str, float], ...] = ()
    #: the module prints its warning / alarm flags (then they, not values against thresholds, decide)
    flags_reported: bool = False
    #: the per-lane flags name the right lane: False for CMIS, whose per-lane flags ethtool (to 6.15 at
    #: least) prints from ``byte & channel-index`` instead of the lane's bit (cmis.c
    #: ``cmis_show_dom_chan_lvl_flag``): a raised one is still raised, a clear one proves nothing
    lane_flags_exact: bool = True
    #: module-level flags as printed, (quantity, kind, raised): ("temperature_c", "high_warning", False)
    flags: tuple[tuple[str, str, bool], ...] = ()
    #: CMIS Module State ("ModuleReady", "ModuleLowPwr", "ModuleFault", ...)
    module_state: str | None = None
    #: what the output holds but railscope could not read (a threshold object of an unknown shape)
    unavailable: tuple[str, ...] = ()

    def threshold(self, quantity: str, kind: str) -> float | None:
        for q, k, v in self.thresholds:
            if q == quantity and k == kind:
                return v
        return None


@dataclass(frozen=True, slots=True)
class NicSensor:
    """One mlx5 hwmon sensor of a rail PF (``hwmon/hwmon*/temp<N>_*``), in degrees Celsius."""

    bdf: str
    sensor: str  # the label when the kernel gives one ("asic", "Module0"), else temp<N>
    input_c: float | None = None
    crit_c: float | None = None
    highest_c: float | None = None


@dataclass(frozen=True, slots=True)
class RdmaGid:
    """One populated entry of a rail's RDMA GID table (``/sys/class/infiniband/<dev>/ports/<p>/gids/<i>``,
    its ``gid_attrs/types/<i>`` and ``gid_attrs/ndevs/<i>``): what NCCL picks its source GID from
    (``NCCL_IB_GID_INDEX``, else the first RoCE v2 GID of the netdev's address family)."""

    netdev: str
    device: str
    port: int
    index: int
    gid: str  # 8 groups of 4 lower-case hex digits, as sysfs prints it
    type: str | None  # "RoCE v2", "IB/RoCE v1"; None when the kernel gives none

    @property
    def ipv4(self) -> bool:
        """An IPv4-mapped GID (``::ffff:a.b.c.d``): the rail has an IPv4 address RoCE v2 can route."""
        return self.gid.startswith("0000:0000:0000:0000:0000:ffff:")


@dataclass(frozen=True, slots=True)
class LldpNeighbor:
    """The LLDP neighbour of one rail: the switch port it is cabled to, from the last frame seen on it.

    Every string came from a frame on the wire (untrusted): the reader keeps printable text only, with
    anything else escaped, and cut to a bound. ``pfc`` is None when the peer sent no PFC TLV (not "PFC
    off": an empty tuple is PFC off on every priority)."""

    netdev: str
    #: "lldpd" (``lldpcli``) | "listen" (the agent's passive listener)
    via: str
    #: unix seconds of the last frame (the listener's clock; lldpd's "age" before the read)
    seen: float | None = None
    chassis_id: str | None = None
    #: the IEEE 802.1AB chassis / port ID subtype in words ("mac", "ifname", "local", ...)
    chassis_id_type: str | None = None
    port_id: str | None = None
    port_id_type: str | None = None
    system: str | None = None
    port_descr: str | None = None
    mgmt: tuple[str, ...] = ()
    ttl: int | None = None
    #: IEEE 802.3 maximum frame size (bytes, Ethernet header and FCS included)
    mfs: int | None = None
    #: IEEE 802.1Qaz PFC: the priorities PFC is enabled on; None without a PFC TLV
    pfc: tuple[int, ...] | None = None
    pfc_willing: bool | None = None
    pfc_cap: int | None = None
    #: IEEE 802.1Qaz ETS configuration: priority -> traffic class (8), bandwidth % per class (8)
    ets_prio_tc: tuple[int, ...] | None = None
    ets_bw: tuple[int, ...] | None = None
    #: IEEE 802.1Qaz application priority: (priority, selector, protocol) entries
    app: tuple[tuple[int, int, int], ...] = ()

    @property
    def port(self) -> str | None:
        """The switch port as people name it: an interface-name or local port ID (``swp12``,
        ``Ethernet1/12``), else the port description, else the port ID as sent."""
        if self.port_id and self.port_id_type in ("ifname", "local", "ifalias"):
            return self.port_id
        return self.port_descr or self.port_id

    @property
    def leaf(self) -> str | None:
        """The switch: its system name, else its chassis ID."""
        return self.system or self.chassis_id


# --------------------------------------------------------------------------------------------
# the snapshot


@dataclass(frozen=True, slots=True)
class DaemonProcess:
    """One process of a daemon a rail depends on (``agent.readers.processes.DAEMONS``), from
    ``/proc/<pid>/stat`` and ``/proc/<pid>/status``: never its environment, never its command line."""

    #: the daemon's word in the table (``ovs-vswitchd``, ``sriov-config-daemon``)
    daemon: str
    #: the kernel's name of the process (``comm``, at most 15 characters)
    name: str
    pid: int
    ppid: int | None = None
    #: the ``stat`` state letter (R running, S sleeping, D uninterruptible, Z zombie)
    state: str | None = None
    #: unix seconds (boot time + the start tick)
    start_time: float | None = None
    #: user + system CPU since it started, seconds
    cpu_seconds: float | None = None
    rss_bytes: int | None = None
    threads: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one read of the node gave, plus why each missing source is missing."""

    taken_at: float  # unix seconds
    node: str | None = None
    versions: Versions = field(default_factory=Versions)
    links: tuple[Link, ...] = ()
    pci: tuple[PciFunction, ...] = ()
    devlink_devs: tuple[DevlinkDev, ...] = ()
    eswitch: tuple[Eswitch, ...] = ()
    params: tuple[DevlinkParam, ...] = ()
    ports: tuple[DevlinkPort, ...] = ()
    health: tuple[HealthReporter, ...] = ()
    rdma_links: tuple[RdmaLink, ...] = ()
    rdma_netns: str | None = None  # "shared" | "exclusive" (rdma system show) else from sysfs
    rdma_devices: tuple[RdmaDevice, ...] = ()
    ethtool: tuple[EthtoolStats, ...] = ()
    drivers: tuple[DriverInfo, ...] = ()
    rules: tuple[RailRule, ...] = ()
    #: (file, line, why) of each naming rule line that cannot be read (the RailRuleUnreadable finding)
    rule_problems: tuple[tuple[str, int, str], ...] = ()
    ovs: tuple[OvsInterface, ...] | None = None  # None: OVS not present / not readable
    pcie: tuple[PcieLink, ...] = ()
    optics: tuple[ModuleOptics, ...] = ()
    thermal: tuple[NicSensor, ...] = ()
    #: the populated RDMA GID table entries of the rails' netdevs (the ``gids`` source)
    gids: tuple[RdmaGid, ...] = ()
    #: the processes of the daemons a rail depends on (the ``processes`` source)
    processes: tuple[DaemonProcess, ...] = ()
    #: source -> reason ("devlink": "devlink: command not found")
    unavailable: tuple[tuple[str, str], ...] = ()
    #: devlink handles whose command timed out (busy: e.g. the SR-IOV daemon is creating VFs)
    busy: tuple[str, ...] = ()
    #: ``devlink dev info`` of the rail PFs (the firmware source)
    firmware: tuple[FirmwareInfo, ...] = ()
    #: GPUs, GPUDirect paths and the rail PFs' PCIe places (the gpus source); None: not read
    gpus: GpuState | None = None
    #: the rails' LLDP neighbours (the lldp source): one per rail that has one
    lldp: tuple[LldpNeighbor, ...] = ()

    def link(self, ifname: str) -> Link | None:
        for link in self.links:
            if link.ifname == ifname:
                return link
        return None

    def pci_function(self, bdf: str) -> PciFunction | None:
        for fn in self.pci:
            if fn.bdf == bdf:
                return fn
        return None

    def ethtool_of(self, netdev: str) -> EthtoolStats | None:
        for st in self.ethtool:
            if st.netdev == netdev:
                return st
        return None

    def neighbor_of(self, netdev: str | None) -> LldpNeighbor | None:
        for n in self.lldp:
            if n.netdev == netdev:
                return n
        return None

    def driver_of(self, netdev: str) -> DriverInfo | None:
        for d in self.drivers:
            if d.netdev == netdev:
                return d
        return None
