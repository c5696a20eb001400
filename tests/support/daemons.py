"""A daemon as a node runs one: its executable at its install path as the process sees it (the
container case: a mount namespace of its own where a copy of a binary is bound at that path, so
``/proc/<pid>/exe`` reads the install path), in this process's cgroup. Needs root and unshare(1);
the node's own files are never touched (the mounts live in the child's namespace alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["INSTALL", "can_install", "in_user_session", "install"]

#: run under ``unshare --mount``: a tmpfs on the install directory (in the new namespace only), the
#: source bound on an empty file there, then exec'd from that path
INSTALL = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "src, path, *argv = sys.argv[1:]\n"
    "def mount(what, where, kind, flags):\n"
    "    if libc.mount(what, where.encode(), kind, flags, None) != 0:\n"
    "        raise OSError(ctypes.get_errno(), 'mount ' + where)\n"
    "fd = os.open(src, os.O_PATH)\n"  # held before the tmpfs hides a source in that directory
    "mount(b'tmpfs', os.path.dirname(path), b'tmpfs', 0)\n"
    "open(path, 'wb').close()\n"
    "mount(f'/proc/self/fd/{fd}'.encode(), path, None, 4096)\n"  # MS_BIND
    "os.close(fd)\n"
    "os.execv(path, [path, *argv])\n")


def can_install() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def in_user_session() -> bool:
    """Whether this process runs in a user's session (its children would never be daemons)."""
    from agent.readers.processes import system_cgroup

    return not system_cgroup(Path("/proc/self/cgroup").read_text())


def install(src: str | Path, path: str, *argv: str, env: dict[str, str] | None = None,
            stdout: int | None = None) -> subprocess.Popen[bytes]:
    """Run ``src`` as if installed at ``path`` (``argv`` its arguments); the Popen's pid is its own
    (unshare without --fork execs in place)."""
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", INSTALL,
                             str(src), path, *argv], env=env, stdout=stdout)
