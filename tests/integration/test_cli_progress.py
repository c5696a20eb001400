"""Progress of long work on a terminal only: ``capture``, ``bundles get`` of a large bundle and
``rollout --wait`` draw one line updated in place on stderr when stderr is a terminal (a pty here),
and leave no ``\\r`` line on a pipe."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import aiohttp

from tests.support.collector_env import ROOT, Collector
from tests.support.rollout import standin

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, body, write_tokens  # isort: skip


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "KUBERNETES_"))}
    return {**base, "PYTHONPATH": str(ROOT)}


def _on_pty(argv: list[str], timeout: float = 60) -> tuple[int, str, str]:
    """Run ``railscope argv`` with its stderr on a pty: (exit status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no \n -> \r\n on the way: a \r seen is one the program wrote
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", *argv], stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, cwd=ROOT, env=_env())
    os.close(slave)
    got = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not data:
                break
            got += data
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""  # type: ignore[union-attr]
    return proc.wait(timeout=30), out, got.decode("utf-8", "replace")


def _on_pipe(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=_env())


def test_capture_draws_its_progress_on_a_terminal_only(tmp_path: Path) -> None:
    root = tmp_path / "host"  # an empty node: every step runs, most find nothing
    root.mkdir()
    for name in ("tty", "pipe"):
        (tmp_path / name).mkdir()
    argv = ["capture", "--host-root", str(root), "--recorder-gap", "0", "--deadline", "20"]
    code, out, term = _on_pty([*argv, "-o", f"{tmp_path / 'tty'}/"])
    assert code == 0 and out.strip(), term
    assert "\rrailscope capture: " in term and " steps, " in term, term
    first, _, rest = term.partition("\n")
    assert first.startswith("\rrailscope capture: ") and "items (" in rest  # one line in place, then the summary
    res = _on_pipe([*argv, "-o", f"{tmp_path / 'pipe'}/"])
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and " steps, " not in res.stderr, res.stderr


async def _upload(url: str, raw: bytes) -> dict:
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/vnd.railscope.frames+msgpack"}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/bundles", data=raw, headers=headers) as r:
        assert r.status == 200
        return await r.json(content_type=None)


def test_bundles_get_of_a_large_bundle_draws_its_progress_on_a_terminal_only(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, str(tmp_path / "store"), "--cluster", HELLO.cluster, tokens=tokens).start()
    try:
        key = asyncio.run(_upload(col.url, body(HELLO, os.urandom(6 << 20))))["key"]
        argv = ["bundles", "--collector", col.url, "--token-file", tokens["operator_token_file"], "get", key]
        code, out, term = _on_pty([*argv, "-o", str(tmp_path / "tty")])
        assert code == 0 and "OK" in out, term
        assert "\r" in term and "MB of 6.3 MB" in term and "100%" in term, term
        assert term.endswith("\n") and term.count("\n") == 1, term  # one line, ended once
        res = _on_pipe([*argv, "-o", str(tmp_path / "pipe")])
        assert res.returncode == 0 and res.stderr == "", res.stderr
    finally:
        col.stop()


def test_rollout_wait_draws_one_updating_line_on_a_terminal(tmp_path: Path) -> None:
    with standin(tmp_path, "old-rail-generation") as (url, tf, _p):
        argv = ["rollout", "--api-server", url, "--api-token-file", tf, "--wait", "--timeout", "3s"]
        code, out, term = _on_pty(argv)
    assert code == 1 and "rollout: in progress" in out, out + term
    assert "\r" in term and "3/4 converged, 1 in-progress" in term, term
    assert term.count("\n") == 1, term  # the waiting was one line, not one per tick
