"""ethtool ioctls of the live host: driver statistics (``ethtool -S``) and driver info (``ethtool -i``).

Plain ``SIOCETHTOOL`` on an ``AF_INET`` datagram socket with ``fcntl.ioctl`` + ``struct``, as the
``ethtool`` binary does; the structures are those of include/uapi/linux/ethtool.h. The ethtool netlink
API has no equivalent of the driver's private statistics (ETHTOOL_GSTATS), so the ioctl stays.
Read-only: only ``G*`` (get) commands are ever sent.

On mlx5 ETHTOOL_GSTATS is a synchronous firmware read (docs/design.md §3): the callers read one interface
at a time and never representors by default.
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
from array import array

__all__ = ["drvinfo", "format_drvinfo", "format_gstats", "gstats"]

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x00000003
ETHTOOL_GSTRINGS = 0x0000001B
ETHTOOL_GSTATS = 0x0000001D
ETHTOOL_GSSET_INFO = 0x00000037
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16

# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
# erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len.
_DRVINFO = struct.Struct("=I32s32s32s32s32s12xIIIII")
# struct ethtool_sset_info: cmd, reserved, sset_mask (u64), data[] (one u32 per set in the mask).
_SSET_INFO = struct.Struct("=IIQI")
# struct ethtool_gstrings: cmd, string_set, len, data[len * ETH_GSTRING_LEN].
_GSTRINGS = struct.Struct("=III")
# struct ethtool_stats: cmd, n_stats, data[n_stats] (u64).
_GSTATS = struct.Struct("=II")
_U32 = struct.Struct("=I")

# The errors that mean "this interface has no such thing", not "something broke".
_NOT_AVAILABLE = (errno.ENODEV, errno.ENXIO, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL,
                  errno.EPERM, errno.EACCES, errno.ENOENT)


def _buffer(head: bytes, size: int) -> array[int]:
    """A command buffer the kernel writes into; an ``array`` has a fixed address (``buffer_info``)
    and costs no ctypes import."""
    return array("B", head.ljust(size, b"\0"))


def _ioctl(sock: socket.socket, ifname: bytes, buf: array[int]) -> None:
    # struct ifreq: ifr_name[IFNAMSIZ] then the union, whose ifr_data points at our command buffer.
    ifreq = struct.pack(f"{IFNAMSIZ}sP", ifname, buf.buffer_info()[0]).ljust(40, b"\0")
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def _name(ifname: str) -> bytes | None:
    raw = ifname.encode()
    return raw if 0 < len(raw) < IFNAMSIZ and b"\0" not in raw else None


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def _n_stats(sock: socket.socket, name: bytes) -> int:
    buf = _buffer(_SSET_INFO.pack(ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0), _SSET_INFO.size)
    _ioctl(sock, name, buf)
    _cmd, _res, mask, count = _SSET_INFO.unpack_from(buf)
    return count if mask & (1 << ETH_SS_STATS) else 0


def _room(count: int) -> int:
    # GSTRINGS and GSTATS write as many entries as the driver counts *now*, whatever count we pass
    # in (net/ethtool/ioctl.c ethtool_get_strings / ethtool_get_stats); a channel change between
    # our calls could make it more. Leave generous room, and discard an answer of another length.
    return max(2 * count, count + 1024)


def _strings(sock: socket.socket, name: bytes, count: int) -> list[str] | None:
    buf = _buffer(_GSTRINGS.pack(ETHTOOL_GSTRINGS, ETH_SS_STATS, count),
                  _GSTRINGS.size + _room(count) * ETH_GSTRING_LEN)
    _ioctl(sock, name, buf)
    if _GSTRINGS.unpack_from(buf)[2] != count:
        return None
    raw = buf.tobytes()
    base = _GSTRINGS.size
    return [_cstr(raw[base + i * ETH_GSTRING_LEN: base + (i + 1) * ETH_GSTRING_LEN]) for i in range(count)]


def _values(sock: socket.socket, name: bytes, count: int) -> list[int] | None:
    buf = _buffer(_GSTATS.pack(ETHTOOL_GSTATS, count), _GSTATS.size + _room(count) * 8)
    _ioctl(sock, name, buf)
    n = _GSTATS.unpack_from(buf)[1]
    if n != count:
        return None
    return list(struct.unpack_from(f"={n}Q", buf, _GSTATS.size))


def gstats(ifname: str) -> list[tuple[str, int]] | None:
    """``ethtool -S``: (name, value) in driver order; None when the interface has no statistics.

    None also when it does not exist or the driver says EOPNOTSUPP. Names are NUL- and
    whitespace-stripped (some drivers pad them).
    """
    name = _name(ifname)
    if name is None:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            for _ in range(3):
                count = _n_stats(sock, name)
                if count <= 0:
                    return None
                keys = _strings(sock, name, count)
                if keys is None:
                    continue
                vals = _values(sock, name, count)
                if vals is not None:
                    return list(zip(keys, vals, strict=True))
            return None  # the set of counters kept changing under us (channels reconfigured)
    except OSError as exc:
        if exc.errno in _NOT_AVAILABLE:
            return None
        raise


def drvinfo(ifname: str) -> dict[str, str] | None:
    """``ethtool -i``: driver, version, fw_version, bus_info (+ erom_version and the supports-* words).

    None when the interface does not exist or the driver does not answer.
    """
    name = _name(ifname)
    if name is None:
        return None
    buf = _buffer(_U32.pack(ETHTOOL_GDRVINFO), _DRVINFO.size)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            _ioctl(sock, name, buf)
    except OSError as exc:
        if exc.errno in _NOT_AVAILABLE:
            return None
        raise
    (_cmd, driver, version, fw, bus, erom,
     n_priv, n_stats, testinfo, eedump, regdump) = _DRVINFO.unpack_from(buf)

    def yes(n: int) -> str:
        return "yes" if n else "no"

    return {
        "driver": _cstr(driver),
        "version": _cstr(version),
        "fw_version": _cstr(fw),
        "erom_version": _cstr(erom),
        "bus_info": _cstr(bus),
        # ethtool(8) derives these words from the counts in the same answer (ethtool.c dump_drvinfo).
        "supports_statistics": yes(n_stats),
        "supports_test": yes(testinfo),
        "supports_eeprom_access": yes(eedump),
        "supports_register_dump": yes(regdump),
        "supports_priv_flags": yes(n_priv),
    }


def format_gstats(stats: list[tuple[str, int]]) -> str:
    """The text ``ethtool -S`` prints for these statistics."""
    return "NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in stats)


def format_drvinfo(info: dict[str, str]) -> str:
    """The text ``ethtool -i`` prints for this driver info (keys it lacks are left out)."""
    rows = (("driver", "driver"), ("version", "version"), ("firmware-version", "fw_version"),
            ("expansion-rom-version", "erom_version"), ("bus-info", "bus_info"),
            ("supports-statistics", "supports_statistics"), ("supports-test", "supports_test"),
            ("supports-eeprom-access", "supports_eeprom_access"),
            ("supports-register-dump", "supports_register_dump"),
            ("supports-priv-flags", "supports_priv_flags"))
    return "".join(f"{label}: {info[key]}\n" for label, key in rows if key in info)
