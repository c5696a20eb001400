"""Fixture clusters for the Kubernetes API stand-in (``kube_api.KubeApi``): a healthy Spectrum-X cluster and
the rollout scenarios of docs/design.md §9, each a mutation of it.

The objects follow the operators' published CRDs (``tests/fixtures/public/crds/``, SOURCES.md there);
``tests/unit/test_kube_fixtures.py`` validates every object of every scenario against its CRD's
``openAPIV3Schema``. Names and values the CRDs leave open follow the operators' code: the upgrade-state label
and its start-time annotations (NVIDIA/k8s-operator-libs ``pkg/consts``, unix seconds), the SR-IOV drain
annotations (sriov-network-operator ``pkg/consts``), the NicDevice condition reasons
(nic-configuration-operator ``api/v1alpha1``), ``NoFreePrefixes`` (nvidia-k8s-ipam's CIDRPool controller).
Times are relative to ``now`` so a whole-process test sees the same ages as a pure one.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "public" / "crds"
NS = "nvidia-network-operator"
CHART = "network-operator-25.4.0"
OFED_IMAGE = "nvcr.io/nvidia/mellanox/doca-driver:25.04-0.6.1.0-2-ubuntu22.04-amd64"
OFED_OLD_IMAGE = "nvcr.io/nvidia/mellanox/doca-driver:24.10-0.7.0.0-0-ubuntu22.04-amd64"
UPGRADE_LABEL = "nvidia.com/ofed-driver-upgrade-state"
VALIDATION_START = "nvidia.com/ofed-driver-upgrade-validation-start-time"
MOFED_WAIT = "network.nvidia.com/operator.mofed.wait"
RAILS = 8

#: (DaemonSet name, image, update strategy, label that selects its pods)
DAEMONSETS = (
    ("mofed-ubuntu22.04-7c9d8c6b5-ds", OFED_IMAGE, "OnDelete", "nvidia.com/ofed-driver"),
    ("rdma-shared-dp-ds", "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3", "RollingUpdate", "app.rdma"),
    ("sriov-network-config-daemon", "ghcr.io/k8snetworkplumbingwg/sriov-network-operator-config-daemon:v1.5.0",
     "RollingUpdate", "app.sriov"),
    ("nic-configuration-daemon", "ghcr.io/mellanox/nic-configuration-operator-daemon:v1.1.1",
     "RollingUpdate", "app.nicconfig"),
)


def crds(without: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The CRDs of the fixture (every file under fixtures/public/crds), less the groups in ``without``."""
    out = []
    for f in sorted(CRD_DIR.glob("*.yaml")):
        c = yaml.safe_load(f.read_text())
        if c["spec"]["group"] not in without:
            out.append(c)
    return out


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def pci(nic: int) -> str:
    return f"0000:{0x1a + nic * 0x10:02x}:00.0"


def _cond(t: str, status: str, reason: str, now: float, msg: str = "", ago: float = 3600) -> dict[str, Any]:
    return {"type": t, "status": status, "reason": reason, "message": msg, "lastTransitionTime": iso(now - ago)}


def healthy(nodes: int = 4, nics: int = RAILS, now: float | None = None, spectrum_x: bool = True) -> list[dict[str, Any]]:
    """Every object of a converged cluster of ``nodes`` GPU nodes with ``nics`` rails each."""
    now = time.time() if now is None else now
    objs: list[dict[str, Any]] = list(crds(() if spectrum_x else ("spectrumx.nvidia.com",)))
    objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    comps = [("state-OFED", "OFEDDriverReady"), ("state-RDMA-device-plugin", "RDMASharedDevicePluginReady"),
             ("state-nv-ipam-cni", "NVIPAMReady"), ("state-nic-configuration-operator", "NICConfigurationOperatorReady")]
    if spectrum_x:
        comps.append(("state-spectrum-x-operator", "SpectrumXOperatorReady"))
    objs.append({
        "apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy", "generation": 3},
        "spec": {"ofedDriver": {"image": "doca-driver", "repository": "nvcr.io/nvidia/mellanox",
                                "version": "25.04-0.6.1.0-2",
                                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1}}},
        "status": {"state": "ready", "appliedStates": [{"name": s, "state": "ready"} for s, _ in comps],
                   "conditions": [_cond("Ready", "True", "AllComponentsReady", now)]
                   + [_cond(c, "True", "Ready", now) for _, c in comps]}})
    for name, image, strategy, sel in DAEMONSETS:
        labels = {sel: "", "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": CHART}
        objs.append({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NS, "generation": 2, "labels": labels},
            "spec": {"selector": {"matchLabels": {sel: ""}}, "updateStrategy": {"type": strategy},
                     "template": {"metadata": {"labels": {sel: ""}},
                                  "spec": {"containers": [{"name": name.split("-")[0], "image": image}]}}},
            "status": {"observedGeneration": 2, "desiredNumberScheduled": nodes, "currentNumberScheduled": nodes,
                       "numberReady": nodes, "updatedNumberScheduled": nodes, "numberAvailable": nodes,
                       "numberMisscheduled": 0}})
    for i in range(nodes):
        n = node_name(i)
        alloc = {"cpu": "224", "memory": "2113289624Ki", "pods": "110", "nvidia.com/gpu": "8"}
        alloc.update({f"nvidia.com/rail{r}": "127" for r in range(nics)})
        objs.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, "network.nvidia.com/operator.mofed.wait": "false",
                                               UPGRADE_LABEL: "upgrade-done",
                                               "feature.node.kubernetes.io/network-sriov.capable": "true"},
                         "annotations": {}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc)}})
        for ds, image, _strategy, sel in DAEMONSETS:
            objs.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{ds[:40]}-{i:05d}", "namespace": NS, "labels": {sel: ""},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds,
                                                  "uid": "x", "controller": True}]},
                "spec": {"nodeName": n, "containers": [{"name": "c", "image": image}]},
                "status": {"phase": "Running", "startTime": iso(now - 86400),
                           "containerStatuses": [{"name": "c", "image": image, "ready": True, "restartCount": 0}]}})
        for k in range(nics):
            serial = f"mt{2400 + i:05d}{k:02d}"
            objs.append({
                "apiVersion": "configuration.net.nvidia.com/v1alpha1", "kind": "NicDevice",
                "metadata": {"name": f"{n}-1021-{serial}", "namespace": NS},
                "spec": {"interfaceNameTemplate": {"netDevicePrefix": "eth", "rdmaDevicePrefix": "mlx5_",
                                                   "nicIndex": k, "railIndex": k, "planeIndices": [0]}},
                "status": {"node": n, "type": "1021", "serialNumber": serial.upper(), "partNumber": "900-9x7ah-0078-dtz",
                           "psid": "MT_0000000838", "firmwareVersion": "28.44.1036", "superNIC": True, "dpu": False,
                           "modelName": "BlueField-3 SuperNIC",
                           "ports": [{"pci": pci(k), "networkInterface": f"eth_r{k}", "rdmaInterface": f"mlx5_r{k}"}],
                           "conditions": [_cond("ConfigUpdateInProgress", "False", "UpdateSuccessful", now),
                                          _cond("FirmwareConfigMatch", "True", "DeviceFirmwareConfigMatch", now),
                                          _cond("InterfaceNameApplied", "True", "InterfaceNameApplied", now)]}})
        objs.append({
            "apiVersion": "sriovnetwork.openshift.io/v1", "kind": "SriovNetworkNodeState",
            "metadata": {"name": n, "namespace": NS, "annotations": {
                "sriovnetwork.openshift.io/desired-state": "Idle", "sriovnetwork.openshift.io/current-state": "Idle"}},
            "spec": {"interfaces": [{"pciAddress": pci(k), "name": f"eth_r{k}", "numVfs": 1, "mtu": 9000,
                                     "eSwitchMode": "legacy", "vfGroups": [{"resourceName": f"rail{k}",
                                                                            "deviceType": "netdevice", "isRdma": True,
                                                                            "policyName": f"rail{k}", "vfRange": "0-0"}]}
                                    for k in range(nics)]},
            "status": {"syncStatus": "Succeeded", "lastSyncError": "",
                       "interfaces": [{"pciAddress": pci(k), "name": f"eth_r{k}", "numVfs": 1, "totalvfs": 127,
                                       "mtu": 9000, "eSwitchMode": "legacy", "vendor": "15b3", "deviceID": "1021",
                                       "driver": "mlx5_core", "linkType": "ETH", "linkSpeed": "400000 Mb/s"}
                                      for k in range(nics)]}})
    objs.append({"apiVersion": "configuration.net.nvidia.com/v1alpha1", "kind": "NicInterfaceNameTemplate",
                 "metadata": {"name": "spectrum-x-rails", "namespace": NS},
                 "spec": {"netDevicePrefix": "eth", "rdmaDevicePrefix": "mlx5_", "pfsPerNic": 1,
                          "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"},
                          "railPciAddresses": [[pci(k)] for k in range(nics)]}})
    objs.append({"apiVersion": "configuration.net.nvidia.com/v1alpha1", "kind": "NicConfigurationTemplate",
                 "metadata": {"name": "spectrum-x", "namespace": NS},
                 "spec": {"nicSelector": {"nicType": "1021"}, "nodeSelector": {},
                          "template": {"numVfs": 1, "linkType": "Ethernet",
                                       "spectrumXOptimized": {"enabled": True, "version": "RA2.1"}}}})
    objs.append({"apiVersion": "sriovnetwork.openshift.io/v1", "kind": "SriovOperatorConfig",
                 "metadata": {"name": "default", "namespace": NS},
                 "spec": {"disablePlugins": ["mellanox"], "enableInjector": False, "enableOperatorWebhook": False}})
    for k in range(nics):
        objs.append({"apiVersion": "sriovnetwork.openshift.io/v1", "kind": "SriovNetworkNodePolicy",
                     "metadata": {"name": f"rail{k}", "namespace": NS},
                     "spec": {"resourceName": f"rail{k}", "numVfs": 1, "mtu": 9000, "isRdma": True,
                              "nicSelector": {"rootDevices": [pci(k)], "vendor": "15b3"},
                              "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"}}})
        objs.append({"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "CIDRPool",
                     "metadata": {"name": f"rail{k}", "namespace": NS},
                     "spec": {"cidr": f"10.{k}.0.0/15", "perNodeNetworkPrefix": 31},
                     "status": {"allocations": [{"nodeName": node_name(i), "prefix": f"10.{k}.{i // 128}.{(i % 128) * 2}/31"}
                                                for i in range(nodes)]}})
    if spectrum_x:
        objs.append({"apiVersion": "spectrumx.nvidia.com/v1alpha2", "kind": "SpectrumXRailPoolConfig",
                     "metadata": {"name": "rails", "namespace": NS, "generation": 4},
                     "spec": {"numVfs": 1, "railTopology": [{"name": f"rail{k}", "mtu": 9000, "cidrPoolRef": f"rail{k}",
                                                             "nicSelector": {"pfNames": [f"eth_r{k}"]}} for k in range(nics)]},
                     "status": {"observedGeneration": 4, "syncStatus": "Succeeded",
                                "nodeStates": [{"name": node_name(i), "observedGeneration": 4, "state": "Succeeded"}
                                               for i in range(nodes)]}})
    return objs


# -- scenarios: each a mutation of the healthy cluster ------------------------------------------------------


def _find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    for o in objs:
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name):
            return o
    raise KeyError((kind, name))


def _node(objs, i):
    return _find(objs, "Node", node_name(i))


def _ofed_ds(objs):
    return _find(objs, "DaemonSet", DAEMONSETS[0][0])


def _ondelete_half(objs, now):
    """The OFED driver's OnDelete rollout half done: every pod Ready (numberReady == desired), half of them on
    the old image; the upgrade controller is at work on node 1 and has not reached node 2, 3."""
    ds = _ofed_ds(objs)
    n = ds["status"]["desiredNumberScheduled"]
    ds["metadata"]["generation"] = 3
    ds["status"].update(observedGeneration=3, updatedNumberScheduled=n // 2)
    for o in objs:
        if o["kind"] == "Pod" and "nvidia.com/ofed-driver" in o["metadata"]["labels"]:
            i = int(o["spec"]["nodeName"].rsplit("-", 1)[1])
            if i >= n // 2:
                o["spec"]["containers"][0]["image"] = OFED_OLD_IMAGE
                o["status"]["containerStatuses"][0]["image"] = OFED_OLD_IMAGE
    for i in range(n // 2, n):
        _node(objs, i)["metadata"]["labels"][UPGRADE_LABEL] = "upgrade-required"
    _node(objs, n // 2)["metadata"]["labels"][UPGRADE_LABEL] = "drain-required"


def _stale_generation(objs, now):
    ds = _find(objs, "DaemonSet", "rdma-shared-dp-ds")
    ds["metadata"]["generation"] = 3  # the controller has not seen the new template yet


def _component_error(objs, now):
    ncp = _find(objs, "NicClusterPolicy")
    ncp["status"]["state"] = "notReady"
    ncp["status"]["appliedStates"][0].update(state="error", message="failed to render the driver manifests")
    for c in ncp["status"]["conditions"]:
        if c["type"] in ("Ready", "OFEDDriverReady"):
            c.update(status="False", reason="ComponentError", message="state-OFED: failed to render the driver manifests",
                     lastTransitionTime=iso(now - 600))


def _upgrade_failed(objs, now):
    _node(objs, 1)["metadata"]["labels"][UPGRADE_LABEL] = "upgrade-failed"


def _validation_2h(objs, now):
    nd = _node(objs, 2)
    nd["metadata"]["labels"][UPGRADE_LABEL] = "validation-required"
    nd["metadata"]["annotations"][VALIDATION_START] = str(int(now - 7200))


def _nicdevice_reasons(objs, now):
    devs = [o for o in objs if o["kind"] == "NicDevice"]
    a = next(d for d in devs if d["status"]["node"] == node_name(1))
    for c in a["status"]["conditions"]:
        if c["type"] == "InterfaceNameApplied":
            c.update(status="False", reason="InterfaceNameMismatch",
                     message="interface eth_r0 at 0000:1a:00.0 is named enp26s0f0np0", lastTransitionTime=iso(now - 300))
    b = next(d for d in devs if d["status"]["node"] == node_name(2))
    for c in b["status"]["conditions"]:
        if c["type"] == "ConfigUpdateInProgress":
            c.update(status="True", reason="PendingReboot", message="nv config applied, waiting for reboot",
                     lastTransitionTime=iso(now - 900))


def _sriov_draining(objs, now):
    st = _find(objs, "SriovNetworkNodeState", node_name(3))
    st["status"]["syncStatus"] = "InProgress"
    st["metadata"]["annotations"].update({"sriovnetwork.openshift.io/desired-state": "Drain_Required",
                                          "sriovnetwork.openshift.io/current-state": "Draining"})
    objs.append({"apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance",
                 "metadata": {"name": f"sriov-network-operator-{node_name(3)}", "namespace": NS,
                              "creationTimestamp": iso(now - 2400)},
                 "spec": {"nodeName": node_name(3), "requestorID": "sriovnetwork.openshift.io", "cordon": True,
                          "drainSpec": {"force": True, "timeoutSeconds": 0}},
                 "status": {"conditions": [_cond("Ready", "False", "Draining", now, "draining the node", ago=2400)],
                            "drain": {"totalPods": 12, "evictionPods": 3, "drainProgress": 75,
                                      "waitForEviction": ["default/train-0"]}}})


def _old_rail_generation(objs, now):
    cfg = _find(objs, "SpectrumXRailPoolConfig")
    cfg["metadata"]["generation"] = 5
    cfg["status"]["observedGeneration"] = 5
    for st in cfg["status"]["nodeStates"]:
        st["observedGeneration"] = 5
    cfg["status"]["nodeStates"][1].update(observedGeneration=4, state="InProgress")


def _no_free_prefixes(objs, now):
    pool = _find(objs, "CIDRPool", "rail3")
    pool["status"]["allocations"] = [a for a in pool["status"]["allocations"] if a["nodeName"] != node_name(2)]
    objs.append({"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": "rail3.17f2a9c1d2e3f4a5", "namespace": NS},
                 "involvedObject": {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "CIDRPool", "name": "rail3",
                                    "namespace": NS},
                 "reason": "NoFreePrefixes", "type": "Warning", "count": 14,
                 "message": f"failed to allocated prefix for Node: {node_name(2)}, no free prefixes",
                 "firstTimestamp": iso(now - 1200), "lastTimestamp": iso(now - 60),
                 "source": {"component": "nv-ipam-controller"}})


def _rails_zero(objs, now):
    nd = _node(objs, 1)
    nd["status"]["allocatable"]["nvidia.com/rail5"] = "0"


def _operator_conflicts(objs, now):
    """Every node converged, and the objects contradict each other: the SR-IOV operator's mellanox plug-in on
    beside the NIC Configuration Operator, spectrumXOptimized with 8 VFs, a beta chart."""
    _find(objs, "SriovOperatorConfig")["spec"]["disablePlugins"] = []
    _find(objs, "NicConfigurationTemplate")["spec"]["template"]["numVfs"] = 8
    _find(objs, "DaemonSet", "nic-configuration-daemon")["metadata"]["labels"]["helm.sh/chart"] = \
        "network-operator-25.7.0-beta.1"


def _no_spectrum_x(objs, now):
    pass  # built without the group (see SCENARIOS)


#: name -> (mutation, whether the Spectrum-X operator is installed)
SCENARIOS: dict[str, tuple[Callable[[list[dict[str, Any]], float], None], bool]] = {
    "healthy": (lambda objs, now: None, True),
    "ondelete-half": (_ondelete_half, True),
    "stale-generation": (_stale_generation, True),
    "component-error": (_component_error, True),
    "upgrade-failed": (_upgrade_failed, True),
    "validation-2h": (_validation_2h, True),
    "nicdevice-reasons": (_nicdevice_reasons, True),
    "sriov-draining": (_sriov_draining, True),
    "old-rail-generation": (_old_rail_generation, True),
    "no-free-prefixes": (_no_free_prefixes, True),
    "rails-zero": (_rails_zero, True),
    "no-spectrum-x": (_no_spectrum_x, False),
    "operator-conflicts": (_operator_conflicts, True),
}


def scenario(name: str, nodes: int = 4, nics: int = RAILS, now: float | None = None) -> list[dict[str, Any]]:
    now = time.time() if now is None else now
    fn, spx = SCENARIOS[name]
    objs = healthy(nodes, nics, now, spectrum_x=spx)
    fn(objs, now)
    return objs


def load(api: Any, name: str, nodes: int = 4, nics: int = RAILS, now: float | None = None) -> None:
    """Load a scenario into a stand-in (CRDs first, as a cluster has them before their objects)."""
    objs = scenario(name, nodes, nics, now)
    api.apply([o for o in objs if o["kind"] == "CustomResourceDefinition"])
    api.apply([o for o in objs if o["kind"] != "CustomResourceDefinition"])


def crashloop(api: Any, pod: str, restarts: int = 7) -> None:
    """The pod's container restarted ``restarts`` times and is not ready (CrashLoopBackOff): a pod whose log a
    cluster snapshot keeps."""
    import json
    st = api._store_for("v1", "Pod")
    obj = copy.deepcopy(json.loads(st.objects[(NS, pod)].body))
    for c in obj["status"]["containerStatuses"]:
        c.update(ready=False, restartCount=restarts,
                 state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}})
    api.apply(obj)


def touch(api: Any, node: str) -> None:
    """One change a benchmark times: the node's first NicDevice starts a configuration update (PendingReboot)."""
    st = api._store_for("configuration.net.nvidia.com/v1alpha1", "NicDevice")
    import json
    for (_ns, _name), entry in st.objects.items():
        obj = json.loads(entry.body)
        if obj["status"]["node"] == node:
            obj = copy.deepcopy(obj)
            for c in obj["status"]["conditions"]:
                if c["type"] == "ConfigUpdateInProgress":
                    c.update(status="True", reason="PendingReboot")
            api.apply(obj)
            return
    raise KeyError(node)


def converge_railpool(api: Any) -> None:
    """The Spectrum-X operator catches up: every node of every SpectrumXRailPoolConfig at its generation."""
    import json
    st = api._store_for("spectrumx.nvidia.com/v1alpha2", "SpectrumXRailPoolConfig")
    for entry in list(st.objects.values()):
        obj = json.loads(entry.body)
        for s in obj["status"]["nodeStates"]:
            s.update(observedGeneration=obj["metadata"]["generation"], state="Succeeded")
        api.apply(obj)


def node_slice_objects(node: str, ports: list[tuple[str, str]], mtu: int | None = None) -> dict[str, list[dict]]:
    """A healthy one-node cluster's objects by kind key (as a slice holds them), renamed to ``node`` with one
    NicDevice per (pci, netdev) of ``ports`` (``InterfaceNameApplied=True``: the operator says it named them so);
    with ``mtu``, the node's SriovNetworkNodeState asks that MTU on each of those PCI addresses, synced."""
    from agent.analysis.rollout import KIND_BY_KEY

    by_kind = {k.kind: k.key for k in KIND_BY_KEY.values()}
    objects: dict[str, list[dict]] = {}
    for obj in scenario("healthy", nodes=1, nics=len(ports)):
        key = by_kind.get(obj["kind"])
        if key:
            objects.setdefault(key, []).append(obj)
    for dev, (pci, netdev) in zip(objects["nicdevices"], ports, strict=True):
        dev["status"]["node"] = node
        dev["status"]["ports"] = [{"pci": pci, "networkInterface": netdev}]
    objects["nodes"][0]["metadata"]["name"] = node
    states = objects.get("sriovnetworknodestates") or []
    if mtu is None or not states:
        objects["sriovnetworknodestates"] = []
    else:
        st = states[0]
        st["metadata"]["name"] = node
        st["status"]["syncStatus"] = "Succeeded"
        # what SR-IOV is asked (spec) and reports (status) alike; no numVfs / eSwitchMode: the MTU alone
        st["spec"]["interfaces"] = [{"pciAddress": pci, "name": netdev, "mtu": mtu} for pci, netdev in ports]
        st["status"]["interfaces"] = [{"pciAddress": pci, "name": netdev, "mtu": mtu, "vendor": "15b3"}
                                      for pci, netdev in ports]
        objects["sriovnetworknodestates"] = [st]
    return objects
