"""The chart's collector Deployment: off by default; when on, valid objects whose environment the
collector's real flag parser accepts, every flag value a collector flag, and no way to start it open."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest
from test_chart import K8S_VERSIONS, NAMESPACE, chart, kebab, kinds, render  # noqa: F401 - chart is a fixture

import kubernetes_validate  # isort: skip
import helm_python as helm  # isort: skip

from agent.cli import build_parser
from agent.commands.collector import settings_from_args

ON = {"collector": {"enabled": True, "store": "s3://railscope-bundles/prod", "tokenSecret": "railscope-tokens",
                   "tls": {"secret": "railscope-collector-tls"}}}
#: Flags the chart fixes instead of exposing under collector.flags.
FIXED = {"--listen", "--store", "--agent-token-file", "--operator-token-file", "--alerting-token-file",
         "--tokenreview-url", "--tokenreview-token-file", "--tokenreview-ca-file", "--agent-service-account",
         "--insecure-dev", "--tls-cert-file", "--tls-key-file", "--plain-http"}


def collector_parser() -> argparse.ArgumentParser:
    parser = build_parser(only="collector")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["collector"]


def flags() -> set[str]:
    return {o for a in collector_parser()._actions for o in a.option_strings if o.startswith("--")} - {"--help"}


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
    assert c["args"] == ["collector"]
    return settings_from_args(build_parser(only="collector").parse_args(c["args"]))


def test_off_by_default(chart: Any) -> None:  # noqa: F811
    assert "Deployment" not in kinds(render(chart))


def test_objects_validate(chart: Any) -> None:  # noqa: F811
    docs = render(chart, ON)
    assert {"Deployment", "ClusterRoleBinding"} <= set(kinds(docs))
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_collector_accepts_its_pod_environment(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    values = {"collector": {**ON["collector"], "flags": {
        "port": 9900, "s3EndpointUrl": "http://seaweedfs:8333", "maxBundleSize": "2G", "maxInflight": 16,
        "retryAfter": 3, "minRate": "128k", "minRateGrace": "20s", "stallTimeout": "2m", "partSize": "16M",
        "partConcurrency": 6, "partsInFlight": 12, "stalePartAge": "2h", "agentAudience": "rs", "logLevel": "debug",
        "captureOnAlert": False, "captureCooldown": "5m", "captureMaxInFlight": 40, "captureIncidentWorst": 3,
        "captureIncidentSample": 0, "captureRate": 10, "captureRateWindow": "1h", "requestTtl": "10m"},
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


def test_flag_values_are_exactly_the_collectors_flags(chart: Any) -> None:  # noqa: F811
    assert {kebab(k) for k in chart.values["collector"]["flags"]} == flags() - FIXED


def test_it_never_starts_open(chart: Any) -> None:  # noqa: F811
    with pytest.raises(helm.HelmRenderError, match="token source"):
        render(chart, {"collector": {"enabled": True, "store": "s3://b/p", "tokenReview": False}})
    with pytest.raises(helm.HelmRenderError, match="s3://"):
        render(chart, {"collector": {"enabled": True, "store": "./data"}})
    (c,) = deployment(render(chart, ON))["spec"]["template"]["spec"]["containers"]
    assert "RAILSCOPE_INSECURE_DEV" not in {e["name"] for e in c["env"]}


def test_least_privilege(chart: Any) -> None:  # noqa: F811
    pod = deployment(render(chart, ON))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod.get("hostNetwork") is not True
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert NAMESPACE == deployment(render(chart, ON))["metadata"]["namespace"]


def test_helm_lint_passes_strict_with_the_collector() -> None:
    from test_chart import CHART

    report = helm.lint(CHART, {"collector": dict(ON["collector"])}, strict=True, namespace=NAMESPACE)
    assert not report["errors"] and not [m for m in report["messages"] if m["severity"] >= 2], report


@pytest.mark.parametrize(("values", "where"), [
    ({"flags": {"maxInflight": 0}}, "/collector/flags/maxInflight"),
    ({"flags": {"maxInflights": 3}}, "maxInflights"),
    ({"tokenRoles": ["root"]}, "/collector/tokenRoles/0"),
    ({"flags": {"partSize": "8 MB"}}, "/collector/flags/partSize"),
])
def test_values_the_collector_would_refuse_fail_at_install(chart: Any, values: dict, where: str) -> None:  # noqa: F811
    import re

    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(chart, {"collector": {**ON["collector"], **values}})


def test_tls_from_a_secret_or_plain_http_only_when_asked(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
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
