"""pcie: the PCIe link of each rail PF and of its upstream port, and the PF's AER counters (sysfs).

No firmware access: the kernel keeps these in config space and its own counters. The upstream port is
the parent directory of the PF's resolved sysfs path (a root port or a PCIe switch's downstream port);
a PF that trained at what that port can give sits in a slower slot, which is a fact for the evidence,
not a fault (docs/design.md §4 "PCIe"). ``Unknown`` or a missing file is "not available", never 0 — except
``current_link_speed`` ``Unknown`` with ``current_link_width`` ``63``: the Link Status register read
all ones (speed field 0xf, width field 0x3f), the function fell off its link (``PcieLink.gone``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import ALL_ONES_WIDTH, PcieLink
from agent.readers.common import BDF_RE, Notes, read_word, to_int
from agent.readers.source import Context, Part, Source, part

__all__ = ["SOURCE", "link_gone", "parse_aer", "parse_link_speed", "parse_link_width", "read_pcie"]

_SPEED = re.compile(r"\A\s*(\d+(?:\.\d+)?)\s*GT/s")
_U64 = 1 << 64


def parse_link_speed(text: str | None) -> float | None:
    """``current_link_speed`` / ``max_link_speed`` -> GT/s per lane; None when the kernel does not know.

    Samples (drivers/pci/pci-sysfs.c ``pci_speed_string``)::

        32.0 GT/s PCIe
        16.0 GT/s PCIe
        8.0 GT/s PCIe
        2.5 GT/s PCIe
        Unknown

    Kernels before 5.6 printed ``8 GT/s`` without the ``PCIe`` suffix; both read the same.
    """
    if not text:
        return None
    m = _SPEED.match(text)
    if not m:
        return None
    val = float(m.group(1))
    return val if 0 < val < 1000 else None


def parse_link_width(text: str | None) -> int | None:
    """``current_link_width`` / ``max_link_width`` -> lanes (sample: ``16``); 0 or garbage -> None."""
    n = to_int(text)
    return n if n is not None and 0 < n <= 32 else None


def link_gone(speed_text: str | None, width_text: str | None) -> bool:
    """The function fell off its link: ``current_link_speed`` ``Unknown`` (``Unknown speed`` on old
    kernels; speed field 0xf is no PCIe rate) together with ``current_link_width`` 63. Either alone is
    not enough: ``Unknown`` with a real width is a rate this kernel does not name yet."""
    speed = (speed_text or "").strip().lower()
    return speed.startswith("unknown") and to_int(width_text) == ALL_ONES_WIDTH


def parse_aer(text: str | None) -> dict[str, int]:
    """``aer_dev_correctable`` / ``aer_dev_nonfatal`` / ``aer_dev_fatal`` -> name -> count.

    Sample (``aer_dev_correctable``, drivers/pci/pcie/aer.c)::

        RxErr 0
        BadTLP 0
        BadDLLP 0
        Rollover 0
        Timeout 0
        NonFatalErr 0
        CorrIntErr 0
        HeaderOF 0
        TOTAL_ERR_COR 0

    A line that is not ``<name> <count>`` is skipped.
    """
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        n = to_int(parts[1])
        if n is not None and 0 <= n < _U64:
            out[parts[0]] = n
    return out


def _parent_bdf(resolved: str | None) -> str | None:
    if not resolved:
        return None
    parent = resolved.rstrip("/").rsplit("/", 2)
    name = parent[-2] if len(parent) >= 2 else ""
    return name if BDF_RE.match(name) else None


def read_pcie(host: Host, bdfs: Iterable[str], notes: Notes | None = None) -> tuple[PcieLink, ...]:
    """The link of each PF in ``bdfs`` (rail PFs) and of its upstream port, and its AER totals."""
    notes = notes if notes is not None else Notes()
    out = []
    for bdf in sorted(set(bdfs)):
        if not BDF_RE.match(bdf):
            continue
        base = f"/sys/bus/pci/devices/{bdf}"
        resolved = host.realpath(base)
        speed_text = read_word(host, f"{base}/current_link_speed", 64)
        width_text = read_word(host, f"{base}/current_link_width", 64)
        speed = parse_link_speed(speed_text)
        max_speed = parse_link_speed(read_word(host, f"{base}/max_link_speed", 64))
        width = parse_link_width(width_text)
        gone = link_gone(speed_text, width_text)
        max_width = parse_link_width(read_word(host, f"{base}/max_link_width", 64))
        up = _parent_bdf(resolved)
        up_speed = up_width = None
        if up is not None and resolved:
            up_dir = resolved.rstrip("/").rsplit("/", 1)[0]
            up_speed = parse_link_speed(read_word(host, f"{up_dir}/max_link_speed", 64))
            up_width = parse_link_width(read_word(host, f"{up_dir}/max_link_width", 64))
        aer = {kind: parse_aer(host.read_text(f"{base}/aer_dev_{kind}", 1 << 14))
               for kind in ("correctable", "nonfatal", "fatal")}
        if speed is None and width is None and not gone:
            notes.missing("pcie", f"{bdf}: no current_link_speed / current_link_width (not a PCIe function, or "
                                  "Unknown)")
        out.append(PcieLink(bdf=bdf, speed_gts=speed, max_speed_gts=max_speed, width=width, max_width=max_width,
                            upstream=up, upstream_max_speed_gts=up_speed, upstream_max_width=up_width,
                            aer_correctable=aer["correctable"].get("TOTAL_ERR_COR"),
                            aer_nonfatal=aer["nonfatal"].get("TOTAL_ERR_NONFATAL"),
                            aer_fatal=aer["fatal"].get("TOTAL_ERR_FATAL"), gone=gone))
    return tuple(out)


def read_pcie_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rail PFs' PCIe link, their upstream ports' and their AER totals (sysfs: no firmware access)."""
    return part("pcie", notes, fields={"pcie": read_pcie(host, ctx.rail_bdfs, notes)})


SOURCE = Source("pcie", "the rail PFs' PCIe link speed / width, their upstream ports' and their AER counters (sysfs)",
                (), 60.0, 5.0, ("pcie",), read_pcie_part, order=90, needs=("rail_bdfs",))
