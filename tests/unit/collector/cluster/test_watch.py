"""The collector's cluster watch deciding which incidents get a slice (collector/cluster/watch.py), without a
server: the objects fed through its handlers as the informers feed them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.analysis.rollout import KIND_BY_KEY
from collector.cluster.slice import read_slice
from collector.cluster.watch import ClusterDesk
from collector.storage.local import LocalStore
from proto.kube import KubeConfig
from tests.support import kube_cluster
from tests.support.collector_helpers import local_settings, run

N = kube_cluster.node_name
T0 = 1_796_000_000.0


@dataclass
class Req:
    incident: str
    node: str
    created: int


def test_an_incident_is_sliced_once_its_requests_settled_and_only_while_young(tmp_path: Path) -> None:
    clock = [T0]
    reqs: list[Req] = []

    async def requests() -> list[Req]:
        return list(reqs)

    async def go() -> tuple[list, list, list, list, dict]:
        store = LocalStore(local_settings(tmp_path))
        await store.start()
        try:
            desk = ClusterDesk(KubeConfig("https://127.0.0.1:1"), store, "prod", kube_cluster.NS, ("railscope", "l"),
                               "me", requests, clock=lambda: clock[0])
            by_kind = {k.kind: k.key for k in KIND_BY_KEY.values()}
            for obj in kube_cluster.scenario("healthy", nodes=6, nics=2):
                if obj["kind"] in by_kind:
                    desk._handler(by_kind[obj["kind"]])("ADDED", obj)
            reqs.append(Req("inc-1", N(1), int(T0)))
            first = await desk.slice_incidents()  # written a moment ago: more of its requests may follow
            reqs.append(Req("inc-1", N(4), int(T0)))
            reqs.append(Req("old-inc", N(2), int(T0) - 3600))  # seen first an hour after it began
            clock[0] = T0 + 6
            second = await desk.slice_incidents()
            reqs.append(Req("inc-1", N(5), int(T0) + 30))  # a later capture of the incident: no second slice
            clock[0] = T0 + 60
            third = await desk.slice_incidents()
            # a pod moved to another node is indexed under its new node only
            pod = next(o for o in kube_cluster.scenario("healthy", nodes=6, nics=2) if o["kind"] == "Pod")
            pod["spec"]["nodeName"] = N(3)
            desk._handler("pods")("MODIFIED", pod)
            index = {n: len(ks) for n, ks in desk.by_node["pods"].items()}
            data = (tmp_path / "store" / second[0]).read_bytes()
            return first, second, third, [read_slice(data)], index
        finally:
            await store.close()

    first, second, third, ((manifest, objects),), index = run(go())
    assert first == [] and third == []
    assert second == ["prod/2026-11-30/inc-1/cluster.tar.gz"]
    assert manifest["nodes"] == [N(1), N(4)] and manifest["namespace"] == kube_cluster.NS
    assert sorted(o["metadata"]["name"] for o in objects["nodes"]) == [N(1), N(4)]
    assert index[N(3)] == 5 and index[N(0)] == 3  # 4 DaemonSets' pods a node; one moved from N(0)
