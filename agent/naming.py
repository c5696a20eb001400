"""Rail name templates in the nic-configuration-operator's syntax.

A template such as ``net_rail%rail_id%_plane%plane_id%`` renders a rail's netdev name; railscope uses
it the other way round, to parse rail / plane / NIC numbers back out of a name. See
https://github.com/Mellanox/nic-configuration-operator (``NicInterfaceNameTemplate``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "DEFAULT_NET_TEMPLATES",
    "DEFAULT_RDMA_TEMPLATES",
    "IFNAMSIZ_MAX",
    "RailName",
    "parse_name",
    "render",
]

#: Tried in order when no ``--net-template`` is given (DESIGN §4 "Rails").
DEFAULT_NET_TEMPLATES: tuple[str, ...] = (
    "net_rail%rail_id%",
    "net_rail%rail_id%_plane%plane_id%",
    "net_%nic_id%_%plane_id%_%rail_id%",
)
DEFAULT_RDMA_TEMPLATES: tuple[str, ...] = tuple(t.replace("net_", "rdma_", 1) for t in DEFAULT_NET_TEMPLATES)

#: A netdev name holds at most 15 characters (IFNAMSIZ 16 with the NUL); udev cannot apply a
#: longer NAME= and the interface keeps its kernel name. RDMA device names may be 64.
IFNAMSIZ_MAX = 15

_VARS = ("rail_id", "plane_id", "nic_id")


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
    bad = [v for v in re.findall(r"%([a-z_]+)%", template) if v not in _VARS]
    if bad:
        return f"template {template!r}: unknown variable %{bad[0]}%"
    return None
