"""RdmaLinkDown alone and RdmaNetnsModeUnexpected."""

from __future__ import annotations

from dataclasses import replace

import nodes
import pytest
from test_rails import found

from agent.config import Expectations
from agent.model import Versions


def rdma_state(snap, dev, state, phys):
    return replace(snap, rdma_links=tuple(replace(rl, state=state, physical_state=phys) if rl.dev == dev else rl
                                          for rl in snap.rdma_links))


def test_rdma_port_down_while_netdev_up():
    snap = rdma_state(nodes.node(), "rdma_rail1", "INIT", "LINK_UP")
    assert found(snap) == [("RdmaLinkDown", "critical", "rdma_rail1")]


def test_unreadable_rdma_state_raises_nothing():
    assert found(rdma_state(nodes.node(), "rdma_rail1", None, None)) == []


def test_no_rdma_device_raises_nothing():
    snap = replace(nodes.node(), rdma_links=(), rdma_devices=())
    assert found(snap) == []


@pytest.mark.parametrize(("running", "expect", "cmdline", "modprobe", "want"), [
    ("exclusive", None, "", (), False),
    ("shared", "shared", "", (), False),
    ("shared", "exclusive", "", (), True),
    ("exclusive", "shared", "", (), True),
    ("shared", None, "ro ib_core.netns_mode=0", (), True),
    ("shared", None, "", (("/etc/modprobe.d/ib_core.conf", "options ib_core netns_mode=0"),), True),
    ("exclusive", None, "ro ib_core.netns_mode=0", (), False),
    (None, "exclusive", "", (), False),
])
def test_netns_mode(running, expect, cmdline, modprobe, want):
    snap = replace(nodes.node(), rdma_netns=running,
                   versions=Versions(kernel="6.8.0-60-generic", cmdline=cmdline, modprobe_netns_mode=modprobe))
    got = found(snap, Expectations(rdma_netns=expect))
    assert got == ([("RdmaNetnsModeUnexpected", "warning", "node")] if want else [])


def test_netns_mode_from_sysfs_when_rdma_tool_missing():
    snap = replace(nodes.node(), rdma_netns=None, versions=Versions(netns_mode="Y"))
    assert found(snap, Expectations(rdma_netns="exclusive")) == [("RdmaNetnsModeUnexpected", "warning", "node")]
