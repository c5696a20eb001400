"""A ``Host`` wrapper for the agent's worker threads.

It says what the thread is reading right now (the ``device`` of ``railscope_source_hung`` when a
read never returns), and it serialises the firmware-touching reads through the daemon's firmware
gate (``agent.host.firmware``): on mlx5, ``ETHTOOL_GSTATS`` is a synchronous firmware command, so
the counters sampler and a capture running at the same time must not read the same PCI function in
parallel (docs/design.md §3, "one at a time per PF"). Which commands touch firmware is the registry's word
(``Source.firmware_touching``).
"""

from __future__ import annotations

import posixpath
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, TypeVar

from agent.host import CmdResult, Host
from agent.host.firmware import BUSY, FirmwareBusy, FirmwareGate, function_of
from agent.readers.sources import touches_firmware

__all__ = ["Progress", "TrackedHost"]

T = TypeVar("T")


class Progress:
    """What a source's thread is reading right now (for the ``device`` label of a hung source)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._device = ""

    def set(self, device: str) -> None:
        with self._lock:
            self._device = device

    def get(self) -> str:
        with self._lock:
            return self._device


#: a port's counter files of an RDMA device (``/sys/class/infiniband/<dev>/ports/<n>/{hw_,}counters/<name>``)
_IB_COUNTER = re.compile(r"\A/sys/class/infiniband/([^/]+)/ports/\d+/(?:hw_)?counters/")

_BUSY = BUSY


def _device_of(argv: tuple[str, ...] | list[str]) -> str:
    for arg in argv[1:]:
        if arg.startswith(("pci/", "auxiliary/")):
            return arg
    return ""


class TrackedHost:
    """Forwards every door to ``inner``; notes the device in ``progress``; firmware reads through ``gate``."""

    def __init__(self, inner: Host, progress: Progress, gate: FirmwareGate,
                 firmware_wait_s: float = 30.0, hung: frozenset[tuple[str, str]] = frozenset(),
                 firmware: Callable[[Iterable[str]], bool] = touches_firmware) -> None:
        self.inner = inner
        #: (tool, device) of reads stuck in the agent's own samplers ("" device: every device).
        #: A capture skips them (docs/design.md §7): a second stuck task helps no one.
        self.hung = hung
        self.progress = progress
        self.gate = gate
        #: whether an argv reads firmware (the registry's declaration)
        self.firmware = firmware
        #: how long to wait for another thread's firmware read; past that the read is skipped,
        #: since that thread is most likely stuck in the driver
        self.firmware_wait_s = firmware_wait_s
        self.live = inner.live

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _skip(self, tool: str, device: str) -> str | None:
        if (tool, "") in self.hung or (tool, device) in self.hung:
            return f"{tool} {device}".strip() + ": a read of it is stuck in the agent (railscope_source_hung); skipped"
        return None

    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float = 10.0,
            max_bytes: int = 8 << 20, keep: str = "head") -> CmdResult:
        # ``keep`` only when not the default: a host made for a test may know no ``keep``.
        kw = {} if keep == "head" else {"keep": keep}
        fw = bool(argv) and self.firmware(argv)
        device = _device_of(argv) or (argv[-1] if fw else "")
        why = self._skip(argv[0], device) if argv else None
        if why:
            return CmdResult(tuple(argv), None, missing=True, reason=why)
        self.progress.set(device)
        try:
            if not fw:
                return self.inner.run(argv, timeout_s, max_bytes, **kw)
            with self.gate.hold(function_of(self.inner, device), self.firmware_wait_s) as got:
                if not got:
                    return CmdResult(tuple(argv), None, missing=True, reason=_BUSY)
                return self.inner.run(argv, timeout_s, max_bytes, **kw)
        finally:
            self.progress.set("")

    # -- files: the inner host's, untracked (only commands, ethtool and RDMA counter reads are) -----
    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        m = _IB_COUNTER.match(path)
        if m is None:
            return self.inner.read_text(path, max_bytes)
        # mlx5_ib answers a port's counters / hw_counters files with firmware commands (QUERY_Q_COUNTER,
        # QUERY_VPORT_COUNTER, PPCNT: drivers/infiniband/hw/mlx5/counters.c): one at a time per PCI
        # function with the statistics, like ETHTOOL_GSTATS. Past the wait the file reads as missing.
        real = self.inner.realpath(f"/sys/class/infiniband/{m.group(1)}/device")
        key = posixpath.basename(real) if real and real.startswith("/sys/devices/pci") else m.group(1)
        with self.gate.hold(key, self.firmware_wait_s) as got:
            return self.inner.read_text(path, max_bytes) if got else None

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        return self.inner.read_bytes(path, max_bytes)

    def listdir(self, path: str) -> list[str] | None:
        return self.inner.listdir(path)

    def readlink(self, path: str) -> str | None:
        return self.inner.readlink(path)

    def realpath(self, path: str) -> str | None:
        return self.inner.realpath(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def glob(self, pattern: str) -> list[str]:
        return self.inner.glob(pattern)

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        return self.inner.walk(path, limit)

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        return self.inner.copy_tail(path, max_bytes, out)

    def links(self) -> list[dict[str, Any]] | None:
        return self.inner.links()

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        return self.inner.link_stats(ifnames)

    def _firmware_read(self, ifname: str, read: Callable[[str], T]) -> T:
        """An ioctl that is a firmware command on mlx5: skipped when stuck, one at a time per function."""
        why = self._skip("ethtool", ifname)
        if why:
            raise OSError(why)
        self.progress.set(ifname)
        try:
            with self.gate.hold(function_of(self.inner, ifname), self.firmware_wait_s) as got:
                if not got:
                    raise FirmwareBusy(_BUSY)
                return read(ifname)
        finally:
            self.progress.set("")

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        return self._firmware_read(ifname, self.inner.ethtool_stats)

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        return self._firmware_read(ifname, self.inner.ethtool_drvinfo)

    def close(self) -> None:
        self.inner.close()
