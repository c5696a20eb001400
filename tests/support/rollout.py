"""The Kubernetes API stand-in (``tests.support.kube_apiserver``) as a process of its own, for the tests
that run ``railscope rollout`` / ``snapshot --cluster`` as a whole process against it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ROOT", "command", "standin"]

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def standin(tmp: Path, scenario: str, nodes: int = 4) -> Iterator[tuple[str, str, subprocess.Popen]]:
    tf = tmp / "token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)
    p = subprocess.Popen([sys.executable, "-m", "tests.support.kube_apiserver", "--scenario", scenario, "--nodes",
                          str(nodes), "--token-file", str(tf), "--bookmark-interval", "0.2"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http"), url
        yield url, str(tf), p
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait(timeout=30)


def command(p: subprocess.Popen, cmd: str) -> str:
    p.stdin.write(cmd + "\n")  # type: ignore[union-attr]
    p.stdin.flush()  # type: ignore[union-attr]
    return p.stdout.readline().strip()  # type: ignore[union-attr]
