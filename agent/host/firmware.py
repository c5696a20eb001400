"""The firmware gate (docs/design.md §3, §7): firmware-touching reads of one PCI function, one at a time.

On mlx5, ``ETHTOOL_GSTATS``, ``ethtool -m`` (MCIA), ``ethtool -a`` (PFCC), ``ethtool --show-fec`` (PPLM),
``dcb ... show`` (QETCR, PFCC, PBMC), ``devlink dev info`` (MCQI / MCQS) and ``devlink health diagnose`` are
synchronous firmware commands: two of them in parallel on one function queue in the driver, and one stuck there
cannot be killed. The running agent holds one ``FirmwareGate``; its 1 s sampler and every capture it
makes (the replay readers and the plug-ins' firmware steps alike) take the lock of the same function from
it. Which reads touch firmware is declared where they are: ``Source.firmware_touching`` in the
registry for the sources' reads, ``Command.firmware`` in a capture plug-in for its steps.

A lock is keyed by the function's PCI address; a device that is on no PCI function (a veth, a netdev
of another bus) is its own key.

A read that found its function's lock held past the wait is skipped with ``FirmwareBusy`` (an ioctl) or
a missing result whose reason is ``BUSY`` (a command). A reader takes that as the answer for the
function: it does not ask the same function again by another door in the same read (the ``ethtool -S``
text after ``ETHTOOL_GSTATS``), which would wait as long once more behind the same stuck holder.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from agent.host import FirmwareBusy, Host

__all__ = ["BUSY", "FirmwareBusy", "FirmwareGate", "function_of"]

#: why a firmware read was skipped: its function's lock stayed held past the wait
BUSY = "another firmware read is still running (stuck in the driver?): skipped"


def function_of(host: Host, device: str) -> str:
    """The PCI function a firmware read of ``device`` reaches: ``pci/<bdf>`` (a devlink handle) is
    ``<bdf>``; a netdev is the function its sysfs ``device`` link resolves to; anything else, itself."""
    if device.startswith("pci/"):
        return device[len("pci/"):]
    if not device or "/" in device:
        return device
    real = host.realpath(f"/sys/class/net/{device}/device")
    if real and real.startswith("/sys/devices/pci"):
        return posixpath.basename(real)
    return device


class FirmwareGate:
    """One re-entrant lock per PCI function: a capture step that holds it may read through a host
    that takes it again (the daemon's worker host) without waiting for itself."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def _lock(self, key: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
            return lock

    def acquire(self, key: str, timeout: float) -> bool:
        """Take ``key``'s lock, waiting at most ``timeout`` seconds (the holder may be stuck in the driver)."""
        return self._lock(key).acquire(timeout=max(0.0, timeout))

    def release(self, key: str) -> None:
        self._lock(key).release()

    @contextmanager
    def hold(self, key: str, timeout: float) -> Iterator[bool]:
        """``with gate.hold(key, t) as got:`` — ``got`` False when another read held it past ``t``."""
        got = self.acquire(key, timeout)
        try:
            yield got
        finally:
            if got:
                self.release(key)
