"""Real network namespaces with veth "rails" for the live host tests.

``rails`` builds two namespaces: the node (``net_rail0``, ``net_rail1``, MTU 9000, addresses
10.99.<i>.1/24) and a switch side holding each rail's veth peer (``peer0``, ``peer1``), so setting a
peer down drops the rail's carrier as a cable pull would. Code under test runs *inside* the node
namespace in a child process (``ip netns exec``, which also mounts that namespace's own /sys); the
pytest process itself never changes namespace. Both namespaces are deleted afterwards, which
destroys the veths with them.

``start_agent`` starts ``railscope agent`` in the node namespace (``tests.support.agent_netns``).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_netns import (
    TOKEN,
    RunningAgent,
    StartAgent,
)
from tests.support.netns import RAILS, RailNetns, ip, netns_available


@pytest.fixture
def rails() -> Iterator[RailNetns]:
    why = netns_available()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:8]
    env = RailNetns(node=f"rs-node-{tag}", switch=f"rs-sw-{tag}")
    try:
        ip("netns", "add", env.node)
        ip("netns", "add", env.switch)
        for ns in (env.node, env.switch):
            # No IPv6 on the test links: router solicitations and neighbour discovery would move
            # the counters between two reads that a test compares.
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                            "net.ipv6.conf.default.disable_ipv6=1"], capture_output=True, check=False)
        ip("-n", env.node, "link", "set", "lo", "up")
        ip("-n", env.switch, "link", "set", "lo", "up")
        for i in range(RAILS):
            ip("-n", env.node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth",
                "peer", "name", f"peer{i}", "netns", env.switch)
            ip("-n", env.switch, "link", "set", f"peer{i}", "mtu", "9000")
            ip("-n", env.node, "addr", "add", f"10.99.{i}.1/24", "dev", f"net_rail{i}")
            ip("-n", env.switch, "addr", "add", f"10.99.{i}.2/24", "dev", f"peer{i}")
            ip("-n", env.node, "link", "set", f"net_rail{i}", "up")
            ip("-n", env.switch, "link", "set", f"peer{i}", "up")
        yield env
    finally:
        ip("netns", "del", env.node, check=False)
        ip("netns", "del", env.switch, check=False)


@pytest.fixture
def start_agent(rails: RailNetns, tmp_path: Path) -> Iterator[StartAgent]:
    """Start ``railscope agent --rails 2 ARGS`` in the node namespace; stop it afterwards."""
    started: list[RunningAgent] = []
    tag = uuid.uuid4().hex[:8]
    host_if = f"rsm-{tag}"
    net = random.randint(0, 63) * 4
    addr_host, addr_node = f"10.98.{net // 256 + 1}.{net % 256 + 1}", f"10.98.{net // 256 + 1}.{net % 256 + 2}"
    ip("link", "add", host_if, "type", "veth", "peer", "name", "mgmt0", "netns", rails.node)
    ip("addr", "add", f"{addr_host}/30", "dev", host_if)
    ip("link", "set", host_if, "up")
    ip("-n", rails.node, "addr", "add", f"{addr_node}/30", "dev", "mgmt0")
    ip("-n", rails.node, "link", "set", "mgmt0", "up")

    token_file = tmp_path / "data-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)

    def start(*args: str, env: dict[str, str] | None = None) -> RunningAgent:
        log_path = tmp_path / f"agent-{len(started)}.log"
        argv = ["ip", "netns", "exec", rails.node, sys.executable, "-m", "agent.cli", "agent",
                "--listen", addr_node, "--rails", "2", "--data-token-file", str(token_file), *args]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})})
        agent = RunningAgent(rails, addr_node, proc, log_path)
        started.append(agent)
        agent.wait_ready()
        return agent

    try:
        yield start
    finally:
        for agent in started:
            agent.stop()
        ip("link", "del", host_if, check=False)
