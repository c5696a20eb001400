"""The agent's own HTTP server has the collector's bounds (proto/connections.py): half-sent requests
from one address are capped and closed at the header deadline, and ``/healthz`` keeps answering
another address meanwhile. The agent runs as a process on loopback; its bounds come from the
environment (RAILSCOPE_HEADER_TIMEOUT, RAILSCOPE_MAX_CONNS_PER_PEER) as the chart sets them."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time

import pytest

from tests.support.collector_env import ROOT, _kill_group, free_port

pytestmark = pytest.mark.slow


def _healthz(port: int, source: str = "127.0.0.1", timeout: float = 2.0) -> int:
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    try:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        head = conn.recv(64)
    finally:
        conn.close()
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0


def _closed(held: list[socket.socket]) -> list[socket.socket]:
    """Those of ``held`` the server has closed by now (readable at end of stream, or reset)."""
    ready, _w, _x = select.select(held, [], [], 0)
    out = []
    for s in ready:
        try:
            if s.recv(1) == b"":
                out.append(s)
        except ConnectionError:
            out.append(s)
    return out


def test_half_sent_requests_are_capped_per_peer_and_closed_at_the_header_deadline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    env = {**os.environ, "RAILSCOPE_HEADER_TIMEOUT": "2s", "RAILSCOPE_MAX_CONNS_PER_PEER": "8",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "err", "wb"),
                            start_new_session=True)
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _healthz(port) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError("the agent never answered /healthz: " + (tmp_path / "err").read_text()[-2000:])
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=0.3)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")  # the headers never end
            held.append(s)
        time.sleep(0.3)
        refused = _closed(held)
        assert len(refused) == 32, f"{len(refused)} of 40 half-sent connections closed past a per-peer cap of 8"
        assert _healthz(port, source="127.0.0.2") == 200
        time.sleep(2.5)
        admitted = [s for s in held if s not in refused]
        assert len(_closed(admitted)) == 8, "half-sent requests outlived the header deadline"
        assert _healthz(port) == 200
    finally:
        for s in held:
            s.close()
        _kill_group(proc, 10)
