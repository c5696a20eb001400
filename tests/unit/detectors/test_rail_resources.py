"""RailResourcesLost: a watched extended resource seen above 0, then at 0, is one event; it re-arms
above 0; a resource never above 0, a GPU and a Node object without allocatable never fire."""

from __future__ import annotations

from agent.detectors.rail_resources import initial, parse_allocatable, step, watched

PATTERNS = ("nvidia.com/*", "rdma/*", "openshift.io/*")


def run(seq):
    st, out = initial(), []
    for t, alloc in enumerate(seq):
        st, evs = step(st, alloc, float(t), "gpu-node-7")
        out.extend((e.ts, e.code, e.severity, e.subject, dict(e.evidence)["before"]) for e in evs)
    return out


def test_one_event_per_drop_and_re_arm():
    seq = [{"nvidia.com/rail0": 1}, {"nvidia.com/rail0": 0}, {"nvidia.com/rail0": 0}, {"nvidia.com/rail0": 1},
           {"nvidia.com/rail0": 0}]
    assert run(seq) == [(1.0, "RailResourcesLost", "critical", "nvidia.com/rail0", 1),
                        (4.0, "RailResourcesLost", "critical", "nvidia.com/rail0", 1)]


def test_never_above_zero_is_quiet_and_a_vanished_resource_is_zero():
    assert run([{"rdma/shared_a": 0}, {"rdma/shared_a": 0}]) == []
    assert run([{"rdma/shared_a": 63}, {}]) == [(1.0, "RailResourcesLost", "critical", "rdma/shared_a", 63)]
    # a Node object without status.allocatable says nothing
    assert run([{"rdma/shared_a": 63}, None, {"rdma/shared_a": 63}]) == []


def test_parse_allocatable_keeps_the_watched_whole_numbers():
    node = {"status": {"allocatable": {"cpu": "190", "memory": "2Ti", "nvidia.com/gpu": "8", "nvidia.com/rail0": "1",
                                       "rdma/rdma_shared_device_a": "63", "openshift.io/mlxnics": "x"}}}
    assert parse_allocatable(node, PATTERNS) == {"nvidia.com/rail0": 1, "rdma/rdma_shared_device_a": 63}
    assert parse_allocatable({"status": {}}, PATTERNS) is None and parse_allocatable({}, PATTERNS) is None
    assert not watched("nvidia.com/gpu", PATTERNS) and watched("openshift.io/mlxnics", PATTERNS)
