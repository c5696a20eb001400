"""The host seam (docs/design.md §2): everything the agent knows about a node comes through one ``Host``.

Three doors: files (paths as seen on the node), commands (argv, never a shell string) and netlink
(the link dump, in the ``netlink/links.json`` schema). A live host reads the machine under a root
directory; a recorded host reads a node image (a directory or a ``.tar.gz``). Readers only ever see
this interface, so the same readers and checks run live, on a bundle, and on a fixture.

This module imports no reader, check or metric.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agent.host.image import Manifest

__all__ = [
    "CmdResult",
    "FirmwareBusy",
    "Host",
    "HostError",
    "ImageDoor",
    "slug",
]

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]")


def slug(argv: list[str] | tuple[str, ...]) -> str:
    """File stem of a recorded command: argv joined by ``_``, other characters replaced by ``-``.

    >>> slug(["devlink", "-j", "dev", "param", "show"])
    'devlink_-j_dev_param_show'
    >>> slug(["devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.0"])
    'devlink_-j_dev_eswitch_show_pci-0000-0c-00.0'
    """
    return _SLUG_BAD.sub("-", "_".join(argv))


class HostError(Exception):
    """A host cannot be opened at all (not a directory, not a node image, unreadable archive)."""


class FirmwareBusy(OSError):
    """A firmware read skipped: another read of the same PCI function held the firmware gate past the
    wait (``agent.host.firmware``). A reader asks that function nothing more by another door in the same
    read: it would wait as long again behind the same holder."""


@dataclass(frozen=True, slots=True)
class CmdResult:
    """What one command gave.

    ``available`` is False when the command could not give an answer: the tool is missing, it
    timed out, or (recorded) the image has no record of it. A non-zero ``rc`` with output is
    still *available*: the readers decide what the text means (devlink answers ``Operation not
    supported`` on a VF, which is a fact, not an error of ours).
    """

    argv: tuple[str, ...]
    rc: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    missing: bool = False  # tool not installed / command not recorded
    reason: str | None = None

    @property
    def available(self) -> bool:
        return not self.missing and not self.timed_out and self.rc is not None

    @property
    def ok(self) -> bool:
        return self.available and self.rc == 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def why(self) -> str:
        """One line a person can read: why this command gave no usable answer."""
        if self.reason:
            return self.reason
        if self.missing:
            return f"{self.argv[0]}: not available"
        if self.timed_out:
            return f"{' '.join(self.argv)}: timed out after {self.duration_s:.1f}s"
        err = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{' '.join(self.argv)}: exit {self.rc}" + (f": {err[-1]}" if err else "")


class ImageDoor(Protocol):
    """What only a node image has: its manifest and the files it carries beside the three doors
    (``events.json``, ``recorder.jsonl``). ``Host.image`` is None on a live host."""

    #: the validated manifest; None when the image has none (a hand-made fixture)
    manifest: Manifest | None
    #: ``(part, why)`` of what the image holds but could not be read (a bad manifest field, a
    #: member left out): for the diagnosis's ``unavailable``
    problems: tuple[tuple[str, str], ...]

    def file(self, name: str) -> bytes | None:
        """A file at the image root (``events.json``), or None when the image has none."""


@runtime_checkable
class Host(Protocol):
    """The three doors. Paths are absolute paths *as on the node* (``/sys/class/net``)."""

    #: True on a live node; False on a node image.
    live: bool
    #: the image door: None on a live host
    image: ImageDoor | None
    #: why the last ``links()`` gave None, for a person; None when it worked
    links_error: str | None

    # -- files ------------------------------------------------------------------------------
    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        """The file's bytes, or None when it does not exist or cannot be read."""

    def listdir(self, path: str) -> list[str] | None:
        """Sorted entry names, or None when the directory does not exist."""

    def readlink(self, path: str) -> str | None:
        """The symlink's target as stored (usually relative), or None."""

    def realpath(self, path: str) -> str | None:
        """The node path with every symlink resolved (inside the host root), or None."""

    def exists(self, path: str) -> bool: ...

    def glob(self, pattern: str) -> list[str]:
        """Node paths matching a shell glob, sorted."""

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        """Node paths of all under the directory ``path`` that is not a directory itself (files, and
        symlinks: one to a directory is not followed), about ``limit`` at most; [] when no directory."""

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        """Write the file's last ``max_bytes`` into ``out``, streamed (a log of gigabytes never sits
        in memory); (bytes written, whether the head was cut). ``OSError`` when it cannot be read,
        ``NotRegularFile`` for a FIFO, socket or device (never opened)."""

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float = 10.0,
            max_bytes: int = 8 << 20, keep: str = "head") -> CmdResult:
        """Run argv (no shell) or replay its record. Never raises for a failing command. Past
        ``max_bytes`` stdout keeps its ``head`` (JSON the readers parse) or its ``tail`` (a log)."""

    # -- netlink ----------------------------------------------------------------------------
    def links(self) -> list[dict[str, Any]] | None:
        """The link dump in the ``netlink/links.json`` schema (without statistics in bulk).

        None when netlink is not available (an image without ``netlink/links.json``).
        """

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        """stats64 of the named links only (docs/design.md §3: statistics for rails, not in bulk)."""

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        """Live: ETHTOOL_GSTATS through the ioctl. Recorded: None (the reader parses ``ethtool -S``)."""

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        """Live: ETHTOOL_GDRVINFO through the ioctl. Recorded: None (the reader parses ``ethtool -i``)."""

    def close(self) -> None: ...
