"""The live host: this machine, read-only, under ``--host-root`` (default ``/``).

Files are read below the root; commands run with argv, a timeout and a size cap; netlink is read
from the kernel of the network namespace the process is in (a DaemonSet pod uses the host network).
The agent never loads a module and never changes NIC state: this module only reads.
"""

from __future__ import annotations

import os
from typing import Any

from agent.host import CmdResult
from agent.host.paths import FilesDoor, RootedFS
from agent.host.runner import run_argv

__all__ = ["LiveHost"]


class LiveHost(FilesDoor):
    """This machine under ``host_root``; the files door is ``FilesDoor`` over a ``RootedFS``."""

    live = True
    image = None

    def __init__(self, host_root: str = "/", command_timeout_s: float = 10.0) -> None:
        if not os.path.isdir(host_root):
            from agent.host import HostError

            raise HostError(f"--host-root {host_root}: not a directory")
        self.host_root = os.path.abspath(host_root)
        # /proc/<pid>/root is the kernel's to follow: a container's root, not the host's (paths.RootedFS)
        self.fs = RootedFS(self.host_root, proc_roots=True)
        self.command_timeout_s = command_timeout_s
        self._nl: Any = None
        #: Why the last netlink read failed, for a person; None when it worked.
        self.links_error: str | None = None

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float | None = None,
            max_bytes: int = 8 << 20, keep: str = "head") -> CmdResult:
        return run_argv(argv, timeout_s=timeout_s or self.command_timeout_s, max_bytes=max_bytes, keep=keep)

    # -- netlink ----------------------------------------------------------------------------
    def _netlink(self) -> Any:
        if self._nl is None:
            from agent.host.netlink.dump import LinkReader

            self._nl = LinkReader()
        return self._nl

    def links(self) -> list[dict[str, Any]] | None:
        """The link dump; None (with ``links_error`` saying why) when netlink cannot be read."""
        try:
            links = self._netlink().dump()
        except OSError as exc:
            self.links_error = f"netlink: {exc.strerror or exc}"
            return None
        self.links_error = None
        return links

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        try:
            return self._netlink().stats(ifnames)
        except OSError as exc:
            self.links_error = f"netlink: {exc.strerror or exc}"
            return {}

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        from agent.host.ethtool import gstats

        return gstats(ifname)

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        from agent.host.ethtool import drvinfo

        return drvinfo(ifname)

    def close(self) -> None:
        if self._nl is not None:
            self._nl.close()
            self._nl = None

    def __enter__(self) -> LiveHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
