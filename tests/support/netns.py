"""Real network namespaces with veth "rails" for the live host tests (the ``rails`` fixture of
tests/integration/conftest.py builds them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

RAILS = 2


def ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class RailNetns:
    node: str  # the namespace the code under test runs in
    switch: str  # the namespace of the rails' veth peers

    def exec(self, argv: list[str], ns: str | None = None, timeout: float = 120,
             check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run argv inside a namespace (default: the node's)."""
        res = subprocess.run(["ip", "netns", "exec", ns or self.node, *argv], capture_output=True,
                             text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"{argv} exited {res.returncode}: {res.stderr.strip()}")
        return res

    def python(self, code: str, ns: str | None = None, timeout: float = 120) -> object:
        """Run Python inside a namespace; it prints one JSON document, returned decoded."""
        res = self.exec([sys.executable, "-c", code], ns=ns, timeout=timeout)
        if res.returncode != 0:
            raise AssertionError(f"child failed ({res.returncode}):\n{res.stderr}")
        return json.loads(res.stdout)

    def railscope(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``railscope ARGS`` as a whole process inside the node namespace."""
        return self.exec([sys.executable, "-m", "agent.cli", *args], timeout=timeout)

    def set_peer(self, rail: int, state: str) -> None:
        """Set the rail's peer up or down, and wait until the rail's operstate follows.

        The carrier flips at once, but operstate is updated by the kernel's linkwatch work, up to
        a second later (net/core/link_watch.c).
        """
        ip("-n", self.switch, "link", "set", f"peer{rail}", state)
        # Without carrier a veth is DOWN, or LOWERLAYERDOWN on kernels that judge it by its peer.
        want = ("UP",) if state == "up" else ("DOWN", "LOWERLAYERDOWN")
        deadline = time.monotonic() + 10
        while True:
            ref = json.loads(ip("-n", self.node, "-j", "link", "show", f"net_rail{rail}").stdout)[0]
            if ref["operstate"] in want:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"net_rail{rail} stayed {ref['operstate']}, expected {want}")
            time.sleep(0.05)

    def send_udp(self, rail: int, count: int) -> None:
        """``count`` datagrams from the switch side to the rail (they arrive on ``net_rail<rail>``)."""
        code = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for _ in range({count}):\n    s.sendto(b'x' * 64, ('10.99.{rail}.1', 9))\n"
                "print('null')")
        self.python(code, ns=self.switch)


def netns_available() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = f"rs-probe-{uuid.uuid4().hex[:8]}"
    try:
        res = ip("netns", "add", probe, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"ip netns unavailable: {exc}"
    if res.returncode != 0:
        return f"ip netns add failed: {res.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None
