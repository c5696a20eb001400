"""The node agent's Helm chart (``deploy/helm/railscope``), rendered by the real Helm engine.

helm-python-sdk binds Helm's own Go SDK (no helm binary); kubernetes-validate carries the Kubernetes
OpenAPI schemas, so every rendered object is checked offline, strictly (an unknown field fails).
The prometheus-operator objects have no schema there: they are checked against the fields of the
operator's CRDs that the chart uses. The environment and arguments the DaemonSet gives the agent are
fed to the agent's real flag parser, so a value that the agent would refuse fails here.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

try:
    import helm_python as helm
    import kubernetes_validate
    import yaml
except (ImportError, OSError) as exc:  # OSError: the bundled libhelm_c.so does not load here
    pytest.skip(f"chart tests need helm-python-sdk, kubernetes-validate and PyYAML: {exc}",
                allow_module_level=True)


from agent.cli import build_parser
from agent.commands.agent import settings_from_args
from agent.commands.agent import table as agent_table
from agent.config import DEFAULT_PORT, RESERVED_PORTS
from agent.readers.kernel_table import load_kernel_table
from agent.readers.ovs import DB_SOCKETS
from agent.readers.udev import NET_RULES, RDMA_RULES
from tests.support.chart import (
    CHART,
    FULL_AGENT,
    K8S_VERSIONS,
    NAMESPACE,
    RELEASE,
    Docs,
    check_crd_object,
    container,
    env_of,
    kebab,
    kinds,
    only,
    pod_spec,
    render,
)

ROOT = Path(__file__).resolve().parents[3]
RULES_SOURCE = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"
RULES_COPY = CHART / "files" / "railscope-rules.yaml"
#: Flags the chart fixes instead of exposing as values (see the head of values.yaml), as the agent's
#: settings table declares them.
FIXED_FLAGS = {s.flag for s in agent_table() if s.chart in ("fixed", "none")}


VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "agent": FULL_AGENT,
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                           "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_ip"], "targetLabel": "ip"}],
                           "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "railscope_agent_.*",
                                                  "action": "drop"}]},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "priorityClassName": "system-node-critical",
        "podAnnotations": {"example.com/owner": "network"},
        "podLabels": {"team": "network"},
        "imagePullSecrets": [{"name": "regcred"}],
        # Helm merges maps: the default label is removed with null.
        "nodeSelector": {"feature.node.kubernetes.io/pci-15b3.present": None, "nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "serviceAccount": {"annotations": {"example.com/purpose": "railscope"}},
    },
    "monitoring-only": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "no-ovs-no-service-account": {"ovs": {"enabled": False}, "serviceAccount": {"create": False},
                                  "fullnameOverride": "railscope-agent"},
    # Helm holds numbers as floats, and Go prints a float of a million or more as 1e+06.
    "round-numbers": {"agent": {"port": 10000, "eventQueue": 1000000, "eventHistory": 123456789},
                      "terminationGracePeriodSeconds": 1000000, "serviceMonitor": {"enabled": True}},
}


def agent_parser() -> argparse.ArgumentParser:
    parser = build_parser(only="agent")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["agent"]


def agent_flags() -> set[str]:
    return {opt for a in agent_parser()._actions for opt in a.option_strings if opt.startswith("--")} - {"--help", "--version"}


def agent_settings(docs: Docs, monkeypatch: pytest.MonkeyPatch, host_root: Path) -> Any:
    """What the agent would run with: the container's environment and arguments through its parser.

    The downward API fields get a node's answers; /host (a mount in the pod) becomes ``host_root``.
    """
    downward = {"status.hostIP": "127.0.0.1", "spec.nodeName": "gpu-node-7"}
    for name in list(os.environ):
        if name.startswith("RAILSCOPE_"):
            monkeypatch.delenv(name)
    for name, e in env_of(docs).items():
        value = downward[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e else e["value"]
        if name == "RAILSCOPE_HOST_ROOT":
            assert value == "/host"
            value = str(host_root)
        if name == "RAILSCOPE_CABLING":  # read when the flag is parsed: the ConfigMap's file, as the pod has it
            (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-cabling")]
            copy = host_root / "cabling.csv"
            copy.write_text(cm["data"][os.path.basename(value)])
            value = str(copy)
        monkeypatch.setenv(name, value)
    # The flags read RAILSCOPE_* when the parser is built.
    parser = build_parser(only="agent")
    args = container(docs)["args"]
    assert args[0] == "agent"
    return settings_from_args(parser.parse_args(args))


# --- rendering and schema validation -------------------------------------------------------------


#: the node watch's RBAC (serviceAccount.nodeWatch, on by default); cluster-scoped, so no namespace
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_validates_against_kubernetes_schemas(chart: Any, name: str) -> None:
    docs = render(chart, VALUE_SETS[name])
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            check_crd_object(doc)
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == NAMESPACE


def test_kubernetes_validation_catches_a_bad_object(chart: Any) -> None:
    # Guards the guard: a misspelt field in the DaemonSet must fail the strict validation above.
    ds = only(render(chart), "DaemonSet")
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)


def test_defaults_render_the_agent_without_prometheus_operator_objects(chart: Any) -> None:
    # serviceMonitor.enabled is "auto": an offline render knows no monitoring.coreos.com API.
    assert kinds(render(chart)) == [*CLUSTER_SCOPED, "DaemonSet", "Service", "ServiceAccount"]
    assert kinds(render(chart, VALUE_SETS["monitoring-only"])) == [
        *CLUSTER_SCOPED, "DaemonSet", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"]
    assert kinds(render(chart, {"serviceMonitor": {"enabled": False}, "service": {"enabled": False}})) == [
        *CLUSTER_SCOPED, "DaemonSet", "ServiceAccount"]


def render_on_cluster_serving(chart: Any, values: dict[str, Any], api_versions: list[str]) -> Docs:
    """Render as on a cluster that serves ``api_versions`` (``helm template --api-versions``).

    The SDK's Python wrapper does not expose this render option; its C call takes it.
    """
    try:
        from helm_python import _native
    except ImportError as exc:
        pytest.skip(f"this helm-python-sdk has no C call module: {exc}")
    opts = {"name": RELEASE, "namespace": NAMESPACE, "api_versions": api_versions}
    try:
        out = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts)))
    except helm.HelmInvalidArgError as exc:
        pytest.skip(f"this helm-python-sdk renders no api_versions: {exc}")
    return [d for path in sorted(out) if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(out[path]) if d]


def test_auto_follows_the_apis_the_cluster_serves(chart: Any) -> None:
    auto = {"serviceMonitor": {"enabled": "auto"}, "prometheusRule": {"enabled": "auto"}}
    both = ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"]
    assert kinds(render_on_cluster_serving(chart, auto, both)) == [
        *CLUSTER_SCOPED, "DaemonSet", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"]
    assert kinds(render_on_cluster_serving(chart, auto, both[:1])) == [
        *CLUSTER_SCOPED, "DaemonSet", "Service", "ServiceAccount", "ServiceMonitor"]
    off = {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}
    assert kinds(render_on_cluster_serving(chart, off, both)) == [*CLUSTER_SCOPED, "DaemonSet", "Service", "ServiceAccount"]


@pytest.mark.parametrize("name", ["defaults", "everything"])
def test_helm_lint_passes_strict(chart: Any, name: str) -> None:
    report = helm.lint(CHART, copy.deepcopy(VALUE_SETS[name]) or None, strict=True, namespace=NAMESPACE)
    errors = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not errors, report


@pytest.mark.parametrize("values, where", [
    ({"agent": {"linksIntervall": "10s"}}, "linksIntervall"),
    ({"agent": {"port": 9100}}, "/agent/port"),
    ({"agent": {"losslessPrio": 8}}, "/agent/losslessPrio"),
    ({"agent": {"expectEswitchMode": "switchdev2"}}, "/agent/expectEswitchMode"),
    ({"agent": {"flapWindow": "5 minutes"}}, "/agent/flapWindow"),
    ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
    ({"agent": {"kernelTable": [{"driver": "26.01"}]}}, "/agent/kernelTable/0"),
])
def test_values_the_agent_would_refuse_fail_at_install(chart: Any, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(chart, values)


def test_service_monitor_without_its_service_fails_with_a_reason(chart: Any) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"service\.enabled"):
        render(chart, {"serviceMonitor": {"enabled": True}, "service": {"enabled": False}})


# --- network: host network, node IP, never every address -----------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_agent_listens_on_the_node_ip_in_the_host_network(chart: Any, name: str) -> None:
    values = VALUE_SETS[name]
    docs = render(chart, values)
    spec = pod_spec(docs)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    env = env_of(docs)
    assert env["RAILSCOPE_LISTEN"] == {"name": "RAILSCOPE_LISTEN",
                                       "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
    assert env["RAILSCOPE_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "RAILSCOPE_LISTEN_ANY" not in env
    c = container(docs)
    assert not any(a.startswith(("--listen", "--node")) for a in c["args"])
    port = values.get("agent", {}).get("port", DEFAULT_PORT)
    assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    assert env["RAILSCOPE_PORT"]["value"] == str(port)
    if values.get("service", {}).get("enabled", True):
        assert only(docs, "Service")["spec"]["ports"][0]["port"] == port
    text = json.dumps(docs)
    assert "0.0.0.0" not in text and '"::"' not in text


def test_default_port_is_the_agents_and_clear_of_other_exporters(chart: Any) -> None:
    assert chart.values["agent"]["port"] == DEFAULT_PORT
    assert DEFAULT_PORT not in RESERVED_PORTS


def test_agent_settings_from_the_default_pod(chart: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = agent_settings(render(chart), monkeypatch, tmp_path)
    assert s.listen == "127.0.0.1"
    assert s.node == "gpu-node-7"
    assert s.port == DEFAULT_PORT
    assert s.host_root == str(tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port not in RESERVED_PORTS
    return port


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.slow
def test_the_pod_command_answers_its_probes_and_stops_on_sigterm(chart: Any, tmp_path: Path) -> None:
    # The container's own arguments and environment, this machine standing in for the node.
    docs = render(chart, {"agent": {"port": _free_port(), "expectEswitchMode": "switchdev"}})
    c = container(docs)
    downward = {"status.hostIP": "127.0.0.1", "spec.nodeName": "gpu-node-7"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILSCOPE_")}
    for name, e in env_of(docs).items():
        if "valueFrom" in e:
            env[name] = downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[name] = "/" if name == "RAILSCOPE_HOST_ROOT" else e["value"]
    # The chart's host path and emptyDir, placed here instead of on this machine.
    env["RAILSCOPE_SPOOL"] = str(tmp_path / "spool")
    env["RAILSCOPE_DATA_SOCKET"] = str(tmp_path / "run/agent.sock")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probes = {kind: c[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    log = tmp_path / "agent.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", *c["args"]], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        status: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            status = {kind: _get(f"http://127.0.0.1:{ports[g['port']]}{g['path']}") for kind, g in probes.items()}
            if all(code == 200 for code in status.values()):
                break
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()
        assert status == {"livenessProbe": 200, "readinessProbe": 200}, log.read_text()
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0, log.read_text()


# --- host access: read-only mounts, least capabilities ---------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_host_mounts_are_read_only_and_cover_what_the_readers_read(chart: Any, name: str) -> None:
    values = VALUE_SETS[name]
    docs = render(chart, values)
    spec = pod_spec(docs)
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = container(docs)["volumeMounts"]
    host_mounts = [m for m in mounts if m["name"] in host_paths]
    assert host_mounts
    # The one writable host path is the agent's own node spool (its bundles survive a restart).
    spool = values.get("agent", {}).get("spool", chart.values["agent"]["spool"])
    for m in host_mounts:
        if m["name"] == "spool":
            assert host_paths["spool"] == m["mountPath"] == spool and spool.startswith("/var/lib/railscope")
            continue
        assert m.get("readOnly") is True, m
    # Never the node's root or the whole of /etc: the agent needs only a few directories.
    assert not {"/", "/etc", "/var", "/run", "/var/run"} & set(host_paths.values())
    # What the agent sees under --host-root /host is the node's same path.
    under_host = {m["mountPath"][len("/host"):]: host_paths[m["name"]]
                  for m in host_mounts if m["mountPath"].startswith("/host/")}
    assert all(inside == node for inside, node in under_host.items())
    needed = ["/sys/class/net", "/proc/sys/kernel/osrelease", "/proc/cmdline", "/etc/modprobe.d/ib_core.conf",
              NET_RULES, RDMA_RULES]
    if values.get("ovs", {}).get("enabled", True):
        needed.append(DB_SOCKETS[0])
        # ovs-vsctl itself connects to its compiled-in socket path in the container.
        assert any(m["mountPath"] == os.path.dirname(DB_SOCKETS[0]) and m.get("readOnly") for m in host_mounts)
    else:
        assert not any("openvswitch" in p for p in host_paths.values())
    for path in needed:
        assert any(path == d or path.startswith(d.rstrip("/") + "/") for d in under_host), path
    assert env_of(docs)["RAILSCOPE_HOST_ROOT"]["value"] == "/host"


def test_least_privilege_by_default(chart: Any) -> None:
    docs = render(chart)
    spec = pod_spec(docs)
    sc = container(docs)["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False
    assert only(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert "SYS_ADMIN" not in json.dumps(docs)
    assert not spec.get("hostPID") and not spec.get("hostIPC")
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # The root filesystem is read-only: the one writable place is a bounded scratch directory.
    scratch = [v for v in spec["volumes"] if "emptyDir" in v]
    # (and the data socket's directory, in memory, a socket and nothing else)
    assert [v["emptyDir"]["sizeLimit"] for v in scratch] == ["256Mi", "1Mi"]


def test_extra_capabilities_are_added_only_when_asked(chart: Any) -> None:
    sc = container(render(chart, {"extraCapabilities": ["SYS_ADMIN"]}))["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "SYS_ADMIN"]}


def test_resources_scheduling_and_rollout(chart: Any) -> None:
    docs = render(chart)
    c = container(docs)
    assert set(c["resources"]) == {"requests", "limits"}
    assert c["resources"]["limits"]["memory"] == "192Mi"
    spec = pod_spec(docs)
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-15b3.present": "true"}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert "priorityClassName" not in spec
    assert only(docs, "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    custom = pod_spec(render(chart, VALUE_SETS["everything"]))
    assert custom["priorityClassName"] == "system-node-critical"
    assert custom["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert custom["tolerations"] == VALUE_SETS["everything"]["tolerations"]
    assert custom["affinity"] == VALUE_SETS["everything"]["affinity"]
    assert custom["imagePullSecrets"] == [{"name": "regcred"}]


def test_probes_use_the_agents_health_endpoints(chart: Any) -> None:
    c = container(render(chart))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


# --- values map one to one onto the agent's flags ------------------------------------------------


def test_agent_values_are_exactly_the_agents_flags(chart: Any) -> None:
    values = {kebab(k) for k in chart.values["agent"]}
    flags = agent_flags()
    assert values == flags - FIXED_FLAGS
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert {kebab(k) for k in schema["properties"]["agent"]["properties"]} == values
    assert set(FULL_AGENT) == set(chart.values["agent"])


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_variable_and_argument_is_an_agent_flag(chart: Any, name: str) -> None:
    docs = render(chart, VALUE_SETS[name])
    flags = agent_flags()
    for var in env_of(docs):
        assert var.startswith("RAILSCOPE_"), var
        assert "--" + var[len("RAILSCOPE_"):].lower().replace("_", "-") in flags, var
    for arg in container(docs)["args"][1:]:
        assert not arg.startswith("-") or arg in flags, arg


def test_round_numbers_stay_integers(chart: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs = render(chart, VALUE_SETS["round-numbers"])
    assert pod_spec(docs)["terminationGracePeriodSeconds"] == 1000000
    s = agent_settings(docs, monkeypatch, tmp_path)
    assert (s.port, s.event_queue, s.event_history) == (10000, 1000000, 123456789)


def test_null_values_leave_the_agents_defaults(chart: Any) -> None:
    # besides the node spool and the data socket, which the chart places (a host path, an emptyDir)
    # and the budget, which is the pod's own limits
    assert set(env_of(render(chart))) == {"RAILSCOPE_LISTEN", "RAILSCOPE_NODE", "RAILSCOPE_HOST_ROOT",
                                          "RAILSCOPE_PORT", "RAILSCOPE_SPOOL", "RAILSCOPE_DATA_SOCKET",
                                          "RAILSCOPE_BUDGET_CPU", "RAILSCOPE_BUDGET_RSS"}
    assert container(render(chart))["args"] == ["agent"]


def test_every_value_reaches_the_agent(chart: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs = render(chart, VALUE_SETS["everything"])
    env = env_of(docs)
    # Helm holds numbers as floats; the agent's integer flags must not see 2e+06.
    assert env["RAILSCOPE_EVENT_HISTORY"]["value"] == "2000000"
    assert env["RAILSCOPE_EXPECT_ESW_MULTIPORT"]["value"] == "false"
    s = agent_settings(docs, monkeypatch, tmp_path)
    assert (s.port, s.cluster, s.node, s.listen) == (9850, "gpu-east-1", "gpu-node-7", "127.0.0.1")
    iv = dict(s.intervals)
    assert (iv["links"], iv["devlink"], iv["rdma"], iv["config"]) == (20, 120, 90, 300)
    assert iv["health"] == 300
    assert (iv["counters"], s.source_deadline_s, s.command_timeout_s) == (2, 30, 7)
    assert s.read.devlink_params == ("esw_multiport",)
    assert s.disabled == frozenset({"rdma"})
    assert s.read.command_timeout_s == 7
    assert s.representor_include == "^pf0vf[0-3]$"
    assert (s.recorder_window_s, s.event_history, s.event_queue) == (600, 2000000, 512)
    assert (s.collector_url, s.collector_token_file, s.upload_interval_s) == (
        "http://rs-railscope-collector.railscope:9842", "/var/run/secrets/railscope/collector-token", 60)
    assert (s.capture_on, s.capture_cooldown_s, s.capture_deadline_s) == (frozenset({"LinkFlapping", "PfcStorm"}),
                                                                          900, 120)
    assert (s.spool_dir, s.spool_max_bytes) == ("/var/lib/railscope/spool", 536870912)
    assert (s.data_socket, s.data_token_file) == ("/run/railscope/agent.sock", "/etc/railscope/data-token")
    assert dict(s.thresholds) == {"flap_count": 4, "flap_window_s": 180, "config_flap_changes": 3,
                                  "config_flap_window_s": 1200, "representor_grace_s": 120, "storm_ratio": 0.25,
                                  "storm_window_s": 90, "reload_grace_s": 45}
    e = s.expectations
    assert (e.lossless_prio, e.eswitch_mode, e.esw_multiport, e.rdma_netns, e.rails) == (
        5, "switchdev", False, "exclusive", 8)
    assert e.net_templates == ("net_rail%rail_id%", "net_rail%rail_id%_plane%plane_id%")
    assert e.rdma_templates == ("rdma_rail%rail_id%",)
    assert e.event_window_s == 1800
    assert e.kernel_table_file == "/etc/railscope/kernel-table.json"
    assert e.cabling == (("gpu-node-017", "0", "leaf-02", "swp1"),)
    assert s.read.net_templates == e.net_templates


def test_log_level_reaches_the_agent(chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The log level is applied by the command, not held in the settings: read it off the parsed flags.
    env = env_of(render(chart, {"agent": {"logLevel": "warning"}}))
    monkeypatch.delenv("RAILSCOPE_LOG_LEVEL", raising=False)
    assert agent_parser().parse_args([]).log_level == "info"
    monkeypatch.setenv("RAILSCOPE_LOG_LEVEL", env["RAILSCOPE_LOG_LEVEL"]["value"])
    assert agent_parser().parse_args([]).log_level == "warning"


def test_kernel_table_rows_become_the_file_the_agent_loads(chart: Any, tmp_path: Path) -> None:
    docs = render(chart, {"agent": {"kernelTable": FULL_AGENT["kernelTable"]}})
    cm = only(docs, "ConfigMap")
    path = env_of(docs)["RAILSCOPE_KERNEL_TABLE"]["value"]
    (volume,) = [v for v in pod_spec(docs)["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert os.path.join(mount["mountPath"], os.path.basename(path)) == path
    table = tmp_path / os.path.basename(path)
    table.write_text(cm["data"][os.path.basename(path)])
    rows = load_kernel_table(str(table))
    extra = [r for r in rows if r.flavour == "nvidia" and r.max_abi == "6.8.0-1020"]
    assert len(extra) == 1 and len(rows) == len(load_kernel_table()) + 1
    # A changed table restarts the pods: the agent reads the file once.
    annotations = only(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    changed = {"agent": {"kernelTable": [dict(FULL_AGENT["kernelTable"][0], max_abi="6.8.0-1030")]}}
    again = only(render(chart, changed), "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/kernel-table"] != again["checksum/kernel-table"]


# --- Prometheus: ServiceMonitor and rules ----------------------------------------------------------


def test_service_monitor_scrapes_the_agents_and_sets_node(chart: Any) -> None:
    docs = render(chart, VALUE_SETS["everything"])
    sm = only(docs, "ServiceMonitor")
    svc = only(docs, "Service")
    ds = only(docs, "DaemonSet")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The monitor selects the Service, the Service selects the agent pods, on the agent's port.
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert svc["spec"]["clusterIP"] == "None"
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["port"] == FULL_AGENT["port"] and svc_port["targetPort"] == "metrics"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == svc_port["name"]
    assert endpoint["path"] == "/metrics"
    relabel = endpoint["relabelings"]
    assert relabel[0] == {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                          "action": "replace"}
    assert relabel[1:] == VALUE_SETS["everything"]["serviceMonitor"]["relabelings"]
    assert endpoint["metricRelabelings"] == VALUE_SETS["everything"]["serviceMonitor"]["metricRelabelings"]


def test_rules_copy_equals_the_source() -> None:
    assert RULES_COPY.read_bytes() == RULES_SOURCE.read_bytes(), (
        f"copy {RULES_SOURCE.relative_to(ROOT)} to {RULES_COPY.relative_to(ROOT)}")


def test_prometheus_rule_carries_the_rules_groups(chart: Any) -> None:
    source = yaml.safe_load(RULES_SOURCE.read_text())
    rule = only(render(chart, VALUE_SETS["monitoring-only"]), "PrometheusRule")
    assert rule["spec"]["groups"] == source["groups"]
    # Alert templates reach Prometheus as written, not expanded by Helm.
    assert "{{ $labels.node }}" in json.dumps(rule)


def test_prometheus_rule_follows_the_lossless_priority(chart: Any) -> None:
    text = RULES_SOURCE.read_text()
    assert 'prio="3"' in text
    rule = only(render(chart, VALUE_SETS["everything"]), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(text.replace('prio="3"', 'prio="5"'))["groups"]
    assert 'prio=\\"3\\"' not in json.dumps(rule)
    zero = only(render(chart, {"prometheusRule": {"enabled": True}, "agent": {"losslessPrio": 0}}),
                "PrometheusRule")
    assert 'prio=\\"0\\"' in json.dumps(zero)


@pytest.mark.parametrize("values", [{"agent": {"collector": "http://rs-railscope-collector.railscope:9842"}},
                                    {"collector": {"enabled": True, "store": "s3://b/p", "tls": {"secret": "tls"}}}],
                         ids=["agent-collector", "collector-enabled"])
def test_the_agent_presents_a_projected_audience_bound_token_to_the_collector(chart: Any,
                                                                              values: dict[str, Any]) -> None:
    docs = render(chart, values)
    spec = pod_spec(docs)
    (vol,) = [v for v in spec["volumes"] if v["name"] == "collector-token"]
    # (beside it, with the chart's TLS collector, only the CA certificate of the collector's Secret)
    (src,) = [s for s in vol["projected"]["sources"] if "serviceAccountToken" in s]
    assert src["serviceAccountToken"] == {"audience": "railscope-collector", "expirationSeconds": 3600,
                                          "path": "collector-token"}
    assert vol["projected"]["defaultMode"] == 0o400  # the agent's token reader refuses 0644
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == "collector-token"]
    assert mount["readOnly"] is True
    path = env_of(docs)["RAILSCOPE_COLLECTOR_TOKEN_FILE"]["value"]
    assert path == mount["mountPath"] + "/" + src["serviceAccountToken"]["path"]
    assert spec["automountServiceAccountToken"] is False  # only the bound token, not the API token
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(only(docs, "DaemonSet"), version, strict=True)


def test_the_audience_follows_the_collectors_and_no_token_without_a_collector(chart: Any) -> None:
    docs = render(chart, {"agent": {"collector": "http://c:9842"}, "collector": {"flags": {"agentAudience": "rs-x"}}})
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "collector-token"]
    assert vol["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "rs-x"
    docs = render(chart)
    assert not [v for v in pod_spec(docs)["volumes"] if v["name"] == "collector-token"]
    assert "RAILSCOPE_COLLECTOR_TOKEN_FILE" not in env_of(docs)


def test_the_node_watch_has_its_rbac_and_an_api_token_only_when_enabled(chart: Any) -> None:
    docs = render(chart)
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-node-watch")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["subjects"][0]["name"] == pod_spec(docs)["serviceAccountName"]
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "kube-api-access"]
    sources = vol["projected"]["sources"]
    # what agent/service/maintenance.py reads: token and ca.crt in the in-cluster directory
    assert [s["serviceAccountToken"]["path"] for s in sources if "serviceAccountToken" in s] == ["token"]
    assert "audience" not in sources[0]["serviceAccountToken"]  # the API server's own audience
    assert any(s.get("configMap", {}).get("name") == "kube-root-ca.crt" for s in sources)
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == "kube-api-access"]
    assert mount == {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                     "readOnly": True}
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(only(docs, "DaemonSet"), version, strict=True)
        kubernetes_validate.validate(role, version, strict=True)
        kubernetes_validate.validate(binding, version, strict=True)
    off = render(chart, {"serviceAccount": {"nodeWatch": False}})
    assert not [d for d in off if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
                and d["metadata"]["name"].endswith("-node-watch")]
    assert not [v for v in pod_spec(off)["volumes"] if v["name"] == "kube-api-access"]


def test_the_agents_budget_is_the_pods_own_limits(chart: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs = render(chart)
    env = env_of(docs)
    limits = container(docs)["resources"]["limits"]
    assert (env["RAILSCOPE_BUDGET_CPU"]["value"], env["RAILSCOPE_BUDGET_RSS"]["value"]) == (limits["cpu"], limits["memory"])
    s = agent_settings(docs, monkeypatch, tmp_path)
    assert (s.budget_cpu, s.budget_rss) == (0.5, 192 << 20)
    # An explicit budget wins over the limits; no limits, no budget.
    s = agent_settings(render(chart, {"agent": {"budgetCpu": "250m"}}), monkeypatch, tmp_path)
    assert s.budget_cpu == 0.25
    assert "RAILSCOPE_BUDGET_CPU" not in env_of(render(chart, {"resources": {"limits": None}}))
