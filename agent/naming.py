"""The grammar of the names railscope keys things by: rail name templates, ``phys_port_name``, PCI order.

A template such as ``net_rail%rail_id%_plane%plane_id%`` renders a rail's netdev name; railscope uses
it the other way round, to parse rail / plane / NIC numbers back out of a name. See
https://github.com/Mellanox/nic-configuration-operator (``NicInterfaceNameTemplate``).

``parse_port_name`` is the one reader of the ``phys_port_name`` forms (uplink, VF / SF representor,
another controller's port): the readers pick a link's role with it and the topology its owner.
A devlink handle is ``<bus>/<device>``: ``pci_of_handle`` gives the PCI function of a ``pci/`` one.

``parse_rail_map`` reads ``--rail-map`` (rail -> PCI function), the declaration of rails for a node whose
netdevs keep their kernel or systemd names (``enp12s0f0np0``) and whose udev rules name none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from agent.model import OPERATOR_RULE_FILES, RailRule

__all__ = [
    "DEFAULT_NET_TEMPLATES",
    "DEFAULT_RDMA_TEMPLATES",
    "IFNAMSIZ_MAX",
    "NOT_PF_BUSES",
    "OPERATOR_RULE_FILES",
    "RAIL_MAP_MAX",
    "SITE_NET_TEMPLATES",
    "SITE_RDMA_TEMPLATES",
    "PortName",
    "RailMapError",
    "RailName",
    "is_vf_netdev_of",
    "net_twin",
    "parse_name",
    "parse_port_name",
    "parse_rail_map",
    "pci_of_handle",
    "pci_order",
    "rail_map_from_pairs",
    "rail_only_template",
    "rail_rules",
    "rdma_twin",
    "render",
]

#: Tried in order when no ``--net-template`` is given (docs/design.md §4 "Rails").
DEFAULT_NET_TEMPLATES: tuple[str, ...] = (
    "net_rail%rail_id%",
    "net_rail%rail_id%_plane%plane_id%",
    "net_%nic_id%_%plane_id%_%rail_id%",
)
DEFAULT_RDMA_TEMPLATES: tuple[str, ...] = tuple(t.replace("net_", "rdma_", 1) for t in DEFAULT_NET_TEMPLATES)

#: Rail names that sites write in their own udev rules (``70-persistent-net.rules``), known so that
#: such a node is read without flags. ``eth_rail<N>`` / ``roce_rail<N>`` beside ``eth_sec<N>`` storage
#: NICs: the Spectrum-X OpenShift rail mapping of github.com/schmaustech/gpu-nic-rail-mapping (README,
#: Dell XE9680 H200 and Grace Hopper nodes). ``mlx5_ib<N>``: Azure's persistent RDMA naming for
#: HB / ND VMs (learn.microsoft.com, "Known Issues with IB RDMA and NUMA Node Affinity",
#: ``99-rdma-persistent-naming.rules``).
SITE_NET_TEMPLATES: tuple[str, ...] = ("eth_rail%rail_id%",)
SITE_RDMA_TEMPLATES: tuple[str, ...] = ("roce_rail%rail_id%", "mlx5_ib%rail_id%")
#: net template -> its RDMA twin where the twin is not the ``net_`` -> ``rdma_`` rule.
_TWINS: dict[str, str] = {"eth_rail%rail_id%": "roce_rail%rail_id%"}

#: A netdev name holds at most 15 characters (IFNAMSIZ 16 with the NUL); udev cannot apply a
#: longer NAME= and the interface keeps its kernel name. RDMA device names may be 64.
IFNAMSIZ_MAX = 15

_VARS = ("rail_id", "plane_id", "nic_id")
#: A ``%name%`` variable of a template, known or not (``validate_template`` refuses unknown ones).
_VAR_RE = re.compile(r"%([a-z_]+)%")


@dataclass(frozen=True, slots=True)
class RailName:
    rail: int
    plane: int | None = None
    nic: int | None = None
    template: str = ""


@lru_cache(maxsize=64)
def _compile(template: str) -> re.Pattern[str]:
    out = []
    pos = 0
    for m in re.finditer(r"%(rail_id|plane_id|nic_id)%", template):
        out.append(re.escape(template[pos:m.start()]))
        # At most 9 digits: a name from an image with 5,000 of them names no rail (and would not fit
        # an int conversion's digit limit).
        out.append(f"(?P<{m.group(1)}>[0-9]{{1,9}})")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + r"\Z")


def parse_name(name: str, templates: tuple[str, ...] | list[str]) -> RailName | None:
    """The rail / plane / NIC numbers in ``name`` by the first template that matches it.

    >>> parse_name("net_rail3", DEFAULT_NET_TEMPLATES)
    RailName(rail=3, plane=None, nic=None, template='net_rail%rail_id%')
    >>> parse_name("net_1_0_2", DEFAULT_NET_TEMPLATES).rail
    2
    >>> parse_name("eth0", DEFAULT_NET_TEMPLATES) is None
    True
    """
    for t in templates:
        if "%rail_id%" not in t:
            continue
        m = _compile(t).match(name)
        if m:
            g = m.groupdict()
            return RailName(
                rail=int(g["rail_id"]),
                plane=int(g["plane_id"]) if g.get("plane_id") is not None else None,
                nic=int(g["nic_id"]) if g.get("nic_id") is not None else None,
                template=t,
            )
    return None


def render(template: str, rail: int, plane: int | None = None, nic: int | None = None) -> str:
    """``render("net_rail%rail_id%", 2) == "net_rail2"``."""
    out = template.replace("%rail_id%", str(rail))
    if plane is not None:
        out = out.replace("%plane_id%", str(plane))
    if nic is not None:
        out = out.replace("%nic_id%", str(nic))
    return out


def validate_template(template: str) -> str | None:
    """A reason the template is unusable, or None."""
    if "%rail_id%" not in template:
        return f"template {template!r} has no %rail_id%"
    bad = [v for v in _VAR_RE.findall(template) if v not in _VARS]
    if bad:
        return f"template {template!r}: unknown variable %{bad[0]}%"
    return None


def rail_only_template(templates: Iterable[str]) -> str | None:
    """The first template whose only number is the rail's: the one ``--rails N`` names its rails by
    (a plane or NIC number cannot be made up), or None.

    >>> rail_only_template(("net_rail%rail_id%_plane%plane_id%", "gpu%rail_id%"))
    'gpu%rail_id%'
    """
    return next((t for t in templates if set(_VAR_RE.findall(t)) == {"rail_id"}), None)


def rdma_twin(net_template: str) -> str | None:
    """The RDMA template that goes with a net template: ``net_`` -> ``rdma_``, or a known site pair."""
    if net_template in _TWINS:
        return _TWINS[net_template]
    if net_template.startswith("net_"):
        return "rdma_" + net_template[len("net_"):]
    return None


def net_twin(rdma_template: str) -> str | None:
    """The net template that goes with an RDMA template; None for RDMA-only names (``mlx5_ib%rail_id%``)."""
    for net, rdma in _TWINS.items():
        if rdma == rdma_template:
            return net
    if rdma_template.startswith("rdma_"):
        return "net_" + rdma_template[len("rdma_"):]
    return None


def _is_rail_name(rule: RailRule, net_templates: tuple[str, ...], rdma_templates: tuple[str, ...]) -> bool:
    return parse_name(rule.name, net_templates if rule.kind == "net" else rdma_templates) is not None


def rail_rules(rules: Iterable[RailRule], net_templates: tuple[str, ...] = DEFAULT_NET_TEMPLATES,
               rdma_templates: tuple[str, ...] = DEFAULT_RDMA_TEMPLATES) -> tuple[RailRule, ...]:
    """The naming rules that name rails, one per (PCI function, kind) (docs/design.md §4 "Rails").

    Every rule of the operator's two files names a rail. A rule of another file names a rail when
    its function has a rule (net or RDMA, in that file set) whose name matches a template — the given
    ones, or the known operator and site ones; a site's storage or management NIC rules
    (``eth_sec0``) are not rails. When two files name one function, the operator's rule wins; among
    the other files, the first file (udev's lexical order) and first line.

    >>> r = [RailRule("0000:1a:00.0", "eth_sec0", "net", "/etc/udev/rules.d/70-persistent-net.rules", 1),
    ...      RailRule("0000:18:00.0", "eth_rail0", "net", "/etc/udev/rules.d/70-persistent-net.rules", 2)]
    >>> [x.name for x in rail_rules(r)]
    ['eth_rail0']
    """
    nets = tuple(dict.fromkeys((*net_templates, *DEFAULT_NET_TEMPLATES, *SITE_NET_TEMPLATES)))
    rdmas = tuple(dict.fromkeys((*rdma_templates, *DEFAULT_RDMA_TEMPLATES, *SITE_RDMA_TEMPLATES)))
    ordered = sorted(rules, key=lambda r: (r.file not in OPERATOR_RULE_FILES, r.file, r.line))
    site_rail_pcis = {r.pci for r in ordered if r.file not in OPERATOR_RULE_FILES and _is_rail_name(r, nets, rdmas)}
    chosen: dict[tuple[str, str], RailRule] = {}
    for r in ordered:
        if r.file not in OPERATOR_RULE_FILES and r.pci not in site_rail_pcis:
            continue
        chosen.setdefault((r.pci, r.kind), r)
    return tuple(sorted(chosen.values(), key=lambda r: (r.file not in OPERATOR_RULE_FILES, r.file, r.line)))


# --------------------------------------------------------------------------------------------
# phys_port_name

# phys_port_name forms of mlx5 (en_rep.c mlx5e_rep_get_phys_port_name; devlink port naming):
# uplink "p0", VF representor "pf0vf3", SF "pf0sf88", host PF on a DPU "pf0", other controller "c1pf0vf3".
# ASCII digits only: the kernel prints them with %u.
_PORT_RE = re.compile(r"\A(?:c(?P<c>[0-9]+))?pf(?P<pf>[0-9]+)(?:(?P<kind>vf|sf)(?P<n>[0-9]+))?\Z")
_UPLINK_RE = re.compile(r"\Ap(?P<p>[0-9]+)\Z")


@dataclass(frozen=True, slots=True)
class PortName:
    """A parsed ``phys_port_name``."""

    kind: str  # "uplink" | "vf" | "sf" | "pf"
    controller: int = 0
    pf: int | None = None  # the NIC's device index (firmware port number), not the PCI function
    index: int | None = None  # the uplink port, the VF or the SF number

    @property
    def is_representor(self) -> bool:
        """A VF / SF representor, or a host PF's seen from a DPU: any port name but an uplink's."""
        return self.kind != "uplink"


@lru_cache(maxsize=8192)
def parse_port_name(name: str | None) -> PortName | None:
    """``"p0"`` -> uplink 0, ``"pf0vf3"`` -> VF 3 of pf0, ``"c1pf0vf3"`` -> controller 1; else None.

    >>> parse_port_name("pf1vf12")
    PortName(kind='vf', controller=0, pf=1, index=12)
    >>> parse_port_name("p0").kind
    'uplink'
    >>> parse_port_name(None) is None
    True
    """
    if not name:
        return None
    try:
        m = _UPLINK_RE.match(name)
        if m:
            return PortName("uplink", 0, None, int(m.group("p")))
        m = _PORT_RE.match(name)
        if m:
            kind = m.group("kind") or "pf"
            return PortName(kind, int(m.group("c") or 0), int(m.group("pf")),
                            int(m.group("n")) if m.group("n") is not None else None)
    except ValueError:
        # More digits than int() converts (an image's name is untrusted): no port name, no traceback.
        return None
    return None


def is_vf_netdev_of(name: str, pf_netdev: str) -> bool:
    """``name`` is ``<pf netdev>_<vf>``: the name udev gives a VF representor (or VF) of that PF.

    >>> is_vf_netdev_of("net_rail0_3", "net_rail0"), is_vf_netdev_of("net_rail0_x", "net_rail0")
    (True, False)
    """
    return re.fullmatch(re.escape(pf_netdev) + r"_\d+", name) is not None


# --------------------------------------------------------------------------------------------
# PCI addresses and devlink handles

#: Buses whose devices are never a PF of their own: an auxiliary device is a function of its parent
#: (mlx5: ``mlx5_core.eth.N`` is the PF's nested instance, ``mlx5_core.sf.N`` a sub-function). A
#: device on any other bus (netdevsim) names its devlink handle ``<bus>/<device>`` itself.
NOT_PF_BUSES = frozenset({"pci", "auxiliary"})


def pci_of_handle(handle: str) -> str | None:
    """The PCI function of a devlink handle ``pci/<bdf>``; None for a handle on another bus.

    >>> pci_of_handle("pci/0000:0c:00.0"), pci_of_handle("auxiliary/mlx5_core.eth.0")
    ('0000:0c:00.0', None)
    """
    return handle[len("pci/"):] if handle.startswith("pci/") else None



def pci_order(bdf: str) -> tuple[int, tuple[int, ...], str]:
    """The sort key of a PCI function name: numeric address order (a domain wider than four digits
    sorts by value); a name that is not an address (another bus's device, a damaged image) after,
    by text.

    >>> sorted(["0000:8d:00.0", "netdevsim10", "0000:0c:00.1"], key=pci_order)
    ['0000:0c:00.1', '0000:8d:00.0', 'netdevsim10']
    """
    parts = re.split(r"[:.]", bdf)
    try:
        return (0, tuple(int(p, 16) for p in parts), "")
    except ValueError:
        return (1, (), bdf)


# --------------------------------------------------------------------------------------------
# --rail-map

#: ``--rail-map`` names at most this many rails (``--rails`` takes at most 1024 too).
RAIL_MAP_MAX = 1024
#: A PCI function as sysfs names it (``/sys/bus/pci/devices``): domain, bus, device (5 bits: 00-1f),
#: function (0-7), lower case. Hyper-V gives wider domains (``0101:00:00.0``, 4 digits still; up to 8
#: on some hosts).
_PCI_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]")
#: ``lspci`` without ``-D`` prints no domain: refused with a hint, never guessed as 0000.
_SHORT_PCI_RE = re.compile(r"[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]")
_RAIL_RE = re.compile(r"[0-9]{1,4}")


class RailMapError(ValueError):
    """A ``--rail-map`` that cannot be used; the message names the entry and what is wrong with it."""


def _rail_pci(text: str, where: str) -> str:
    t = text.strip()
    if _PCI_RE.fullmatch(t.lower()):
        return t.lower()
    if _SHORT_PCI_RE.fullmatch(t):
        raise RailMapError(f"{where}: {t!r} has no PCI domain: write it as sysfs does, 0000:{t.lower()} "
                           "(lspci -D prints it so)")
    raise RailMapError(f"{where}: {t!r} is not a PCI function address such as 0000:0c:00.0 "
                       "(domain:bus:device.function, as in /sys/bus/pci/devices)")


def rail_map_from_pairs(pairs: Iterable[tuple[str, str, str]]) -> tuple[tuple[int, str], ...]:
    """``(where, rail text, PCI text)`` entries -> the map as (rail, PCI function) pairs sorted by rail;
    ``RailMapError`` for a rail that is not a number 0-1023, an address that is not a PCI function's,
    a rail or a function given twice, an empty map or one of more than ``RAIL_MAP_MAX`` rails."""
    by_rail: dict[int, str] = {}
    by_pci: dict[str, int] = {}
    for where, rail_text, pci_text in pairs:
        r = rail_text.strip()
        if not _RAIL_RE.fullmatch(r) or int(r) >= RAIL_MAP_MAX:
            raise RailMapError(f"{where}: rail {r!r} is not a rail number 0-{RAIL_MAP_MAX - 1}")
        rail = int(r)
        pci = _rail_pci(pci_text, where)
        if rail in by_rail:
            raise RailMapError(f"{where}: rail {rail} is given twice ({by_rail[rail]} and {pci})")
        if pci in by_pci:
            raise RailMapError(f"{where}: {pci} is given for rails {by_pci[pci]} and {rail}: one function is one rail")
        by_rail[rail] = pci
        by_pci[pci] = rail
    if not by_rail:
        raise RailMapError("the rail map names no rail")
    return tuple(sorted(by_rail.items()))


def parse_rail_map(text: str) -> tuple[tuple[int, str], ...]:
    """``0=0000:0c:00.0,1=0000:8d:00.0`` -> ((0, "0000:0c:00.0"), (1, "0000:8d:00.0")); ``RailMapError``
    naming the entry that is not ``RAIL=PCI`` (see ``rail_map_from_pairs``).

    >>> parse_rail_map("1=0000:8D:00.0, 0=0000:0c:00.0")
    ((0, '0000:0c:00.0'), (1, '0000:8d:00.0'))
    """
    entries = [e.strip() for e in text.split(",")]
    if len(entries) > RAIL_MAP_MAX:
        raise RailMapError(f"more than {RAIL_MAP_MAX} rails")
    pairs = []
    for n, entry in enumerate(entries, 1):
        rail, sep, pci = entry.partition("=")
        if not sep:
            raise RailMapError(f"entry {n} {entry!r}: expected RAIL=PCI, e.g. 0=0000:0c:00.0")
        pairs.append((f"entry {n} {entry!r}", rail, pci))
    return rail_map_from_pairs(pairs)
