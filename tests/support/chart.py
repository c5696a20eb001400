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
