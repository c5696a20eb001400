"""The collector's ``/ui`` with the README's values: the values file of the README's "Deploy" section (parsed
from the README, so the test follows it) renders an Ingress that serves TLS, speaks HTTPS to the
collector's TLS-only port and is admitted by the collector's NetworkPolicy; agent pods start with a TLS
Secret that has no ``ca.crt`` (``kubectl create secret tls``, an ACME issuer of cert-manager); the chart
README's claims about priority and Alertmanager's webhook match the templates."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support import ROOT, script
from tests.support.chart import CHART, NAMESPACE, pod_spec, render

#: What `kubectl create secret tls` (and cert-manager with an ACME issuer) writes: no ca.crt.
TLS_SECRET_KEYS = {"tls.crt", "tls.key"}


def readme_values() -> dict[str, Any]:
    readme_commands = script("scripts/readme_commands.py")
    block = readme_commands.blocks((ROOT / "README.md").read_text(encoding="utf-8"))["deploy-values"]
    return yaml.safe_load("\n".join(block).replace("<registry>", "registry.example.com"))


def _objects(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _collector_pods_port(docs: list[dict[str, Any]]) -> set[Any]:
    (dep,) = _objects(docs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return {p for port in c["ports"] for p in (port["name"], port["containerPort"])}


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels (matchLabels and matchExpressions; an empty selector selects all)."""
    if selector is None:
        return False
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]
        if not ok:
            return False
    return True


def admitted(np: dict[str, Any], namespace_labels: dict[str, str], pod_labels: dict[str, str], ports: set[Any]) -> bool:
    """Whether a NetworkPolicy lets a pod (of another namespace) in to one of ``ports`` of the selected pods."""
    for rule in np["spec"].get("ingress", []):
        allowed_port = not rule.get("ports") or any(p.get("port") in ports for p in rule["ports"])
        for peer in rule.get("from", []):
            if "ipBlock" in peer:
                continue
            ns_ok = _matches(peer["namespaceSelector"], namespace_labels) if "namespaceSelector" in peer \
                else namespace_labels.get("kubernetes.io/metadata.name") == NAMESPACE
            pod_ok = _matches(peer["podSelector"], pod_labels) if "podSelector" in peer else True
            if allowed_port and ns_ok and pod_ok:
                return True
    return False


#: The pods of the ingress-nginx chart's controller, in its usual namespace.
NGINX_NS = {"kubernetes.io/metadata.name": "ingress-nginx"}
NGINX_POD = {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/instance": "ingress-nginx",
             "app.kubernetes.io/component": "controller"}


def test_the_readme_values_admit_the_ingress_controller(chart: Any) -> None:
    docs = render(chart, readme_values())
    (np,) = _objects(docs, "NetworkPolicy")
    assert admitted(np, NGINX_NS, NGINX_POD, _collector_pods_port(docs)), np["spec"]["ingress"]
    # a pod of another name, or the controller's labels in another namespace, is not
    assert not admitted(np, NGINX_NS, {"app.kubernetes.io/name": "debug"}, _collector_pods_port(docs))
    assert not admitted(np, {"kubernetes.io/metadata.name": "tenant-a"}, NGINX_POD, _collector_pods_port(docs))
    # the controller's peer is a value: another controller's namespace and pods
    traefik = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "traefik"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "traefik"}}}]
    values = readme_values()
    values["collector"]["networkPolicy"]["ingressController"] = traefik
    (np,) = _objects(render(chart, values), "NetworkPolicy")
    assert admitted(np, {"kubernetes.io/metadata.name": "traefik"}, {"app.kubernetes.io/name": "traefik"},
                    _collector_pods_port(docs))
    assert not admitted(np, NGINX_NS, NGINX_POD, _collector_pods_port(docs))
    # without the Ingress, the controller has no business with the collector
    values = readme_values()
    values["collector"]["ingress"]["enabled"] = False
    (np,) = _objects(render(chart, values), "NetworkPolicy")
    assert not admitted(np, NGINX_NS, NGINX_POD, _collector_pods_port(docs))


def test_the_readme_values_ingress_serves_tls_and_speaks_https_to_the_collector(chart: Any) -> None:
    values = readme_values()
    (ing,) = _objects(render(chart, values), "Ingress")
    host = values["collector"]["ingress"]["host"]
    (tls,) = ing["spec"]["tls"]
    assert tls["secretName"] and tls["hosts"] == [host], ing["spec"]
    # the collector serves TLS only: ingress-nginx must connect with HTTPS
    assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTPS"
    # behind a plain-HTTP collector (TLS ends in a sidecar) the controller speaks HTTP
    values["collector"]["tls"] = {"plainHttp": True}
    (ing,) = _objects(render(chart, values), "Ingress")
    assert "nginx.ingress.kubernetes.io/backend-protocol" not in (ing["metadata"].get("annotations") or {})
    # another controller's annotations are values; the operator's own annotations are kept
    values = readme_values()
    values["collector"]["ingress"]["className"] = "haproxy"
    values["collector"]["ingress"]["backendTlsAnnotations"] = {"haproxy.org/server-ssl": "true"}
    values["collector"]["ingress"]["annotations"] = {"example.com/team": "network"}
    (ing,) = _objects(render(chart, values), "Ingress")
    assert ing["metadata"]["annotations"].items() >= {"haproxy.org/server-ssl": "true",
                                                      "example.com/team": "network"}.items()
    # the ingress-nginx default is a map key like any: null removes it
    values["collector"]["ingress"]["backendTlsAnnotations"] = {"nginx.ingress.kubernetes.io/backend-protocol": None}
    (ing,) = _objects(render(chart, values), "Ingress")
    assert ing["metadata"]["annotations"] == {"example.com/team": "network"}


def test_an_ingress_without_tls_is_refused_unless_insecure(chart: Any) -> None:
    import helm_python as helm

    values = readme_values()
    values["collector"]["ingress"].pop("tls", None)
    with pytest.raises(helm.HelmRenderError, match=r"collector\.ingress\.tls\.secretName"):
        render(chart, values)
    values["collector"]["ingress"]["insecureHttp"] = True
    (ing,) = _objects(render(chart, values), "Ingress")
    assert "tls" not in ing["spec"]


def _kubelet_refusals(spec: dict[str, Any], secrets: dict[str, set[str]]) -> list[str]:
    """What the kubelet would leave a pod in ContainerCreating for: a Secret key a volume (plain or projected)
    or an env var needs that the Secret does not hold, unless the reference is optional."""
    missing = []

    def need(name: str, key: str | None, optional: bool | None, where: str) -> None:
        keys = secrets.get(name)
        if optional:
            return
        if keys is None or (key is not None and key not in keys):
            missing.append(f"{where}: secret {name} key {key}")

    for vol in spec.get("volumes", []):
        if "secret" in vol:
            s = vol["secret"]
            for item in s.get("items") or [{"key": None}]:
                need(s["secretName"], item["key"], s.get("optional"), vol["name"])
        for src in vol.get("projected", {}).get("sources", []):
            if "secret" in src:
                s = src["secret"]
                for item in s.get("items") or [{"key": None}]:
                    need(s["name"], item["key"], s.get("optional"), vol["name"])
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                need(ref["name"], ref["key"], ref.get("optional"), e["name"])
    return missing


def test_agents_start_with_a_tls_secret_without_ca_crt(chart: Any) -> None:
    values = readme_values()
    docs = render(chart, values)
    secret = values["collector"]["tls"]["secret"]
    assert _kubelet_refusals(pod_spec(docs), {secret: TLS_SECRET_KEYS}) == []
    # the agent is still told where the CA would be: present, it verifies the collector with it
    (ds,) = _objects(docs, "DaemonSet")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RAILSCOPE_COLLECTOR_CA_FILE"] == "/var/run/secrets/railscope/collector-ca.crt"


def test_a_separate_ca_secret_or_config_map_is_the_agents_ca(chart: Any) -> None:
    values = readme_values()
    values["collector"]["tls"]["caSecret"] = "fleet-ca"
    docs = render(chart, values)
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "collector-token"]
    (src,) = [s for s in vol["projected"]["sources"] if "secret" in s]
    assert src["secret"]["name"] == "fleet-ca" and src["secret"]["items"] == [{"key": "ca.crt", "path": "collector-ca.crt"}]
    # named, it must be there: no silent fallback to the system's CAs
    assert _kubelet_refusals(pod_spec(docs), {"railscope-collector-tls": TLS_SECRET_KEYS}) != []
    (amc,) = _objects(docs, "AlertmanagerConfig")
    assert amc["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["tlsConfig"]["ca"] == {
        "secret": {"name": "fleet-ca", "key": "ca.crt"}}
    values["collector"]["tls"] = {"secret": "railscope-collector-tls", "caConfigMap": "fleet-ca-bundle",
                                  "caKey": "trust-bundle.pem"}
    docs = render(chart, values)
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "collector-token"]
    (src,) = [s for s in vol["projected"]["sources"] if "configMap" in s]
    assert src["configMap"] == {"name": "fleet-ca-bundle", "items": [{"key": "trust-bundle.pem",
                                                                       "path": "collector-ca.crt"}]}
    assert not [s for s in vol["projected"]["sources"] if "secret" in s]
    (amc,) = _objects(docs, "AlertmanagerConfig")
    assert amc["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["tlsConfig"]["ca"] == {
        "configMap": {"name": "fleet-ca-bundle", "key": "trust-bundle.pem"}}


CHART_README = (CHART / "README.md").read_text(encoding="utf-8")


def test_the_chart_readme_priority_claim_matches_the_templates(chart: Any) -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    rendered = pod_spec(render(chart)).get("priorityClassName")
    assert rendered == (defaults["priorityClassName"] or None)
    sentences = [s for s in re.split(r"(?<=\.)\s+", " ".join(CHART_README.split())) if "priorityClassName" in s
                 and "collector" not in s]
    assert sentences
    for s in sentences:
        # a claim that the agent pods get a class by default must name the default the templates render
        if rendered is None:
            assert "default" in s and not re.search(r"`priorityClassName=[^`]+` keeps", s), s
    set_ = pod_spec(render(chart, {"priorityClassName": "system-node-critical"}))
    assert set_["priorityClassName"] == "system-node-critical"


def test_the_chart_readme_alertmanager_webhook_is_https_with_the_ca(chart: Any) -> None:
    readme_commands = script("scripts/readme_commands.py")
    am = yaml.safe_load("\n".join(readme_commands.blocks(CHART_README)["alertmanager-webhook"]))
    (receiver,) = am["receivers"]
    (hook,) = receiver["webhook_configs"]
    # the collector the chart runs as the README installs it (release railscope, namespace railscope)
    assert hook["url"] == "https://railscope-collector.railscope.svc:9842/v1/alerts"
    assert hook["http_config"]["tls_config"]["ca_file"].endswith("ca.crt")
    assert hook["http_config"]["authorization"]["credentials_file"]
