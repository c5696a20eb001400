"""A real ``railscope agent`` in the node namespace of ``tests.support.netns.RailNetns``, and what the live
tests ask of it: its HTTP answers, its series, its events, a cable pull."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from tests.support.netns import RailNetns

PORT = 9841  # the agent's default port, inside the node namespace


T = TypeVar("T")


#: the data endpoints (/v1/...) answer over TCP only with the token of --data-token-file
TOKEN = "netns-data-token-0123456789"


def get(url: str, timeout: float = 10.0, token: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out.append((dict(s.labels), s.value))
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    for lab, val in samples(text, name):
        if all(lab.get(k) == v for k, v in labels.items()):
            return val
    return None


@dataclass
class RunningAgent:
    rails: RailNetns
    addr: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    extra_cleanup: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{PORT}"

    def get(self, path: str, timeout: float = 10.0, token: str | None = TOKEN) -> tuple[int, bytes]:
        return get(self.url + path, timeout, token)

    def metrics(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200
        return body.decode()

    def events(self) -> list[dict]:
        status, body = self.get("/v1/events")
        assert status == 200
        return json.loads(body)["events"]

    def logs(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the agent exited {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                status, _ = self.get("/readyz", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the agent never became ready:\n{self.log_path.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


StartAgent = Callable[..., RunningAgent]


def flap(rails: RailNetns, rail: int) -> float:
    """Pull the rail's cable and put it back; returns when the carrier was lost (unix s)."""
    rails.set_peer(rail, "down")
    lost = time.time()
    rails.set_peer(rail, "up")
    return lost


def wait_for(pred: Callable[[], T], timeout: float, step: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            return got
        time.sleep(step)


def spooled(spool: Path) -> list[Path]:
    return sorted(p for p in spool.glob("*.tar.gz") if Path(str(p) + ".sha256").exists())
