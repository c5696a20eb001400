"""Each rollout scenario of docs/design.md §9 as a fixture cluster in the API stand-in, watched by the cluster watch
(one LIST per kind) and judged: the verdict of every node, the step, the reason's object."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agent.analysis.rollout import judge
from agent.clients.cluster import ClusterWatch
from agent.clients.kubernetes import KubeClient, KubeConfig
from tests.support import kube_cluster
from tests.support.kube_apiserver import KubeApi

N = kube_cluster.node_name

#: scenario -> {node index: (verdict, step, a word of the reason)}; the nodes not named converge.
EXPECTED = {
    "healthy": {},
    # numberReady == desired all along: the vendor summary's "healthy"; two nodes still run the old driver
    "ondelete-half": {2: ("in-progress", "driver drain-required", "doca-driver:24.10"),
                      3: ("in-progress", "driver upgrade-required", "doca-driver:24.10")},
    "stale-generation": {i: ("in-progress", "daemonset rdma-shared-dp-ds generation", "observedGeneration 2")
                         for i in range(4)},
    "component-error": {i: ("failed", "nicclusterpolicy", "OFEDDriverReady=False ComponentError") for i in range(4)},
    "upgrade-failed": {1: ("failed", "driver upgrade-failed", "upgrade-failed")},
    "validation-2h": {2: ("stuck", "driver validation-required", "for 2h00m")},
    "nicdevice-reasons": {1: ("in-progress", "nicdevice InterfaceNameMismatch", "enp26s0f0np0"),
                          2: ("in-progress", "nicdevice PendingReboot", "PendingReboot")},
    "sriov-draining": {3: ("stuck", "sriov InProgress Draining", "NodeMaintenance Draining")},
    "old-rail-generation": {1: ("in-progress", "railpool generation", "generation 4")},
    "no-free-prefixes": {2: ("failed", "ippool NoFreePrefixes", "CIDRPool/nvidia-network-operator/rail3")},
    "rails-zero": {1: ("failed", "rail resources 0", "nvidia.com/rail5 = 0")},
    "no-spectrum-x": {},
    "operator-conflicts": {},
}
EXIT = {"healthy": 0, "no-spectrum-x": 0, "operator-conflicts": 0, "ondelete-half": 1, "stale-generation": 1, "nicdevice-reasons": 1,
        "old-rail-generation": 1}


def _watch(tmp: Path, scenario: str, nodes: int = 4, node: str | None = None):
    tf = tmp / "token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)

    async def go():
        api = KubeApi()
        kube_cluster.load(api, scenario, nodes=nodes)
        url = await api.start()
        async with KubeClient(KubeConfig(url, str(tf))) as c:
            w = ClusterWatch(c, kube_cluster.NS, node=node)
            view = await w.sync()
        await api.stop()
        return api, view
    return asyncio.run(go())


def test_every_scenario_is_tested() -> None:
    assert set(EXPECTED) == set(kube_cluster.SCENARIOS)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_verdicts(tmp_path: Path, scenario: str) -> None:
    api, view = _watch(tmp_path, scenario)
    result = judge(view, time.time())
    got = {v.node: v for v in result.nodes}
    assert set(got) == {N(i) for i in range(4)}
    for i in range(4):
        v = got[N(i)]
        want = EXPECTED[scenario].get(i)
        if want is None:
            assert v.verdict == "converged", (N(i), v)
            continue
        assert (v.verdict, v.step) == want[:2], (N(i), v)
        assert want[2] in v.reason, (N(i), v.reason)
    assert result.exit_code == EXIT.get(scenario, 2)
    # worst first
    sev = [("failed", "stuck", "in-progress", "converged").index(v.verdict) for v in result.nodes]
    assert sev == sorted(sev)
    # one LIST per kind served (one page each here), no request per node, nothing written
    lists = {r: n for (verb, r), n in api.requests.items() if verb == "list"}
    assert all(n == 1 for n in lists.values()), lists
    assert api.count("get") == 0 and api.count("write") == 0
    skipped = ["spectrumxrailpoolconfigs.spectrumx.nvidia.com"] if scenario == "no-spectrum-x" else []
    assert list(result.skipped) == skipped


def test_ondelete_half_components_say_numberready_is_not_enough(tmp_path: Path) -> None:
    _api, view = _watch(tmp_path, "ondelete-half")
    comps = {c["name"]: c for c in judge(view, time.time()).components}
    ofed = comps[kube_cluster.DAEMONSETS[0][0]]
    assert ofed["ready"] == ofed["desired"] == 4 and ofed["updated"] == 2 and ofed["state"] == "rolling"


def test_one_node_narrowed_by_selectors_not_by_listing(tmp_path: Path) -> None:
    api, view = _watch(tmp_path, "upgrade-failed", node=N(1))
    result = judge(view, time.time(), only=N(1))
    assert [(v.node, v.verdict) for v in result.nodes] == [(N(1), "failed")]
    assert [r["name"] for r in view.of("nodes")] == [N(1)]
    assert {p["node"] for p in view.of("pods")} == {N(1)}
    assert api.count("list", "nodes") == 1


def test_a_kind_the_role_may_not_read_is_skipped_and_named(tmp_path: Path) -> None:
    tf = tmp_path / "token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)

    async def go():
        api = KubeApi()
        api.forbidden = {"spectrumxrailpoolconfigs"}
        kube_cluster.load(api, "old-rail-generation", nodes=2)
        url = await api.start()
        async with KubeClient(KubeConfig(url, str(tf))) as c:
            view = await ClusterWatch(c, kube_cluster.NS).sync()
        await api.stop()
        return view
    view = asyncio.run(go())
    result = judge(view, time.time())
    assert result.skipped == ("spectrumxrailpoolconfigs.spectrumx.nvidia.com (forbidden)",)
    assert result.exit_code == 0  # the rail pool clause cannot be judged without it
