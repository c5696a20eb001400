"""Real network namespaces with veth "rails" for the live host tests.

``rails`` builds two namespaces: the node (``net_rail0``, ``net_rail1``, MTU 9000, addresses
10.99.<i>.1/24) and a switch side holding each rail's veth peer (``peer0``, ``peer1``), so setting a
peer down drops the rail's carrier as a cable pull would. Code under test runs *inside* the node
namespace in a child process (``ip netns exec``, which also mounts that namespace's own /sys); the
pytest process itself never changes namespace. Both namespaces are deleted afterwards, which
destroys the veths with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

RAILS = 2


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
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
        _ip("-n", self.switch, "link", "set", f"peer{rail}", state)
        # Without carrier a veth is DOWN, or LOWERLAYERDOWN on kernels that judge it by its peer.
        want = ("UP",) if state == "up" else ("DOWN", "LOWERLAYERDOWN")
        deadline = time.monotonic() + 10
        while True:
            ref = json.loads(_ip("-n", self.node, "-j", "link", "show", f"net_rail{rail}").stdout)[0]
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


def _netns_available() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = f"rs-probe-{uuid.uuid4().hex[:8]}"
    try:
        res = _ip("netns", "add", probe, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"ip netns unavailable: {exc}"
    if res.returncode != 0:
        return f"ip netns add failed: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@pytest.fixture
def rails() -> Iterator[RailNetns]:
    why = _netns_available()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:8]
    env = RailNetns(node=f"rs-node-{tag}", switch=f"rs-sw-{tag}")
    try:
        _ip("netns", "add", env.node)
        _ip("netns", "add", env.switch)
        for ns in (env.node, env.switch):
            # No IPv6 on the test links: router solicitations and neighbour discovery would move
            # the counters between two reads that a test compares.
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                            "net.ipv6.conf.default.disable_ipv6=1"], capture_output=True, check=False)
        _ip("-n", env.node, "link", "set", "lo", "up")
        _ip("-n", env.switch, "link", "set", "lo", "up")
        for i in range(RAILS):
            _ip("-n", env.node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth",
                "peer", "name", f"peer{i}", "netns", env.switch)
            _ip("-n", env.switch, "link", "set", f"peer{i}", "mtu", "9000")
            _ip("-n", env.node, "addr", "add", f"10.99.{i}.1/24", "dev", f"net_rail{i}")
            _ip("-n", env.switch, "addr", "add", f"10.99.{i}.2/24", "dev", f"peer{i}")
            _ip("-n", env.node, "link", "set", f"net_rail{i}", "up")
            _ip("-n", env.switch, "link", "set", f"peer{i}", "up")
        yield env
    finally:
        _ip("netns", "del", env.node, check=False)
        _ip("netns", "del", env.switch, check=False)
