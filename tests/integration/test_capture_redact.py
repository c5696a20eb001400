"""``railscope capture --redact`` on two netns "nodes" that share a peer: one key gives the same
pseudonym for the peer's MAC and IP on both, another key gives others, and no original address is
left in the archive bytes."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netns import ip, netns_available

pytestmark = pytest.mark.netns

PEER_IP = "10.98.0.254"
PEER_MAC = "02:98:00:00:00:fe"
NODES = {"a": ("10.98.0.1", "02:98:00:00:00:0a"), "b": ("10.98.0.2", "02:98:00:00:00:0b")}


@pytest.fixture
def two_nodes() -> Iterator[dict[str, str]]:
    why = netns_available()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    sw = f"rs-rsw-{tag}"
    ns = {k: f"rs-r{k}-{tag}" for k in NODES}
    try:
        ip("netns", "add", sw)
        ip("-n", sw, "link", "add", "br0", "address", PEER_MAC, "type", "bridge")
        ip("-n", sw, "addr", "add", f"{PEER_IP}/24", "dev", "br0")
        ip("-n", sw, "link", "set", "br0", "up")
        for k, (addr, mac) in NODES.items():
            ip("netns", "add", ns[k])
            subprocess.run(["ip", "netns", "exec", ns[k], "sysctl", "-q", "-w",
                            "net.ipv6.conf.default.disable_ipv6=1"], capture_output=True, check=False)
            ip("-n", ns[k], "link", "add", "net_rail0", "address", mac, "type", "veth", "peer", "name",
                f"port{k}", "netns", sw)
            ip("-n", ns[k], "addr", "add", f"{addr}/24", "dev", "net_rail0")
            ip("-n", ns[k], "link", "set", "net_rail0", "up")
            ip("-n", sw, "link", "set", f"port{k}", "master", "br0", "up")
            ip("-n", ns[k], "neigh", "replace", PEER_IP, "lladdr", PEER_MAC, "dev", "net_rail0", "nud", "permanent")
        yield ns
    finally:
        for name in (*ns.values(), sw):
            ip("netns", "del", name, check=False)


def _capture(ns: str, out: Path, node: str, key: Path) -> bytes:
    res = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m", "agent.cli", "capture", "-o", str(out),
                          "--node", node, "--redact", "--redact-key-file", str(key), "--recorder-gap", "0"],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    return gzip.decompress(Path(res.stdout.split()[0]).read_bytes())


def _neigh_line(raw: bytes) -> bytes:
    # ip neigh show: "<ip> dev net_rail0 lladdr <mac> PERMANENT"
    m = re.search(rb"\n?(\S+) dev net_rail0 lladdr (\S+) PERMANENT", raw)
    assert m, "no neighbour line in the bundle"
    return m.group(1) + b" " + m.group(2)


def test_redaction_is_keyed_and_the_same_on_every_node(two_nodes: dict[str, str], tmp_path: Path) -> None:
    key1, key2 = tmp_path / "k1", tmp_path / "k2"
    key1.write_bytes(b"cluster-secret-number-one-0123456789\n")
    key2.write_bytes(b"cluster-secret-number-two-9876543210\n")
    a = _capture(two_nodes["a"], tmp_path / "a.tar.gz", "node-a", key1)
    b = _capture(two_nodes["b"], tmp_path / "b.tar.gz", "node-b", key1)
    c = _capture(two_nodes["a"], tmp_path / "c.tar.gz", "node-a", key2)
    assert _neigh_line(a) == _neigh_line(b)  # the same peer, the same pseudonym, on both nodes
    assert _neigh_line(a) != _neigh_line(c)  # another key, other pseudonyms
    pip, pmac = _neigh_line(a).split()
    assert pip != PEER_IP.encode() and pmac != PEER_MAC.encode()
    originals = [PEER_IP, PEER_MAC, *(x for pair in NODES.values() for x in pair), "node-a", "node-b"]
    for raw in (a, b, c):
        for original in originals:
            assert original.encode() not in raw, original
        assert b"net_rail0" in raw  # names of netdevs are kept: the findings name them
