"""ethtool: NIC statistics (PFC, pause, discards) and driver / firmware info of rails and uplinks.

On mlx5 ``ETHTOOL_GSTATS`` is a synchronous firmware read: rails are read one at a time, and
representors never unless asked (``ReadConfig.representor_ethtool``). Live, the host answers through
the ioctl (``host.ethtool_stats`` / ``host.ethtool_drvinfo``); replayed, the readers parse the
recorded ``ethtool -S`` / ``ethtool -i`` text. A missing counter means *off or unsupported*, never 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from agent.host import FirmwareBusy, Host
from agent.model import DriverInfo, EthtoolStats
from agent.readers.common import Notes, to_int

__all__ = ["parse_drvinfo", "parse_ethtool_i", "parse_ethtool_s", "parse_firmware", "read_ethtool"]

_FW = re.compile(r"\A(?P<fw>\S+)(?:\s+\((?P<psid>[^)]*)\))?")

_U64 = 1 << 64


def parse_ethtool_s(text: str, netdev: str, require_header: bool = True) -> EthtoolStats:
    """``ethtool -S <if>`` text -> counters; key whitespace stripped, non-numeric lines skipped.

    Sample (mlx5; one historic driver printed ``tx_pause_storm_warning_events`` with a trailing
    space in the name, hence the strip)::

        NIC statistics:
             rx_prio3_pause: 51022
             tx_prio3_pause_duration: 1803
             tx_pause_storm_warning_events : 0

    Raises ValueError when the text is not ethtool statistics (no ``NIC statistics:`` header, e.g.
    an error message); ``require_header=False`` accepts a grepped excerpt.
    """
    counters: list[tuple[str, int]] = []
    seen_header = False
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith(":") and s[:-1].strip().lower() in ("nic statistics", "statistics"):
            seen_header = True
            continue
        if require_header and not seen_header:
            continue
        name, sep, value = s.rpartition(":")
        if not sep:
            continue
        key = name.strip()
        n = to_int(value)
        # ethtool counters are u64: a negative or wider value is a damaged line, not a count.
        if key and n is not None and 0 <= n < _U64:
            counters.append((key, n))
    if (require_header and not seen_header) or not (seen_header or counters):
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ValueError(f"ethtool -S {netdev}: not statistics output ({first[:80]!r})" if first
                         else f"ethtool -S {netdev}: empty output")
    return EthtoolStats(netdev=netdev, counters=tuple(counters))


def parse_firmware(text: str | None) -> tuple[str | None, str | None]:
    """``28.43.1014 (MT_0000000838)`` -> ``("28.43.1014", "MT_0000000838")``; no PSID -> None."""
    if not text or not text.strip():
        return None, None
    m = _FW.match(text.strip())
    if not m:
        return None, None
    return m.group("fw"), (m.group("psid") or "").strip() or None


def parse_drvinfo(info: dict[str, str], netdev: str) -> DriverInfo:
    """``host.ethtool_drvinfo`` (keys driver, version, fw_version, bus_info) -> ``DriverInfo``."""
    def g(key: str) -> str | None:
        v = info.get(key)
        return (v.strip() or None) if isinstance(v, str) else None

    fw, psid = parse_firmware(g("fw_version"))
    return DriverInfo(netdev=netdev, driver=g("driver"), version=g("version"), firmware=fw, psid=psid,
                      bus_info=g("bus_info"))


def parse_ethtool_i(text: str, netdev: str) -> DriverInfo:
    """``ethtool -i <if>`` text -> ``DriverInfo``.

    Sample::

        driver: mlx5_core
        version: 25.10-1.7.1
        firmware-version: 28.42.1000 (MT_0000000838)
        expansion-rom-version:
        bus-info: 0000:0c:00.0
    """
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            kv[key.strip().replace("-", "_")] = value.strip()
    if "driver" not in kv:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ValueError(f"ethtool -i {netdev}: no driver line ({first[:80]!r})" if first
                         else f"ethtool -i {netdev}: empty output")
    return parse_drvinfo({"driver": kv.get("driver", ""), "version": kv.get("version", ""),
                          "fw_version": kv.get("firmware_version", ""), "bus_info": kv.get("bus_info", "")},
                         netdev)


_T = TypeVar("_T")


class _Hung(Exception):
    """An ethtool command timed out: the NIC's firmware may be stuck; ask it nothing more."""


def _command(host: Host, flag: str, netdev: str, timeout_s: float, notes: Notes,
             parse: Callable[[str, str], _T]) -> _T | None:
    """``ethtool <flag> <netdev>`` parsed, where the ioctl gave nothing; None (noted) when the command
    gave nothing usable. A timeout on a live host raises ``_Hung``."""
    source = f"ethtool {flag} {netdev}"
    res = host.run(["ethtool", flag, netdev], timeout_s=timeout_s)
    if not res.ok:
        notes.command(source, res)
        if res.timed_out and host.live:
            raise _Hung(netdev)
        return None
    try:
        return parse(res.text, netdev)
    except ValueError as exc:
        notes.missing(source, str(exc))
        return None


def _stats(host: Host, netdev: str, timeout_s: float, notes: Notes) -> EthtoolStats | None:
    try:
        pairs = host.ethtool_stats(netdev)
    except FirmwareBusy as exc:
        # The function's firmware gate stayed held (a read stuck in the driver): ``ethtool -S`` would
        # wait behind the same holder as long again, and then ``-i`` twice more. One wait per netdev.
        notes.missing(f"ethtool -S {netdev}", f"ETHTOOL_GSTATS {netdev}: {exc}")
        raise
    except Exception as exc:  # the ioctl path raises OSError / pyroute2 errors
        notes.missing(f"ethtool -S {netdev}", f"ETHTOOL_GSTATS {netdev}: {exc}")
        pairs = None
    if pairs is not None:
        out = []
        for k, v in pairs:
            n = to_int(v)
            if n is not None:
                out.append((str(k).strip(), n))
        return EthtoolStats(netdev=netdev, counters=tuple(out))
    return _command(host, "-S", netdev, timeout_s, notes, parse_ethtool_s)


def _info(host: Host, netdev: str, timeout_s: float, notes: Notes) -> DriverInfo | None:
    try:
        info = host.ethtool_drvinfo(netdev)
    except FirmwareBusy as exc:  # see _stats: not asked again by the command
        notes.missing(f"ethtool -i {netdev}", f"ETHTOOL_GDRVINFO {netdev}: {exc}")
        return None
    except Exception as exc:  # see _stats
        notes.missing(f"ethtool -i {netdev}", f"ETHTOOL_GDRVINFO {netdev}: {exc}")
        info = None
    if info is not None:
        return parse_drvinfo(info, netdev)
    return _command(host, "-i", netdev, timeout_s, notes, parse_ethtool_i)


def read_ethtool(host: Host, netdevs: Iterable[str], timeout_s: float = 10.0,
                 notes: Notes | None = None) -> tuple[tuple[EthtoolStats, ...], tuple[DriverInfo, ...]]:
    """Statistics and driver info of the given netdevs, one netdev at a time (never in parallel).

    Live, after one ethtool command times out the rest are skipped (docs/design.md §7: a task stuck in the
    driver cannot be killed, and every further firmware read would add another). A netdev whose PCI
    function's firmware gate stayed held (``FirmwareBusy``) costs one wait: neither its ``ethtool -S``
    text nor its driver info is asked after that.
    """
    notes = notes if notes is not None else Notes()
    stats, infos = [], []
    names = list(netdevs)
    for i, name in enumerate(names):
        try:
            st = _stats(host, name, timeout_s, notes)
            if st is not None:
                stats.append(st)
            di = _info(host, name, timeout_s, notes)
            if di is not None:
                infos.append(di)
        except FirmwareBusy as exc:
            # its function is held: the driver info waits behind the same holder, skipped with the statistics
            notes.missing(f"ethtool -i {name}", f"ETHTOOL_GDRVINFO {name}: {exc}")
        except _Hung as hung:
            for rest in names[i + 1:]:
                notes.missing(f"ethtool -S {rest}", f"skipped: ethtool on {hung} timed out (firmware may be hung)")
            break
    return tuple(stats), tuple(infos)
