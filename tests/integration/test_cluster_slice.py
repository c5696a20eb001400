"""The incident's cluster slice (collector/cluster/slice.py): the objects of its nodes, once per incident, under
the incident's key, readable as a cluster snapshot (railscope diff), never listed as a bundle."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from agent.analysis.cluster_diff import cluster_diff
from agent.analysis.rollout import KIND_BY_KEY, judge
from agent.commands.snapshot import read_snapshot
from collector.cluster.slice import incident_slice, store_slice
from collector.storage.local import LocalStore
from tests.support import kube_cluster
from tests.support.collector_helpers import local_settings

BY_KIND = {k.kind: k.key for k in KIND_BY_KEY.values()}


def _objects(scenario: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for obj in kube_cluster.scenario(scenario, nodes=6, nics=2):
        key = BY_KIND.get(obj["kind"])
        if key:
            out.setdefault(key, []).append(obj)
    return out


def test_the_slice_keeps_the_incidents_nodes_and_every_cluster_wide_object() -> None:
    objs = _objects("old-rail-generation")
    part = incident_slice(objs, ["gpu-node-00001", "gpu-node-00004"])
    assert [o["metadata"]["name"] for o in part["nodes"]] == ["gpu-node-00001", "gpu-node-00004"]
    assert {o["status"]["node"] for o in part["nicdevices"]} == {"gpu-node-00001", "gpu-node-00004"}
    assert {o["spec"]["nodeName"] for o in part["pods"]} == {"gpu-node-00001", "gpu-node-00004"}
    assert len(part["daemonsets"]) == 4 and len(part["crds"]) == len(objs["crds"])
    (pool,) = part["spectrumxrailpoolconfigs"]
    assert [s["name"] for s in pool["status"]["nodeStates"]] == ["gpu-node-00001", "gpu-node-00004"]
    assert {a["nodeName"] for p in part["cidrpools"] for a in p["status"]["allocations"]} == {
        "gpu-node-00001", "gpu-node-00004"}
    # the view it was cut from is unchanged
    assert len(objs["spectrumxrailpoolconfigs"][0]["status"]["nodeStates"]) == 6


def test_stored_once_under_the_incidents_key_and_read_as_a_snapshot(tmp_path: Path) -> None:
    async def go():
        store = LocalStore(local_settings(tmp_path))
        await store.start()
        try:
            objs = _objects("old-rail-generation")
            first = await store_slice(store, "prod", "2026-12-04", "inc-42", ["gpu-node-00001"], objs, 1796400000.0)
            again = await store_slice(store, "prod", "2026-12-04", "inc-42", ["gpu-node-00001"], objs, 1796400100.0)
            listed = await store.list(cluster="prod")
        finally:
            await store.close()
        return store, first, again, listed
    store, first, again, listed = asyncio.run(go())
    assert first == "prod/2026-12-04/inc-42/cluster.tar.gz" and again is None
    path = store.root / first
    hexd, name = (store.root / (first + ".sha256")).read_text().split()
    assert name == "cluster.tar.gz" and hexd == hashlib.sha256(path.read_bytes()).hexdigest()
    assert listed == []  # never taken for a bundle
    manifest, objects = read_snapshot(str(path))
    assert manifest["incident"] == "inc-42" and manifest["nodes"] == ["gpu-node-00001"]
    from agent.analysis.cluster_diff import view_of

    result = judge(view_of(objects, manifest), manifest["taken_at"])
    assert [(v.node, v.verdict, v.step) for v in result.nodes] == [("gpu-node-00001", "in-progress",
                                                                     "railpool generation")]
    assert cluster_diff((manifest, objects), (manifest, objects)).regressions == ()
