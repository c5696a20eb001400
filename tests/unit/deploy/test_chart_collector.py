"""The chart's collector Deployment: off by default; when on, valid objects whose environment the
collector's real flag parser accepts, every flag value a collector flag, and no way to start it open."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from tests.support import script
from tests.support.chart import CHART, K8S_VERSIONS, NAMESPACE, kebab, kinds, render
from tests.support.chart import COLLECTOR_ON as ON

import kubernetes_validate  # isort: skip
import helm_python as helm  # isort: skip

from agent.cli import build_parser
from agent.commands.collector import TABLE, settings_from_args

#: Flags the chart fixes instead of exposing under collector.flags, as the collector's settings table declares them.
FIXED = {s.flag for s in TABLE if s.chart in ("fixed", "none")}


def collector_parser() -> argparse.ArgumentParser:
    parser = build_parser(only="collector")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["collector"]


def flags() -> set[str]:
    return {o for a in collector_parser()._actions for o in a.option_strings if o.startswith("--")} - {"--help", "--version"}


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (d,) = [x for x in docs if x["kind"] == "Deployment"]
    return d


def settings(docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Any:
    (c,) = deployment(docs)["spec"]["template"]["spec"]["containers"]
    for name in list(os.environ):
        if name.startswith("RAILSCOPE_"):
            monkeypatch.delenv(name)
    for e in c["env"]:
        value = {"status.podIP": "10.1.2.3"}[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e \
            else e["value"]
        monkeypatch.setenv(e["name"], value)
    assert c["args"][0] == "collector"
    return settings_from_args(build_parser(only="collector").parse_args(c["args"]))


def test_off_by_default(chart: Any) -> None:
    assert "Deployment" not in kinds(render(chart))


def test_objects_validate(chart: Any) -> None:
    docs = render(chart, ON)
    assert {"Deployment", "ClusterRoleBinding"} <= set(kinds(docs))
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_collector_accepts_its_pod_environment(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"collector": {**ON["collector"], "flags": {
        "port": 9900, "s3EndpointUrl": "http://seaweedfs:8333", "maxBundleSize": "2G", "maxInflight": 16,
        "retryAfter": 3, "minRate": "128k", "minRateGrace": "20s", "stallTimeout": "2m", "partSize": "16M",
        "partConcurrency": 6, "partsInFlight": 12, "stalePartAge": "2h", "agentAudience": "rs", "logLevel": "debug",
        "captureOnAlert": False, "captureCooldown": "5m", "captureMaxInFlight": 40, "captureIncidentWorst": 3,
        "captureIncidentSample": 0, "captureRate": 10, "captureRateWindow": "1h", "requestTtl": "10m",
        "captureAgentRecent": "10m", "captureNoAgentMaxInFlight": 1, "captureNoAgentTtl": "2m",
        "cluster": "prod-east"},
        "tokenRoles": ["agent", "operator"]}}
    s = settings(render(chart, values), monkeypatch)
    assert (s.listen, s.port, s.store.bucket, s.store.prefix, s.s3_endpoint_url) == (
        "10.1.2.3", 9900, "railscope-bundles", "prod", "http://seaweedfs:8333")
    assert (s.max_bundle_bytes, s.max_inflight, s.retry_after_s, s.min_rate_bps) == (2 << 30, 16, 3, 128 << 10)
    assert (s.min_rate_grace_s, s.stall_timeout_s, s.part_bytes, s.part_concurrency, s.parts_in_flight) == (
        20, 120, 16 << 20, 6, 12)
    assert (s.stale_part_s, s.agent_audience) == (7200, "rs")
    assert s.tokenreview_url == "https://kubernetes.default.svc"
    assert s.agent_token_file == "/etc/railscope/tokens/agent" and s.alerting_token_file is None
    a = s.alerts
    assert (a.enabled, a.cooldown_s, a.max_in_flight, a.incident_worst, a.incident_sample) == (False, 300, 40, 3, 0)
    assert (a.rate_per_alertname, a.rate_window_s, a.request_ttl_s) == (10, 3600, 600)
    assert (a.agent_recent_s, a.absent_max_in_flight, a.absent_ttl_s) == (600, 1, 120)
    assert s.cluster == "prod-east"


def test_flag_values_are_exactly_the_collectors_flags(chart: Any) -> None:
    assert {kebab(k) for k in chart.values["collector"]["flags"]} == flags() - FIXED


def test_it_never_starts_open(chart: Any) -> None:
    with pytest.raises(helm.HelmRenderError, match="token source"):
        render(chart, {"collector": {"enabled": True, "store": "s3://b/p", "tokenReview": False}})
    with pytest.raises(helm.HelmRenderError, match="s3://"):
        render(chart, {"collector": {"enabled": True, "store": "./data"}})
    (c,) = deployment(render(chart, ON))["spec"]["template"]["spec"]["containers"]
    assert "RAILSCOPE_INSECURE_DEV" not in {e["name"] for e in c["env"]}


def test_least_privilege(chart: Any) -> None:
    pod = deployment(render(chart, ON))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod.get("hostNetwork") is not True
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert NAMESPACE == deployment(render(chart, ON))["metadata"]["namespace"]


def test_helm_lint_passes_strict_with_the_collector() -> None:
    from tests.support.chart import CHART

    report = helm.lint(CHART, {"collector": dict(ON["collector"])}, strict=True, namespace=NAMESPACE)
    assert not report["errors"] and not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize(("values", "where"), [
    ({"flags": {"maxInflight": 0}}, "/collector/flags/maxInflight"),
    ({"flags": {"maxInflights": 3}}, "maxInflights"),
    ({"tokenRoles": ["root"]}, "/collector/tokenRoles/0"),
    ({"flags": {"partSize": "8 MB"}}, "/collector/flags/partSize"),
])
def test_values_the_collector_would_refuse_fail_at_install(chart: Any, values: dict, where: str) -> None:
    import re

    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(chart, {"collector": {**ON["collector"], **values}})


def test_tls_from_a_secret_or_plain_http_only_when_asked(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(chart, ON)
    s = settings(docs, monkeypatch)
    assert (s.tls_cert_file, s.tls_key_file, s.plain_http) == ("/etc/railscope/tls/tls.crt",
                                                               "/etc/railscope/tls/tls.key", False)
    pod = deployment(docs)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert {"name": "tls", "secret": {"secretName": "railscope-collector-tls"}} in pod["volumes"]
    assert c["livenessProbe"]["httpGet"]["scheme"] == c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    no_tls = {"collector": {**ON["collector"], "tls": {"secret": ""}}}
    with pytest.raises(helm.HelmRenderError, match="plain HTTP"):
        render(chart, no_tls)
    plain = render(chart, {"collector": {**ON["collector"], "tls": {"plainHttp": True}}})
    s = settings(plain, monkeypatch)
    assert s.plain_http is True and s.tls_cert_file is None
    (c,) = deployment(plain)["spec"]["template"]["spec"]["containers"]
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_the_halves_connect(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents get the collector's URL and a token for it; the collector takes the agents' own
    ServiceAccount (as the chart names it) and judges with the agents' expectations."""
    from tests.support.chart import env_of

    values = {"collector": {**ON["collector"], "tokenReview": True,
                            "agentServiceAccounts": ["system:serviceaccount:gpu:other-agent"]},
              "serviceAccount": {"name": "gpu-netmon"},
              "agent": {"rails": 8, "expectEswitchMode": "switchdev", "expectEswMultiport": True,
                        "expectRdmaNetns": "exclusive", "losslessPrio": 5, "eventWindow": "30m", "linksInterval": "20s"}}
    docs = render(chart, values)
    env = env_of(docs)
    assert env["RAILSCOPE_COLLECTOR"]["value"] == f"https://rs-railscope-collector.{NAMESPACE}.svc:9842"
    assert env["RAILSCOPE_COLLECTOR_TOKEN_FILE"]["value"] == "/var/run/secrets/railscope/collector-token"
    s = settings(docs, monkeypatch)
    assert s.agent_service_accounts == (f"system:serviceaccount:{NAMESPACE}:gpu-netmon",
                                        "system:serviceaccount:gpu:other-agent")
    from agent.expectations import expectations_from_env as expectations

    exp = expectations()  # reads the RAILSCOPE_* the collector's pod environment set (settings() did)
    assert (exp.rails, exp.eswitch_mode, exp.esw_multiport, exp.rdma_netns, exp.lossless_prio, exp.event_window_s) == (
        8, "switchdev", True, "exclusive", 5, 1800)
    (c,) = deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert "RAILSCOPE_LINKS_INTERVAL" not in {e["name"] for e in c["env"]}  # only expectations, not the agent's knobs
    # an agent.collector of the operator's own wins over the chart's Service
    other = render(chart, {**values, "agent": {"collector": "http://elsewhere:9842"}})
    assert env_of(other)["RAILSCOPE_COLLECTOR"]["value"] == "http://elsewhere:9842"


def test_the_collector_reads_the_agents_kernel_table(chart: Any) -> None:
    row = {"driver": "26.01", "flavour": "nvidia", "kernel_line": "6.8.0", "max_abi": "6.8.0-1020", "source": "site"}
    pod = deployment(render(chart, {**ON, "agent": {"kernelTable": [row]}}))["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    path = {e["name"]: e.get("value") for e in c["env"]}["RAILSCOPE_KERNEL_TABLE"]
    mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["kernel-table"]
    assert os.path.dirname(path) == mount
    assert {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}["kernel-table"] == \
        "rs-railscope-kernel-table"


#: Every optional collector object and setting on.
EXTRAS = {"collector": {
    **ON["collector"], "tokenReview": True,
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "ingress": {"enabled": True, "host": "railscope.example.com", "className": "nginx",
                "tls": {"secretName": "railscope-tls", "hosts": ["railscope.example.com"]},
                "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "0"}},
    "networkPolicy": {"enabled": True, "nodeCIDRs": ["10.0.0.0/16", "10.1.0.0/16"],
                      "operators": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
                                     "namespaceSelector": {}}],
                      "store": [{"podSelector": {"matchLabels": {"app": "minio"}}, "namespaceSelector": {}}],
                      "storePorts": [9000]},
    "alertmanagerConfig": {"enabled": True, "tokenSecret": "railscope-tokens", "labels": {"alertmanagerConfig": "rs"}},
    "extraEnv": [{"name": "AWS_CA_BUNDLE", "value": "/etc/railscope/ca/ca.pem"}],
    "extraVolumes": [{"name": "s3-ca", "configMap": {"name": "s3-ca"}}],
    "extraVolumeMounts": [{"name": "s3-ca", "mountPath": "/etc/railscope/ca", "readOnly": True}],
    "nodeSelector": {"node-role.kubernetes.io/infra": ""}, "priorityClassName": "system-cluster-critical",
    "tolerations": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "podAnnotations": {"example.com/owner": "network"}, "podLabels": {"team": "network"},
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1}},
    "extraEnv": [{"name": "NO_PROXY", "value": "10.0.0.0/8"}],
    "extraVolumes": [{"name": "data-token", "secret": {"secretName": "railscope-data-token"}}],
    "extraVolumeMounts": [{"name": "data-token", "mountPath": "/etc/railscope/data", "readOnly": True}]}

#: the monitoring.coreos.com/v1alpha1 AlertmanagerConfig fields the chart emits (the operator's CRD)
_AMC = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "properties": {
    "apiVersion": {"const": "monitoring.coreos.com/v1alpha1"}, "kind": {"const": "AlertmanagerConfig"},
    "spec": {"type": "object", "additionalProperties": False, "properties": {
        "route": {"type": "object", "additionalProperties": False, "required": ["receiver"], "properties": {
            "receiver": {"type": "string"}, "groupBy": {"type": "array", "items": {"type": "string"}},
            "groupWait": {"type": "string"}, "groupInterval": {"type": "string"}, "repeatInterval": {"type": "string"},
            "matchers": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                                    "required": ["name"], "properties": {
                "name": {"type": "string"}, "value": {"type": "string"},
                "matchType": {"enum": ["=", "!=", "=~", "!~"]}}}}}},
        "receivers": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                                 "required": ["name"], "properties": {
            "name": {"type": "string"},
            "webhookConfigs": {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
                "url": {"type": "string", "pattern": "^https?://"}, "sendResolved": {"type": "boolean"},
                "httpConfig": {"type": "object", "additionalProperties": False, "properties": {
                    "authorization": {"type": "object", "additionalProperties": False, "properties": {
                        "type": {"type": "string"},
                        "credentials": {"type": "object", "additionalProperties": False, "required": ["key"],
                                        "properties": {"name": {"type": "string"}, "key": {"type": "string"}}}}},
                    # SafeTLSConfig: the CA from a Secret's key
                    "tlsConfig": {"type": "object", "additionalProperties": False, "properties": {
                        "ca": {"type": "object", "additionalProperties": False, "properties": {
                            "secret": {"type": "object", "additionalProperties": False, "required": ["key"],
                                       "properties": {"name": {"type": "string"},
                                                      "key": {"type": "string"}}}}}}}}}}}}}}},
    }}}}


def test_every_collector_object_validates(chart: Any) -> None:
    import jsonschema

    from tests.support.chart import check_crd_object

    docs = render(chart, EXTRAS)
    assert {"PodDisruptionBudget", "ServiceMonitor", "Ingress", "NetworkPolicy", "AlertmanagerConfig"} <= set(kinds(docs))
    for doc in docs:
        if doc["kind"] == "AlertmanagerConfig":
            jsonschema.Draft202012Validator(_AMC).validate(doc)
        elif doc["apiVersion"].startswith("monitoring.coreos.com/"):
            check_crd_object(doc)
        else:
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (d,) = [x for x in docs if x["kind"] == kind and x["metadata"]["name"].endswith("-collector")]
    return d


def test_the_collector_objects_select_the_collector(chart: Any) -> None:
    docs = render(chart, EXTRAS)
    pod_labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    service = _one(docs, "Service")
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        d = _one(docs, kind)
        sel = d["spec"]["selector"]["matchLabels"] if kind == "PodDisruptionBudget" else d["spec"]["podSelector"]["matchLabels"]
        assert sel.items() <= pod_labels.items(), kind
    sm = _one(docs, "ServiceMonitor")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (rule,) = _one(docs, "Ingress")["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert (rule["host"], path["path"], path["backend"]["service"]["name"]) == (
        "railscope.example.com", "/ui", service["metadata"]["name"])
    np = _one(docs, "NetworkPolicy")["spec"]
    sources = np["ingress"][0]["from"]
    assert {"ipBlock": {"cidr": "10.0.0.0/16"}} in sources and {"ipBlock": {"cidr": "10.1.0.0/16"}} in sources
    assert any(p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") == "alertmanager"
               for p in sources)
    out = {(tuple(map(str, (p["port"] for p in e["ports"])))) for e in np["egress"]}
    assert ("9000",) in out and ("443", "6443") in out and ("53", "53") in out
    amc = _one(docs, "AlertmanagerConfig")["spec"]
    (hook,) = amc["receivers"][0]["webhookConfigs"]
    assert hook["url"] == f"https://rs-railscope-collector.{NAMESPACE}.svc:9842/v1/alerts"
    assert hook["httpConfig"]["tlsConfig"]["ca"]["secret"] == {"name": "railscope-collector-tls", "key": "ca.crt"}
    assert hook["httpConfig"]["authorization"]["credentials"] == {"name": "railscope-tokens", "key": "alerting"}


def test_extra_env_volumes_and_scheduling_reach_the_pods(chart: Any) -> None:
    from tests.support.chart import pod_spec

    docs = render(chart, EXTRAS)
    cpod = deployment(docs)["spec"]["template"]["spec"]
    (c,) = cpod["containers"]
    assert {"name": "AWS_CA_BUNDLE", "value": "/etc/railscope/ca/ca.pem"} in c["env"]
    assert {"name": "s3-ca", "mountPath": "/etc/railscope/ca", "readOnly": True} in c["volumeMounts"]
    assert {"name": "s3-ca", "configMap": {"name": "s3-ca"}} in cpod["volumes"]
    assert cpod["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert cpod["priorityClassName"] == "system-cluster-critical" and cpod["tolerations"][0]["key"].endswith("infra")
    assert "nodeAffinity" in cpod["affinity"]
    assert cpod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    apod = pod_spec(docs)
    (a,) = apod["containers"]
    assert {"name": "NO_PROXY", "value": "10.0.0.0/8"} in a["env"]
    assert {"name": "data-token", "mountPath": "/etc/railscope/data", "readOnly": True} in a["volumeMounts"]
    assert {"name": "data-token", "secret": {"secretName": "railscope-data-token"}} in apod["volumes"]


def test_settings_that_cannot_work_fail_at_install(chart: Any) -> None:
    with pytest.raises(helm.HelmRenderError, match="nodeCIDRs"):
        render(chart, {"collector": {**ON["collector"], "networkPolicy": {"enabled": True}}})
    with pytest.raises(helm.HelmRenderError, match="alerting token"):
        render(chart, {"collector": {**ON["collector"], "alertmanagerConfig": {"enabled": True}}})


def test_every_value_is_in_the_schema(chart: Any) -> None:
    import json

    import yaml

    from tests.support.chart import CHART

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []

    def walk(vals: dict[str, Any], sch: dict[str, Any], path: str) -> None:
        props = sch.get("properties", {})
        for key, value in vals.items():
            if key not in props:
                missing.append(path + key)
            elif isinstance(value, dict) and props[key].get("properties"):
                walk(value, props[key], path + key + ".")

    walk(values, schema, "")
    assert not missing, f"values without a schema entry: {missing}"


def test_the_readme_deploy_values_install(chart: Any) -> None:
    """The values file of the README's "Deploy" section renders into valid objects, collector included."""

    import yaml

    from tests.support import ROOT

    readme_commands = script("scripts/readme_commands.py")

    block = readme_commands.blocks((ROOT / "README.md").read_text(encoding="utf-8"))["deploy-values"]
    values = yaml.safe_load("\n".join(block).replace("<registry>", "registry.example.com"))
    docs = render(chart, values)
    assert {"DaemonSet", "Deployment", "ServiceMonitor", "PrometheusRule", "AlertmanagerConfig", "NetworkPolicy",
            "Ingress", "PodDisruptionBudget", "ConfigMap"} <= set(kinds(docs))
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_finding_runbooks_become_urls_where_docs_are_served(chart: Any) -> None:
    def runbooks(values: dict[str, Any]) -> dict[str, str]:
        (rule,) = [d for d in render(chart, values) if d["kind"] == "PrometheusRule"]
        return {r["alert"]: r["annotations"]["runbook"] for g in rule["spec"]["groups"] for r in g["rules"]
                if "alert" in r}

    plain = runbooks({"prometheusRule": {"enabled": True}})
    assert plain["RailscopeRailLinkDown"] == "docs/codes.md#raillinkdown"
    served = runbooks({"prometheusRule": {"enabled": True, "runbookBaseURL": "https://git.example.com/rs/blob/v0.1.0/"}})
    assert served["RailscopeRailLinkDown"] == "https://git.example.com/rs/blob/v0.1.0/docs/codes.md#raillinkdown"
    assert served["RailscopeFinding"] == "https://git.example.com/rs/blob/v0.1.0/docs/codes.md#{{ $labels.code | toLower }}"
    # the agent's own alerts keep their text
    assert served["RailscopeAgentDown"] == plain["RailscopeAgentDown"] and "docs/" not in plain["RailscopeAgentDown"]


def test_agents_reach_a_tls_collector_over_https_and_verify_it(chart: Any) -> None:
    from tests.support.chart import env_of

    docs = render(chart, ON)
    env = env_of(docs)
    assert env["RAILSCOPE_COLLECTOR"]["value"] == f"https://rs-railscope-collector.{NAMESPACE}.svc:9842"
    assert env["RAILSCOPE_COLLECTOR_CA_FILE"]["value"] == "/var/run/secrets/railscope/collector-ca.crt"
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (vol,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "collector-token"]
    secret = [src["secret"] for src in vol["projected"]["sources"] if "secret" in src]
    assert secret == [{"name": "railscope-collector-tls", "optional": True,
                       "items": [{"key": "ca.crt", "path": "collector-ca.crt"}]}]
    plain = env_of(render(chart, {"collector": {**ON["collector"], "tls": {"plainHttp": True}}}))
    assert plain["RAILSCOPE_COLLECTOR"]["value"].startswith("http://") and "RAILSCOPE_COLLECTOR_CA_FILE" not in plain


def test_the_collector_judges_with_every_expectation_the_agents_are_given(chart: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every judging flag that a RAILSCOPE_<FLAG> variable states and that the agent's values set reaches the
    collector's environment too: a new expectation (--expect-mtu, --expect-driver, --ber-warning) cannot be
    left out of its pages' judgement."""
    import re
    from pathlib import Path

    import yaml

    from agent.config import EXPECTATION_FLAGS
    from agent.expectations import add_expectation_flags, expectations_from_env

    probe = argparse.ArgumentParser(add_help=False)
    add_expectation_flags(probe)
    by_variable = {o for a in probe._actions for o in a.option_strings} - {"--net-template", "--rdma-template"}
    agent_values = yaml.safe_load((Path(CHART) / "values.yaml").read_text())["agent"]
    found = re.search(r'define "railscope.expectationKeys" -}}\s*(.*?)\s*{{-',
                      (Path(CHART) / "templates" / "_helpers.tpl").read_text(), re.S)
    assert found is not None
    keys = set(found.group(1).split(" "))  # as the template splits it: one line, single spaces
    camel = {flag: re.sub(r"-(\w)", lambda m: m.group(1).upper(), flag.lstrip("-")) for flag in EXPECTATION_FLAGS.values()}
    # kernelTable is a file both pods mount; each bundle records its own node's rows of the cabling map
    missing = [flag for flag, key in camel.items()
               if flag in by_variable and key in agent_values and key not in ("kernelTable", "cabling")
               and key not in keys]
    assert missing == []

    values = {**ON, "agent": {"expectMtu": 4200, "expectDriver": "doca", "berWarning": 1e-3, "berCritical": 2e-3,
                              "berWindow": "10m"}}
    settings(render(chart, values), monkeypatch)
    exp = expectations_from_env()
    assert (exp.mtu, exp.driver, exp.ber_warning, exp.ber_critical, exp.ber_window_s) == (
        4200, "doca", 1e-3, 2e-3, 600.0)
