"""thermal: the mlx5 hwmon sensors of each rail PF (``/sys/bus/pci/devices/<bdf>/hwmon/hwmon*/temp*``).

mlx5 registers a hwmon device on recent kernels (drivers/net/ethernet/mellanox/mlx5/core/hwmon.c,
Linux 6.5+): ``temp1`` is the ASIC, further ``temp<N>`` the modules' sensors where firmware exposes
them, each with ``_input``, ``_crit``, ``_highest`` in millidegrees Celsius and a ``_label``. An older
kernel has no ``hwmon`` directory: "not available", never a finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import NicSensor
from agent.readers.common import BDF_RE, Notes, read_word, to_int
from agent.readers.source import Context, Part, Source, part

__all__ = ["SOURCE", "parse_millidegrees", "parse_sensor_files", "read_thermal"]

_TEMP = re.compile(r"\Atemp(\d{1,3})_(input|crit|highest|label)\Z")
#: at most this many sensors per PF (a node image may list anything)
_MAX_SENSORS = 64


def parse_millidegrees(text: str | None) -> float | None:
    """``temp1_input`` text -> degrees Celsius. Sample: ``48000`` -> 48.0; empty or junk -> None."""
    n = to_int(text)
    if n is None or not -273_000 <= n <= 1_000_000:
        return None
    return n / 1000.0


def parse_sensor_files(bdf: str, files: dict[str, str | None]) -> tuple[NicSensor, ...]:
    """The files of one hwmon directory (name -> text) -> sensors, by sensor number.

    Sample (mlx5 hwmon, ConnectX-7)::

        temp1_input   48000
        temp1_crit    105000
        temp1_highest 55000
        temp1_label   asic
    """
    nums: dict[int, dict[str, str | None]] = {}
    for name, text in files.items():
        m = _TEMP.match(name)
        if m:
            nums.setdefault(int(m.group(1)), {})[m.group(2)] = text
    out = []
    for n in sorted(nums)[:_MAX_SENSORS]:
        f = nums[n]
        if "input" not in f:
            continue
        label = (f.get("label") or "").strip()
        out.append(NicSensor(bdf=bdf, sensor=label[:32] if label and label.isprintable() else f"temp{n}",
                             input_c=parse_millidegrees(f.get("input")), crit_c=parse_millidegrees(f.get("crit")),
                             highest_c=parse_millidegrees(f.get("highest"))))
    return tuple(out)


def read_thermal(host: Host, bdfs: Iterable[str], notes: Notes | None = None) -> tuple[NicSensor, ...]:
    notes = notes if notes is not None else Notes()
    out: list[NicSensor] = []
    missing = []
    for bdf in sorted(set(bdfs)):
        if not BDF_RE.match(bdf):
            continue
        base = f"/sys/bus/pci/devices/{bdf}/hwmon"
        dirs = sorted(d for d in host.listdir(base) or () if d.startswith("hwmon"))
        if not dirs:
            missing.append(bdf)
            continue
        for d in dirs[:4]:
            names = [n for n in host.listdir(f"{base}/{d}") or () if _TEMP.match(n)]
            files = {n: read_word(host, f"{base}/{d}/{n}", 64) for n in names}
            out.extend(parse_sensor_files(bdf, files))
    if missing:
        notes.missing("thermal", f"no mlx5 hwmon sensors on {', '.join(missing)} (kernel before 6.5, or not mlx5)")
    return tuple(out)


def read_thermal_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rail PFs' mlx5 hwmon sensors (sysfs)."""
    return part("thermal", notes, fields={"thermal": read_thermal(host, ctx.rail_bdfs, notes)})


SOURCE = Source("thermal", "the rail PFs' mlx5 hwmon temperature sensors (sysfs)",
                (), 60.0, 5.0, ("thermal",), read_thermal_part, order=100, needs=("rail_bdfs",))
