"""The chart (deploy/helm/railscope) rendered by the real Helm engine (helm-python-sdk), and what the
chart tests read out of the objects. Importing it skips the importing module where helm-python-sdk,
kubernetes-validate or PyYAML is missing."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

try:
    import helm_python as helm
    import kubernetes_validate
    import yaml
except (ImportError, OSError) as exc:  # OSError: the bundled libhelm_c.so does not load here
    pytest.skip(f"chart tests need helm-python-sdk, kubernetes-validate and PyYAML: {exc}",
                allow_module_level=True)

import jsonschema

from tests.support import ROOT

CHART = ROOT / "deploy" / "helm" / "railscope"
RELEASE = "rs"
NAMESPACE = "railscope"
#: The oldest Kubernetes release still supported upstream when the chart was written, and the newest
#: kubernetes-validate knows.
K8S_VERSIONS = ("1.32.0", kubernetes_validate.utils.latest_version())


# The prometheus-operator (monitoring.coreos.com/v1) fields the chart emits, with the types and
# patterns of the operator's CRDs; unknown fields fail so that a misspelt key does not pass.
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABEL = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "action": {"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap",
                            "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase",
                            "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual", "dropequal",
                            "DropEqual"]},
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": _LABEL_NAME}},
        "targetLabel": {"type": "string"}, "regex": {"type": "string"}, "replacement": {"type": "string"},
        "separator": {"type": "string"}, "modulus": {"type": "integer"},
    },
}
_METADATA = {"type": "object", "required": ["name", "namespace"],
             "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                            "namespace": {"type": "string"}, "labels": _STRING_MAP}}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    "selector": {"type": "object", "additionalProperties": False,
                                 "properties": {"matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}}},
                    "namespaceSelector": {"type": "object", "additionalProperties": False,
                                          "properties": {"any": {"type": "boolean"},
                                                         "matchNames": {"type": "array",
                                                                        "items": {"type": "string"}}}},
                    "endpoints": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"}, "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                            "relabelings": {"type": "array", "items": _RELABEL},
                            "metricRelabelings": {"type": "array", "items": _RELABEL},
                        }}},
                }},
        }},
    "PrometheusRule": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {"type": "object", "additionalProperties": False, "properties": {"groups": {
                "type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "pattern": _DURATION},
                        "rules": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "additionalProperties": False, "required": ["expr"],
                            "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                            "properties": {
                                "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
                                "alert": {"type": "string", "minLength": 1},
                                "expr": {"type": ["string", "integer"]},
                                "for": {"type": "string", "pattern": _DURATION},
                                "labels": _STRING_MAP, "annotations": _STRING_MAP,
                            }}},
                    }}}}},
        }},
}


Docs = list[dict[str, Any]]


def render(chart: Any, values: dict[str, Any] | None = None) -> Docs:
    """The chart's objects for ``values``, in template order (NOTES.txt left out)."""
    out = chart.render(copy.deepcopy(values) if values else None, name=RELEASE, namespace=NAMESPACE)
    docs: Docs = []
    for path in sorted(out):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(out[path]) if d)
    return docs


def only(docs: Docs, kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def kinds(docs: Docs) -> list[str]:
    return sorted(d["kind"] for d in docs)


def pod_spec(docs: Docs) -> dict[str, Any]:
    return only(docs, "DaemonSet")["spec"]["template"]["spec"]


def container(docs: Docs) -> dict[str, Any]:
    (c,) = pod_spec(docs)["containers"]
    return c


def env_of(docs: Docs) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(docs)["env"]}


def kebab(key: str) -> str:
    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", key).lower()


def check_crd_object(doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(CRD_SCHEMAS[doc["kind"]]).validate(doc)


def load() -> Any:
    """The chart, loaded by the Helm engine; skips where helm-python-sdk cannot load its library."""
    try:
        return helm.Chart.load(CHART)
    except helm.HelmLibraryError as exc:
        pytest.skip(f"helm-python-sdk cannot load its Helm library here: {exc}")
#: Every agent value set, so that each one is rendered, validated and parsed by the agent.
FULL_AGENT = {
    "port": 9850,
    "cluster": "gpu-east-1",
    "logLevel": "debug",
    "linksInterval": "20s",
    "devlinkInterval": "2m",
    "healthInterval": "5m",
    "rdmaInterval": 90,
    "firmwareInterval": "2m",
    "gpusInterval": "5m",
    "railResources": "nvidia.com/*,rdma/*",
    "expectMtu": 9000,
    "expectDriver": "doca",
    "expectRdma": True,
    "railMap": "0=0000:0c:00.0,1=0000:8d:00.0",
    "configInterval": "5m",
    "countersInterval": 2,
    "pcieInterval": "2m",
    "thermalInterval": 30,
    "opticsInterval": "5m",
    "processesInterval": "30s",
    "headerTimeout": "5s",
    "maxConnsPerPeer": 16,
    "lldpInterval": "45s",
    "gidsInterval": "2m",
    "lldp": "listen",
    "budgetCpu": "250m",
    "budgetRss": "128Mi",
    "sourceDeadline": "30s",
    "commandTimeout": "7s",
    "captureOn": "LinkFlapping,PfcStorm",
    "captureCooldown": "15m",
    "captureDeadline": "120s",
    "spool": "/var/lib/railscope/spool",
    "spoolMaxBytes": 536870912,
    "collector": "http://rs-railscope-collector.railscope:9842",
    "collectorTokenFile": "/var/run/secrets/railscope/collector-token",
    "uploadInterval": "1m",
    "collectorCaFile": "/etc/railscope/collector-ca/ca.crt",
    "requestMinInterval": "10m",
    "requestBudget": 3,
    "allowPodNetns": True,
    "dataSocket": "/run/railscope/agent.sock",
    "dataTokenFile": "/etc/railscope/data-token",
    "devlinkParam": ["esw_multiport"],
    "disableSource": ["rdma"],
    "representorInclude": "^pf0vf[0-3]$",
    "excludeDevices": "^0000:a1:00\\.[0-7]$",
    "recorderWindow": "10m",
    "eventHistory": 2000000,
    "eventQueue": 512,
    "flapCount": 4,
    "flapWindow": "3m",
    "configFlapChanges": 3,
    "configFlapWindow": "20m",
    "representorGrace": "2m",
    "stormRatio": 0.25,
    "stormWindow": "90s",
    "reloadGrace": "45s",
    "losslessPrio": 5,
    "expectEswitchMode": "switchdev",
    "expectEswMultiport": False,
    "expectRdmaNetns": "exclusive",
    "rails": 8,
    "netTemplate": ["net_rail%rail_id%", "net_rail%rail_id%_plane%plane_id%"],
    "rdmaTemplate": ["rdma_rail%rail_id%"],
    "eventWindow": "30m",
    "berWarning": 1e-4,
    "berCritical": 1e-3,
    "berWindow": "10m",
    "kernelTable": [{"driver": "26.01", "flavour": "nvidia", "kernel_line": "6.8.0", "max_abi": "6.8.0-1020",
                     "source": "site validation 2026-11"}],
    "cabling": [{"node": "gpu-node-017", "rail": 0, "leaf": "leaf-02", "port": "swp1"}],
}

#: The collector turned on with the least it needs (a store, the token Secret, TLS).
COLLECTOR_ON = {"collector": {"enabled": True, "store": "s3://railscope-bundles/prod", "tokenSecret": "railscope-tokens",
                              "tls": {"secret": "railscope-collector-tls"}}}
