"""Run one command safely: argv only, ``LC_ALL=C``, a timeout that kills the process group, a size cap.

Used by the live host for the readers' commands and by capture for its plug-ins' steps. Nothing here
decides *what* to run; the deny-list lives with the capture plug-ins.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections import deque

from agent.host import CmdResult

__all__ = ["run_argv"]

_CHUNK = 65536


class _Tail:
    """Keeps at most ``cap`` bytes: the head when ``keep='head'``, else the tail."""

    def __init__(self, cap: int, keep: str) -> None:
        self.cap = cap
        self.keep = keep
        self.parts: deque[bytes] = deque()
        self.size = 0
        self.truncated = False

    def add(self, data: bytes) -> None:
        if self.keep == "head":
            room = self.cap - self.size
            if room <= 0:
                self.truncated = True
                return
            if len(data) > room:
                data = data[:room]
                self.truncated = True
            self.parts.append(data)
            self.size += len(data)
            return
        self.parts.append(data)
        self.size += len(data)
        while self.size > self.cap and self.parts:
            self.truncated = True
            over = self.size - self.cap
            first = self.parts[0]
            if len(first) <= over:
                self.parts.popleft()
                self.size -= len(first)
            else:
                self.parts[0] = first[over:]
                self.size -= over

    def value(self) -> bytes:
        return b"".join(self.parts)


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    # A task stuck in the driver (D state) ignores SIGKILL until the kernel lets go; never block
    # the caller on it, but do not leave a zombie behind once it finally exits.
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def _pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when ``pid`` exits (Linux 5.3+), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait_exit(proc: subprocess.Popen[bytes], pidfd: int | None, deadline: float) -> bool:
    """Reap ``proc`` by ``deadline`` (``time.monotonic()``); False when it is still running then.

    A tool closes its output as it exits, a moment before it can be reaped. ``Popen.wait(timeout)``
    polls for that moment with sleeps that start at 0.5 ms and double: about 1 ms of wall per
    command, which the eight ``ethtool -m`` of one optics pass paid in series. Waiting on the
    process's pidfd wakes at the exit itself; the reap after it still keeps to the deadline (a
    process that a debugger traces turns the pidfd readable before its parent may reap it).
    """
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # poll takes milliseconds as a C int: wait in slices, so any timeout (even inf) holds
            if poller.poll(min(left, 1.0) * 1000.0):
                break
    try:
        # exited: the first non-blocking waitpid of Popen.wait reaps it, no sleep
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def run_argv(
    argv: list[str] | tuple[str, ...],
    timeout_s: float = 10.0,
    max_bytes: int = 8 << 20,
    keep: str = "head",
    env: dict[str, str] | None = None,
    nice: int = 0,
) -> CmdResult:
    """Run ``argv`` and return what it gave. Never raises for the command's own failure.

    ``keep`` says which end survives the size cap: ``head`` for JSON the readers parse (a cut tail
    is detected by the parser), ``tail`` for logs in a capture (the newest lines matter most).
    """
    argv = tuple(str(a) for a in argv)
    if not argv:
        raise ValueError("empty argv")
    run_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}
    # The OVS tools find db.sock and ovs-vswitchd's control socket through OVS_RUNDIR (default: the
    # run directory they were built with). It passes through so that an OVS running elsewhere is
    # the one railscope reads; agent.readers.ovs.db_sockets looks there too. Unset: unchanged.
    if os.environ.get("OVS_RUNDIR"):
        run_env["OVS_RUNDIR"] = os.environ["OVS_RUNDIR"]
    if env:
        run_env.update(env)
    start = time.monotonic()

    def _preexec() -> None:  # pragma: no cover - runs in the child
        if nice:
            os.nice(nice)

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=run_env,
            start_new_session=True,  # its own process group, so a timeout kills its children too
            close_fds=True,
            preexec_fn=_preexec if nice else None,
        )
    except FileNotFoundError:
        return CmdResult(argv, None, missing=True, reason=f"{argv[0]}: command not found")
    except PermissionError as exc:
        return CmdResult(argv, None, missing=True, reason=f"{argv[0]}: {exc.strerror}")
    except OSError as exc:
        return CmdResult(argv, None, missing=True, reason=f"{argv[0]}: {exc}")

    pidfd = _pidfd(proc.pid)
    out = _Tail(max_bytes, keep)
    err = _Tail(min(max_bytes, 1 << 20), "tail")
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    deadline = start + timeout_s
    timed_out = False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                data = os.read(key.fd, _CHUNK)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                key.data.add(data)
        if not timed_out:
            timed_out = not _wait_exit(proc, pidfd, deadline)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        if timed_out:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                _reap_later(proc)
        proc.stdout.close()
        proc.stderr.close()
    duration = time.monotonic() - start
    return CmdResult(
        argv,
        None if timed_out else proc.returncode,
        out.value(),
        err.value(),
        duration_s=duration,
        timed_out=timed_out,
        truncated=out.truncated,
        reason=f"{' '.join(argv)}: timed out after {timeout_s:g}s" if timed_out else None,
    )
