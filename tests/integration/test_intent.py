"""Intent against reality (RailIntentMismatch) and the operators' objects against each other
(OperatorConfigConflict), on the fixture clusters' objects and a node's railscope.doctor/v1 rails."""

from __future__ import annotations

from agent.analysis.intent import intent_findings
from agent.analysis.rollout import KIND_BY_KEY, ClusterView
from tests.support import kube_cluster

BY_KIND = {k.kind: k.key for k in KIND_BY_KEY.values()}


def _view(scenario: str = "healthy") -> ClusterView:
    v = ClusterView()
    for obj in kube_cluster.scenario(scenario, nodes=2, nics=2):
        key = BY_KIND.get(obj["kind"])
        if key:
            v.put(key, obj)
    return v


def _rails(**over) -> dict:
    rows = [{"rail": k, "pci": kube_cluster.pci(k), "netdev": f"eth_r{k}", "numvfs": 1, "eswitch_mode": "legacy"}
            for k in range(2)]
    for k, fields in over.items():
        rows[int(k[1:])].update(fields)
    return {"rails": rows}


def test_the_healthy_cluster_and_a_matching_node_have_no_finding() -> None:
    assert intent_findings(_view(), {"gpu-node-00000": _rails()}) == []


def test_operator_conflicts() -> None:
    got = {(f.code, f.subject): f for f in intent_findings(_view("operator-conflicts"))}
    ns = kube_cluster.NS
    assert set(got) == {("OperatorConfigConflict", f"SriovOperatorConfig/{ns}/default"),
                        ("OperatorConfigConflict", f"NicConfigurationTemplate/{ns}/spectrum-x"),
                        ("OperatorConfigConflict", f"DaemonSet/{ns}/nic-configuration-daemon")}
    assert got[("OperatorConfigConflict", f"SriovOperatorConfig/{ns}/default")].evidence["field"] == "spec.disablePlugins"
    assert got[("OperatorConfigConflict", f"NicConfigurationTemplate/{ns}/spectrum-x")].evidence["value"] == 8


def test_a_node_against_the_intent() -> None:
    # the node's rail 1 netdev has another name than the NicDevice applied, and 4 VFs where SR-IOV asks 1
    diag = _rails(r1={"netdev": "enp42s0f0np0", "numvfs": 4})
    found = intent_findings(_view(), {"gpu-node-00001": diag})
    assert {(f.code, f.subject, f.evidence["field"]) for f in found} == {
        ("RailIntentMismatch", "enp42s0f0np0", "status.ports[].networkInterface"),
        ("RailIntentMismatch", "enp42s0f0np0", "spec.interfaces[].numVfs")}
    assert all(f.severity == "critical" and f.message.startswith("gpu-node-00001: ") for f in found)


def test_the_template_rail_order_against_the_node() -> None:
    diag = _rails(r0={"rail": 1}, r1={"rail": 0})  # the node has the two NICs' rails swapped
    found = [f for f in intent_findings(_view(), {"gpu-node-00000": diag})
             if f.evidence["field"].startswith("spec.railPciAddresses")]
    assert sorted((f.subject, f.evidence["want"], f.evidence["node_rail"]) for f in found) == [
        ("eth_r0", 0, 1), ("eth_r1", 1, 0)]
