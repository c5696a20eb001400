"""The chart's RBAC of the read-only cluster view: get / list / watch on exactly the kinds railscope reads
(agent/analysis/rollout.py KINDS), cluster-scoped ones by a ClusterRole, namespaced ones in the operators'
namespace only, an off switch per group, never Secrets."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from agent.analysis.rollout import KINDS
from tests.support.chart import COLLECTOR_ON as ON
from tests.support.chart import K8S_VERSIONS, render


def _rules(docs: list[dict[str, Any]], name_suffix: str) -> set[tuple[str, str, tuple[str, ...]]]:
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(name_suffix)]
    return {(g, r, tuple(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}


def test_exactly_the_kinds_read_and_only_reads(chart: Any) -> None:
    docs = render(chart, ON)
    read = ("get", "list", "watch")
    assert _rules(docs, "-cluster-view") == {(k.group, k.plural, read) for k in KINDS if not k.namespaced}
    assert _rules(docs, "-cluster-view-namespaced") == {(k.group, k.plural, read) for k in KINDS if k.namespaced}
    (rb,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"].endswith("-cluster-view")]
    assert rb["metadata"]["namespace"] == "nvidia-network-operator"
    assert rb["subjects"][0]["name"].endswith("collector")
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "RoleBinding", "ClusterRoleBinding"):
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_a_group_switched_off_and_the_view_off(chart: Any) -> None:
    values = {**ON, "clusterView": {"groups": {"spectrumX": {"enabled": False, "apiGroup": "spectrumx.nvidia.com"}}}}
    rules = _rules(render(chart, values), "-cluster-view-namespaced")
    assert not [r for r in rules if r[0] == "spectrumx.nvidia.com"] and rules
    docs = render(chart, {**ON, "clusterView": {"enabled": False}})
    assert not [d for d in docs if "cluster-view" in d["metadata"]["name"]]
    assert not [d for d in render(chart) if "cluster-view" in d["metadata"]["name"]]  # no collector, no view


@pytest.mark.parametrize("resource", ["secrets", "pods/exec"])
def test_secrets_and_subresources_are_refused(chart: Any, resource: str) -> None:
    values = {**ON, "clusterView": {"groups": {"core": {"enabled": True, "apiGroup": "", "namespaced": [resource]}}}}
    with pytest.raises(Exception) as exc:  # the Helm library's own error type
        render(chart, values)
    assert "secrets" in str(exc.value) or "pods/exec" in str(exc.value)


def test_the_lease_is_the_one_write_on_one_name_in_the_collectors_namespace(chart: Any) -> None:
    docs = render(chart, ON)
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-cluster-view-lease")]
    name = role["metadata"]["name"].removesuffix("-lease")
    # get / update of that one Lease; create cannot be narrowed to a name by RBAC, so leases in this namespace
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [name],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    (rb,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == role["metadata"]["name"]]
    assert rb["metadata"]["namespace"] == role["metadata"]["namespace"] and rb["roleRef"]["kind"] == "Role"
    for doc in (role, rb):
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    # no other write anywhere in the chart's roles
    for d in docs:
        if d["kind"] in ("Role", "ClusterRole"):
            for rule in d["rules"]:
                if set(rule["verbs"]) - {"get", "list", "watch"}:
                    assert rule["resources"] == ["leases"], (d["metadata"]["name"], rule)
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RAILSCOPE_CLUSTER_LEASE"] == f"{role['metadata']['namespace']}/{name}"
    assert env["RAILSCOPE_CLUSTER_VIEW"] == "on" and env["RAILSCOPE_OPERATOR_NAMESPACE"] == "nvidia-network-operator"
    mounts = dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in {m["mountPath"] for m in mounts}
    off = next(d for d in render(chart, {**ON, "clusterView": {"enabled": False}}) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in off["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RAILSCOPE_CLUSTER_VIEW"] == "off"
