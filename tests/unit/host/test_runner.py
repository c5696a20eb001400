"""run_argv: missing tools, exit codes, timeouts that kill the whole process group, size caps."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from agent.host.runner import run_argv


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (gone, or a zombie waiting for its new parent to reap it)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_missing_tool() -> None:
    r = run_argv(["railscope-no-such-tool-xyz", "-j"])
    assert r.missing and not r.available and r.rc is None
    assert r.why() == "railscope-no-such-tool-xyz: command not found"


def test_non_zero_exit_keeps_output() -> None:
    r = run_argv([sys.executable, "-c", "import sys; print('out'); print('bad thing', file=sys.stderr); sys.exit(3)"])
    assert r.available and not r.ok and r.rc == 3
    assert r.stdout == b"out\n" and r.why().endswith(": exit 3: bad thing")


def test_environment_is_c_locale() -> None:
    r = run_argv([sys.executable, "-c", "import os; print(os.environ.get('LC_ALL'))"])
    assert r.ok and r.text.strip() == "C"


@pytest.mark.slow
def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    r = run_argv([sys.executable, "-c", script], timeout_s=2.0)
    assert r.timed_out and r.rc is None and not r.available
    assert r.stdout == b"started\n"
    assert "timed out after 2s" in r.why()
    child = int(pidfile.read_text())
    assert _gone(child), "the grandchild survived the timeout"


def test_output_over_cap_is_truncated() -> None:
    big = [sys.executable, "-c", "import sys; sys.stdout.write('a' * 50000 + 'END')"]
    head = run_argv(big, max_bytes=1000)
    assert head.ok and head.truncated and head.stdout == b"a" * 1000
    tail = run_argv(big, max_bytes=1000, keep="tail")
    assert tail.truncated and len(tail.stdout) == 1000 and tail.stdout.endswith(b"END")
    small = run_argv([sys.executable, "-c", "print('x')"], max_bytes=1000)
    assert not small.truncated


def test_never_a_shell() -> None:
    r = run_argv(["echo", "$HOME; rm -rf /nonexistent"])
    assert r.ok and r.stdout == b"$HOME; rm -rf /nonexistent\n"
    assert os.path.exists("/")


# A tool that closes its output before it exits: the runner waits for the exit itself (its pidfd),
# within the same timeout, and keeps no descriptor behind.
_CLOSES_EARLY = ("import os, sys, time; os.close(1); os.close(2); time.sleep(float(sys.argv[1])); "
                 "sys.exit(int(sys.argv[2]))")


def test_exit_after_output_closed_is_waited_for() -> None:
    r = run_argv([sys.executable, "-c", _CLOSES_EARLY, "0.3", "5"], timeout_s=10)
    assert not r.timed_out and r.rc == 5
    assert r.duration_s >= 0.3


def test_running_on_after_output_closed_times_out() -> None:
    t = time.monotonic()
    r = run_argv([sys.executable, "-c", _CLOSES_EARLY, "30", "0"], timeout_s=0.5)
    assert r.timed_out and r.rc is None
    assert time.monotonic() - t < 5


def test_no_descriptor_left_behind() -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert run_argv(["true"]).rc == 0
    assert len(os.listdir("/proc/self/fd")) == before


def test_without_pidfd_the_exit_is_still_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")  # a kernel before 5.3

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    r = run_argv([sys.executable, "-c", _CLOSES_EARLY, "0.2", "4"], timeout_s=10)
    assert not r.timed_out and r.rc == 4
    r = run_argv([sys.executable, "-c", _CLOSES_EARLY, "30", "0"], timeout_s=0.5)
    assert r.timed_out


def test_the_exit_wakes_the_wait_without_a_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen.wait(timeout) polls with sleeps from 0.5 ms up; the pidfd wait reaps an exited tool at once
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    for _ in range(20):
        assert run_argv([sys.executable, "-c", "pass"]).rc == 0
    assert slept == []


@pytest.mark.parametrize("timeout_s", [3_000_000.0, float("inf")])
def test_a_timeout_beyond_what_poll_takes_still_works(timeout_s: float) -> None:
    r = run_argv([sys.executable, "-c", "import sys; sys.exit(6)"], timeout_s=timeout_s)
    assert r.rc == 6 and not r.timed_out


def test_a_traced_tool_is_given_up_at_the_deadline_not_when_its_tracer_lets_go(tmp_path: Path) -> None:
    """A tool a debugger traces (an operator's strace -p on a hung ethtool) has exited, its pidfd is
    readable, but its parent may not reap it until the tracer detaches: the deadline still holds."""
    import ctypes
    import glob
    import subprocess
    import threading

    marker = "0.517"
    got: dict[str, object] = {}

    def go() -> None:
        t = time.monotonic()
        got["r"] = run_argv(["sleep", marker], timeout_s=2.0)
        got["s"] = time.monotonic() - t

    th = threading.Thread(target=go)
    th.start()
    pid, deadline = None, time.monotonic() + 5
    while pid is None and time.monotonic() < deadline:
        for f in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            for c in Path(f).read_text().split():
                try:
                    if Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[1:2] == [marker.encode()]:
                        pid = int(c)
                except (OSError, IndexError):
                    pass
    assert pid is not None
    ready = tmp_path / "seized"
    tracer = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, pathlib, sys, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"ok = libc.ptrace(0x4206, {pid}, None, None) == 0\n"  # PTRACE_SEIZE
        f"pathlib.Path({str(ready)!r}).write_text('1' if ok else '0')\n"
        "time.sleep(8 if ok else 0)\n")])
    try:
        while not ready.exists() or not ready.read_text():
            time.sleep(0.01)
        if ready.read_text() != "1":
            th.join()
            pytest.skip(f"ptrace refused here ({ctypes.get_errno()})")
        th.join(10)
        r = got["r"]
        assert r.timed_out and r.rc is None  # type: ignore[attr-defined]
        assert got["s"] < 4.0  # type: ignore[operator]
    finally:
        tracer.kill()
        tracer.wait()
        th.join(10)
