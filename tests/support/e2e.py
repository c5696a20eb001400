"""The real programs of the end-to-end tests (Prometheus, Alertmanager, the collector) as processes, and
the tokens those tests give them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

__all__ = ["AGENT_TOKEN", "ALERTING_TOKEN", "OPERATOR_TOKEN", "Proc", "need"]

AGENT_TOKEN = "e2e-agent-token-0123456789abcdef"
ALERTING_TOKEN = "e2e-alerting-token-0123456789abcdef"
OPERATOR_TOKEN = "e2e-operator-token-0123456789abcdef"


def need(path: str) -> str:
    found = shutil.which(path) or (path if os.access(path, os.X_OK) else None)
    if not found:
        pytest.skip(f"{path} is not installed (Debian packages prometheus, prometheus-alertmanager)")
    return found


class Proc:
    url = ""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]
