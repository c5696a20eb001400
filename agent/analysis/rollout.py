"""The per-node convergence verdict after an operator rollout (docs/design.md §9 "Cluster scope"), pure.

The cluster's objects arrive as the API server serves them (dicts); :func:`project` keeps of each only what
the verdict and the intent checks read (an 80,000-NicDevice cluster is held as these small records, never as
the objects). :func:`judge` walks docs/design.md §9's clauses in order for each node and stops at the first that does
not hold:

1. the NicClusterPolicy (and a NicNodePolicy selecting the node) ``Ready``;
2. each component DaemonSet rolled out: ``observedGeneration == generation``, ``updatedNumberScheduled ==
   numberAvailable == desiredNumberScheduled`` — except an ``OnDelete`` DaemonSet, which is judged per node:
   the node's own pod runs the template's image (``numberReady == desired`` is true half-way through such a
   rollout, which is why the vendor's summary calls it healthy too early);
3. the node's driver upgrade state ``upgrade-done`` (or no label: upgrades off) and ``mofed.wait=false``;
4. every NicDevice of the node without a failing reason and ``InterfaceNameApplied=True``;
5. SriovNetworkNodeState ``Succeeded`` with desired = current drain state ``Idle``;
6. the node in every SpectrumXRailPoolConfig's ``nodeStates`` at the config's current generation, Succeeded;
7. the node in every rail CIDRPool's (and IPPool's) allocations;
8. its rail resources (the SriovNetworkNodePolicies' ``resourceName``) allocatable, none 0;
9. its own agent's diagnosis without a critical finding (where one is given).

``in-progress`` names the clause and since when (the object's own clock where it has one: the upgrade
start-time annotations, a condition's ``lastTransitionTime``, the NodeMaintenance's creation; else when this
watcher first saw the node there); ``stuck`` is the same clause for longer than ``stuck_after``; ``failed``
is a terminal reason an object gives. No clock of its own: ``now`` is given, and ``first_seen`` is the
caller's memory of when each (node, step) was first seen.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KINDS", "ClusterView", "Kind", "NodeVerdict", "RolloutResult", "judge", "parse_time", "project"]

UPGRADE_LABEL = "nvidia.com/ofed-driver-upgrade-state"
MOFED_WAIT = "network.nvidia.com/operator.mofed.wait"
# NVIDIA/k8s-operator-libs pkg/consts: start-time annotations (unix seconds) of the timed upgrade states.
UPGRADE_CLOCKS = {
    "validation-required": "nvidia.com/ofed-driver-upgrade-validation-start-time",
    "wait-for-jobs-required": "nvidia.com/ofed-driver-upgrade-wait-for-pod-completion-start-time",
    "pod-deletion-required": "nvidia.com/ofed-driver-upgrade-wait-for-pod-completion-start-time",
}
SRIOV_DESIRED = "sriovnetwork.openshift.io/desired-state"
SRIOV_CURRENT = "sriovnetwork.openshift.io/current-state"
#: nic-configuration-operator api/v1alpha1: reasons of a NicDevice's conditions that end the road.
NICDEVICE_FAILED = frozenset({"NonVolatileConfigUpdateFailed", "RuntimeConfigUpdateFailed", "IncorrectSpec",
                              "FirmwareUpdateFailed", "FirmwareSourceFailed", "DeviceFirmwareConfigMismatch"})
#: Allocatable keys that are not device-plugin resources.
BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "hugepages-", "attachable-volumes-")

SEVERITY = {"failed": 3, "stuck": 2, "in-progress": 1, "converged": 0}


@dataclass(frozen=True)
class Kind:
    """A kind the cluster view watches: where it lives and how it is known."""

    key: str  # the view's name for it
    group: str
    versions: tuple[str, ...]  # the versions understood, preferred first
    kind: str
    plural: str
    namespaced: bool  # watched in the operator's namespace (else cluster-wide)
    label_selector: str = ""
    field_selector: str = ""

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS: tuple[Kind, ...] = (
    Kind("nodes", "", ("v1",), "Node", "nodes", False),
    Kind("daemonsets", "apps", ("v1",), "DaemonSet", "daemonsets", True),
    Kind("pods", "", ("v1",), "Pod", "pods", True),
    # nvidia-k8s-ipam's CIDRPool controller files NoFreePrefixes as an Event of the pool (the only Events read).
    Kind("events", "", ("v1",), "Event", "events", True, field_selector="involvedObject.kind=CIDRPool"),
    Kind("crds", "apiextensions.k8s.io", ("v1",), "CustomResourceDefinition", "customresourcedefinitions", False),
    Kind("nicclusterpolicies", "mellanox.com", ("v1alpha1",), "NicClusterPolicy", "nicclusterpolicies", False),
    Kind("nicnodepolicies", "mellanox.com", ("v1alpha1",), "NicNodePolicy", "nicnodepolicies", False),
    Kind("nicdevices", "configuration.net.nvidia.com", ("v1alpha1",), "NicDevice", "nicdevices", True),
    Kind("nicconfigurationtemplates", "configuration.net.nvidia.com", ("v1alpha1",), "NicConfigurationTemplate",
         "nicconfigurationtemplates", True),
    Kind("nicinterfacenametemplates", "configuration.net.nvidia.com", ("v1alpha1",), "NicInterfaceNameTemplate",
         "nicinterfacenametemplates", True),
    Kind("nicfirmwaretemplates", "configuration.net.nvidia.com", ("v1alpha1",), "NicFirmwareTemplate",
         "nicfirmwaretemplates", True),
    Kind("nicfirmwaresources", "configuration.net.nvidia.com", ("v1alpha1",), "NicFirmwareSource",
         "nicfirmwaresources", True),
    Kind("sriovnetworknodestates", "sriovnetwork.openshift.io", ("v1",), "SriovNetworkNodeState",
         "sriovnetworknodestates", True),
    Kind("sriovnetworknodepolicies", "sriovnetwork.openshift.io", ("v1",), "SriovNetworkNodePolicy",
         "sriovnetworknodepolicies", True),
    Kind("sriovoperatorconfigs", "sriovnetwork.openshift.io", ("v1",), "SriovOperatorConfig",
         "sriovoperatorconfigs", True),
    Kind("spectrumxrailpoolconfigs", "spectrumx.nvidia.com", ("v1alpha2", "v1alpha1"), "SpectrumXRailPoolConfig",
         "spectrumxrailpoolconfigs", True),
    Kind("cidrpools", "nv-ipam.nvidia.com", ("v1alpha1",), "CIDRPool", "cidrpools", True),
    Kind("ippools", "nv-ipam.nvidia.com", ("v1alpha1",), "IPPool", "ippools", True),
    Kind("nodemaintenances", "maintenance.nvidia.com", ("v1alpha1",), "NodeMaintenance", "nodemaintenances", True),
)
KIND_BY_KEY = {k.key: k for k in KINDS}

_TIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def parse_time(value: Any) -> float | None:
    """An RFC 3339 time (``metav1.Time``) or unix seconds (the upgrade annotations) as epoch seconds."""
    if value is None or value == "" or value == "null":
        return None
    s = str(value)
    if s.isdigit():
        return float(s)
    m = _TIME_RE.match(s)
    if not m:
        return None
    y, mo, d, h, mi, se, tz = m.groups()
    t = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(se), 0, 0, 0))
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        t -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return float(t)


# -- projections: what is kept of each object ----------------------------------------------------------------


def _conds(status: Mapping[str, Any]) -> dict[str, tuple[str, str, str, float | None]]:
    out = {}
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type"):
            out[str(c["type"])] = (str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", ""))[:300],
                                   parse_time(c.get("lastTransitionTime")))
    return out


def _images(spec: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(str(c.get("image", "")) for c in spec.get("containers") or () if isinstance(c, dict)))


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _quantity(v: Any) -> float:
    """A resource quantity's value (device-plugin counts are plain integers; ``k``/``Ki`` read where given)."""
    s = str(v)
    m = re.match(r"^([0-9.]+)([a-zA-Z]*)$", s)
    if not m:
        return 0.0
    mult = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "m": 1e-3}
    return float(m.group(1)) * mult.get(m.group(2), 1)


def project(key: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the verdict keeps of one object of the kind ``key`` (a small dict, no nested object kept whole)."""
    md = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = md.get("labels") or {}
    ann = md.get("annotations") or {}
    rec: dict[str, Any] = {"name": md.get("name", ""), "namespace": md.get("namespace", ""),
                           "generation": _int(md.get("generation")), "rv": md.get("resourceVersion", "")}
    if key == "nodes":
        rec.update(labels=dict(labels), upgrade=labels.get(UPGRADE_LABEL), mofed_wait=labels.get(MOFED_WAIT),
                   clocks={s: parse_time(ann.get(a)) for s, a in UPGRADE_CLOCKS.items() if ann.get(a)},
                   allocatable={k: _quantity(v) for k, v in (status.get("allocatable") or {}).items()
                                if not k.startswith(BASE_RESOURCES)})
    elif key == "daemonsets":
        tmpl = (spec.get("template") or {}).get("spec") or {}
        rec.update(observed=_int(status.get("observedGeneration")), desired=_int(status.get("desiredNumberScheduled")),
                   updated=_int(status.get("updatedNumberScheduled")), available=_int(status.get("numberAvailable")),
                   ready=_int(status.get("numberReady")),
                   strategy=(spec.get("updateStrategy") or {}).get("type", "RollingUpdate"),
                   images=_images(tmpl), chart=labels.get("helm.sh/chart", ""),
                   selector=dict((spec.get("selector") or {}).get("matchLabels") or {}))
    elif key == "pods":
        owner = next((o.get("name") for o in md.get("ownerReferences") or () if o.get("kind") == "DaemonSet"), None)
        cs = status.get("containerStatuses") or ()
        rec.update(node=spec.get("nodeName", ""), owner=owner, images=_images(spec), phase=status.get("phase", ""),
                   ready=bool(cs) and all(c.get("ready") for c in cs),
                   restarts=sum(_int(c.get("restartCount")) for c in cs), labels=dict(labels))
    elif key == "events":
        io = obj.get("involvedObject") or {}
        rec.update(object=f"{io.get('kind', '')}/{io.get('name', '')}", reason=obj.get("reason", ""),
                   message=str(obj.get("message", ""))[:300], type=obj.get("type", ""),
                   last=parse_time(obj.get("lastTimestamp") or obj.get("eventTime")))
    elif key == "crds":
        rec.update(group=spec.get("group", ""), kind=(spec.get("names") or {}).get("kind", ""),
                   versions=tuple(v.get("name") for v in spec.get("versions") or () if v.get("served", True)))
    elif key in ("nicclusterpolicies", "nicnodepolicies"):
        rec.update(state=status.get("state", ""), reason=status.get("reason", ""), conditions=_conds(status),
                   applied=tuple((a.get("name", ""), a.get("state", ""), str(a.get("message", ""))[:200])
                                 for a in status.get("appliedStates") or ()),
                   node_selector=dict(spec.get("nodeSelector") or {}), ofed=bool(spec.get("ofedDriver")))
    elif key == "nicdevices":
        tmpl = spec.get("interfaceNameTemplate") or {}
        rec.update(node=status.get("node", ""), conditions=_conds(status),
                   ports=tuple((p.get("pci", ""), p.get("networkInterface", ""), p.get("rdmaInterface", ""))
                               for p in status.get("ports") or ()),
                   name_template=bool(tmpl), rail=tmpl.get("railIndex"),
                   numvfs=((spec.get("configuration") or {}).get("template") or {}).get("numVfs"))
    elif key == "nicinterfacenametemplates":
        rec.update(prefix=spec.get("netDevicePrefix", ""), rdma_prefix=spec.get("rdmaDevicePrefix", ""),
                   pfs_per_nic=_int(spec.get("pfsPerNic")) or 1,
                   rails=tuple(tuple(r) for r in spec.get("railPciAddresses") or ()),
                   node_selector=dict(spec.get("nodeSelector") or {}))
    elif key == "nicconfigurationtemplates":
        t = spec.get("template") or {}
        rec.update(numvfs=t.get("numVfs"), spectrumx=bool((t.get("spectrumXOptimized") or {}).get("enabled")),
                   nic_type=(spec.get("nicSelector") or {}).get("nicType", ""),
                   node_selector=dict(spec.get("nodeSelector") or {}), conditions=_conds(status))
    elif key in ("nicfirmwaretemplates", "nicfirmwaresources"):
        rec.update(state=status.get("state", ""), reason=status.get("reason", ""), conditions=_conds(status))
    elif key == "sriovnetworknodestates":
        rec.update(sync=status.get("syncStatus", ""), error=str(status.get("lastSyncError", ""))[:300],
                   desired=ann.get(SRIOV_DESIRED, ""), current=ann.get(SRIOV_CURRENT, ""),
                   interfaces=tuple((i.get("pciAddress", ""), i.get("name", ""), i.get("numVfs"), i.get("mtu"),
                                     i.get("eSwitchMode")) for i in spec.get("interfaces") or ()),
                   actual=tuple((i.get("pciAddress", ""), i.get("name", ""), i.get("numVfs"), i.get("mtu"),
                                 i.get("eSwitchMode")) for i in status.get("interfaces") or ()))
    elif key == "sriovnetworknodepolicies":
        rec.update(resource=spec.get("resourceName", ""), numvfs=spec.get("numVfs"), mtu=spec.get("mtu"),
                   node_selector=dict(spec.get("nodeSelector") or {}),
                   root_devices=tuple((spec.get("nicSelector") or {}).get("rootDevices") or ()))
    elif key == "sriovoperatorconfigs":
        rec.update(disable_plugins=tuple(spec.get("disablePlugins") or ()))
    elif key == "spectrumxrailpoolconfigs":
        rec.update(node_selector=dict(spec.get("nodeSelector") or {}),
                   states={str(s.get("name", "")): (_int(s.get("observedGeneration")), s.get("state", ""),
                                                    str(s.get("message", ""))[:200])
                           for s in status.get("nodeStates") or ()})
    elif key in ("cidrpools", "ippools"):
        terms = ((spec.get("nodeSelector") or {}).get("nodeSelectorTerms")) or ()
        rec.update(nodes=frozenset(str(a.get("nodeName", "")) for a in status.get("allocations") or ()),
                   terms=tuple(tuple((e.get("key"), e.get("operator"), tuple(e.get("values") or ()))
                                     for e in t.get("matchExpressions") or ()) for t in terms))
    elif key == "nodemaintenances":
        rec.update(node=spec.get("nodeName", ""), requestor=spec.get("requestorID", ""),
                   created=parse_time(md.get("creationTimestamp")), conditions=_conds(status))
    return rec


@dataclass
class ClusterView:
    """The records of every kind watched (``objects[key][(namespace, name)]``) and the kinds the cluster lacks."""

    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # Kind.name of each kind skipped
    namespace: str = "nvidia-network-operator"
    resource_prefix: str = "nvidia.com"  # the SR-IOV device plug-in's resource prefix (network-operator's)

    def of(self, key: str) -> Iterable[dict[str, Any]]:
        return self.objects.get(key, {}).values()

    def put(self, key: str, obj: Mapping[str, Any]) -> None:
        rec = project(key, obj)
        self.objects.setdefault(key, {})[(rec["namespace"], rec["name"])] = rec

    def remove(self, key: str, namespace: str, name: str) -> None:
        self.objects.get(key, {}).pop((namespace, name), None)


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    verdict: str  # converged | in-progress | stuck | failed
    step: str = ""
    since: float | None = None
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict, "step": self.step, "since": _iso(self.since),
                "reason": self.reason}


@dataclass(frozen=True)
class RolloutResult:
    nodes: tuple[NodeVerdict, ...]  # worst first
    components: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        worst = max((SEVERITY[v.verdict] for v in self.nodes), default=0)
        return 2 if worst >= 2 else worst

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(SEVERITY, 0)
        for v in self.nodes:
            out[v.verdict] += 1
        return out


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    y, mo, d, h, mi, s = _civil(int(t))
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z"


def _civil(t: int) -> tuple[int, int, int, int, int, int]:
    """Epoch seconds to UTC civil time (Howard Hinnant's days-to-civil; no time module in a pure part)."""
    days, rem = divmod(t, 86400)
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return y + (m <= 2), m, d, rem // 3600, rem % 3600 // 60, rem % 60


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _terms_select(terms: tuple, labels: Mapping[str, str]) -> bool:
    """A NodeSelector's terms (ORed; expressions ANDed); no terms selects every node."""
    if not terms:
        return True
    for term in terms:
        ok = True
        for key, op, values in term:
            has = key in labels
            if (op == "In" and not (has and labels[key] in values)) or (op == "NotIn" and has and labels[key] in values) \
                    or (op == "Exists" and not has) or (op == "DoesNotExist" and has):
                ok = False
        if ok:
            return True
    return False


# -- the verdict ----------------------------------------------------------------------------------------------

# A clause's answer: None when it holds, else (verdict, step, since, reason); verdict "in-progress" or "failed".
_Answer = tuple[str, str, float | None, str] | None


def _components(view: ClusterView) -> tuple[list[dict[str, Any]], list[tuple[str, _Answer]]]:
    """The cluster-wide components and, for each that does not hold, its answer (applied to every node it covers)."""
    comps: list[dict[str, Any]] = []
    answers: list[tuple[str, _Answer]] = []
    for pol in sorted(view.of("nicclusterpolicies"), key=lambda r: r["name"]):
        ready = pol["conditions"].get("Ready")
        bad = [(t, c) for t, c in sorted(pol["conditions"].items()) if t != "Ready" and c[0] == "False"]
        error = next(((t, c) for t, c in bad if c[1] == "ComponentError"), None)
        errstate = next((a for a in pol["applied"] if a[1] == "error"), None)
        name = f"NicClusterPolicy/{pol['name']}"
        if error or (ready and ready[1] == "ComponentError") or errstate or pol["state"] == "error":
            t, c = error or ("Ready", ready or ("False", "ComponentError", pol["reason"], None))
            reason = f"{name} {t}=False {c[1]}" + (f": {c[2]}" if c[2] else "")
            if errstate and not error:
                reason = f"{name} {errstate[0]} error" + (f": {errstate[2]}" if errstate[2] else "")
            comps.append({"kind": "NicClusterPolicy", "name": pol["name"], "state": "error", "reason": reason})
            answers.append(("*", ("failed", "nicclusterpolicy", c[3], reason)))
        elif pol["state"] != "ready" or (ready and ready[0] != "True"):
            pending = ", ".join(t for t, _c in bad) or (ready[1] if ready else pol["state"])
            reason = f"{name} state {pol['state'] or 'unset'} ({pending})"
            comps.append({"kind": "NicClusterPolicy", "name": pol["name"], "state": pol["state"] or "notReady",
                          "reason": reason})
            answers.append(("*", ("in-progress", "nicclusterpolicy", ready[3] if ready else None, reason)))
        else:
            comps.append({"kind": "NicClusterPolicy", "name": pol["name"], "state": "ready", "reason": ""})
    for ds in sorted(view.of("daemonsets"), key=lambda r: r["name"]):
        name = f"DaemonSet/{ds['namespace']}/{ds['name']}"
        comp = {"kind": "DaemonSet", "name": ds["name"], "strategy": ds["strategy"], "images": list(ds["images"]),
                "chart": ds["chart"], "desired": ds["desired"], "updated": ds["updated"], "available": ds["available"],
                "ready": ds["ready"], "state": "rolled-out", "reason": ""}
        if ds["observed"] != ds["generation"]:
            comp.update(state="stale", reason=f"{name}: observedGeneration {ds['observed']} != generation "
                                              f"{ds['generation']} (the controller has not acted on the new spec)")
            answers.append(("*", ("in-progress", f"daemonset {ds['name']} generation", None, comp["reason"])))
        elif ds["strategy"] != "OnDelete" and not (ds["updated"] == ds["available"] == ds["desired"]):
            comp.update(state="rolling", reason=f"{name}: updated {ds['updated']}, available {ds['available']}, "
                                                f"desired {ds['desired']}")
            answers.append(("*", ("in-progress", f"daemonset {ds['name']} rollout", None, comp["reason"])))
        elif ds["strategy"] == "OnDelete" and ds["updated"] != ds["desired"]:
            comp.update(state="rolling", reason=f"{name} (OnDelete): {ds['updated']} of {ds['desired']} pods on the "
                                                f"template (numberReady {ds['ready']} says nothing of which image)")
        comps.append(comp)
    return comps, answers


def _node_clauses(view: ClusterView, node: dict[str, Any], idx: dict[str, Any],
                  diagnosis: Mapping[str, Any] | None) -> _Answer:
    name = node["name"]
    labels = node["labels"]
    # 1. a NicNodePolicy selecting this node
    for pol in idx["nnp"]:
        if _selects(pol["node_selector"], labels) and pol["state"] != "ready":
            verdict = "failed" if pol["state"] == "error" else "in-progress"
            ready = pol["conditions"].get("Ready")
            return (verdict, "nicnodepolicy", ready[3] if ready else None,
                    f"NicNodePolicy/{pol['name']} state {pol['state'] or 'unset'}")
    # 2. DaemonSet pods on this node: every pod runs its template's images
    for pod in idx["pods"].get(name, ()):
        ds = idx["ds"].get(pod["owner"])
        if ds is None or ds["observed"] != ds["generation"]:
            continue
        if pod["images"] != ds["images"]:
            state = node["upgrade"]
            if ds["strategy"] == "OnDelete" and state:
                if state == "upgrade-failed":
                    return ("failed", "driver upgrade-failed", None,
                            f"Node/{name} {UPGRADE_LABEL}=upgrade-failed; pod {pod['name']} runs {pod['images'][0]}")
                return ("in-progress", f"driver {state}", node["clocks"].get(state),
                        f"pod {pod['name']} runs {', '.join(pod['images'])}, the template {', '.join(ds['images'])}")
            return ("in-progress", f"pod {ds['name']} image", None,
                    f"pod {pod['name']} runs {', '.join(pod['images'])}, the template {', '.join(ds['images'])}")
    # 3. driver upgrade state and mofed.wait
    state = node["upgrade"]
    if state == "upgrade-failed":
        return ("failed", "driver upgrade-failed", None, f"Node/{name} {UPGRADE_LABEL}=upgrade-failed")
    if state and state != "upgrade-done":
        return ("in-progress", f"driver {state}", node["clocks"].get(state), f"Node/{name} {UPGRADE_LABEL}={state}")
    if node["mofed_wait"] == "true":
        return ("in-progress", "mofed.wait", None, f"Node/{name} {MOFED_WAIT}=true (the driver is not loaded yet)")
    # 4. NicDevices
    for dev in sorted(idx["nicdevices"].get(name, ()), key=lambda r: r["name"]):
        where = f"NicDevice/{dev['namespace']}/{dev['name']}"
        for t, (st, reason, msg, ltt) in sorted(dev["conditions"].items()):
            if reason in NICDEVICE_FAILED:
                return ("failed", f"nicdevice {t}", ltt, f"{where} {t}={st} {reason}" + (f": {msg}" if msg else ""))
        for t, (st, reason, msg, ltt) in sorted(dev["conditions"].items()):
            if t.endswith("InProgress") and st == "True":
                return ("in-progress", f"nicdevice {reason or t}", ltt,
                        f"{where} {t}=True {reason}" + (f": {msg}" if msg else ""))
        if dev["name_template"]:
            c = dev["conditions"].get("InterfaceNameApplied")
            if c is None or c[0] != "True":
                return ("in-progress", f"nicdevice {c[1] if c else 'InterfaceNameApplied'}", c[3] if c else None,
                        f"{where} InterfaceNameApplied={c[0] if c else 'absent'} {c[1] if c else ''}".rstrip()
                        + (f": {c[2]}" if c and c[2] else ""))
    # 5. SR-IOV
    st = idx["sriov"].get(name)
    if st is not None:
        where = f"SriovNetworkNodeState/{st['namespace']}/{name}"
        if st["sync"] == "Failed":
            return ("failed", "sriov Failed", None, f"{where} syncStatus Failed: {st['error'] or 'no lastSyncError'}")
        if st["sync"] != "Succeeded" or (st["desired"] or "Idle") != "Idle" or (st["current"] or "Idle") != "Idle":
            nm = idx["maint"].get(name)
            since = nm["created"] if nm else None
            drain = f", {nm['requestor']} NodeMaintenance {nm['conditions'].get('Ready', ('', ''))[1]}" if nm else ""
            return ("in-progress", f"sriov {st['sync'] or 'unset'} {st['current'] or 'Idle'}", since,
                    f"{where} syncStatus {st['sync'] or 'unset'}, desired {st['desired'] or 'Idle'}, current "
                    f"{st['current'] or 'Idle'}{drain}")
    # 6. SpectrumXRailPoolConfig
    for cfg in idx["railpools"]:
        if not _selects(cfg["node_selector"], labels):
            continue
        where = f"SpectrumXRailPoolConfig/{cfg['namespace']}/{cfg['name']}"
        got = cfg["states"].get(name)
        if got is None:
            return ("in-progress", "railpool absent", None, f"{where}: node not in nodeStates")
        gen, state, msg = got
        if state == "Failed":
            return ("failed", "railpool Failed", None, f"{where} node state Failed" + (f": {msg}" if msg else ""))
        if gen != cfg["generation"] or state != "Succeeded":
            return ("in-progress", "railpool generation" if gen != cfg["generation"] else f"railpool {state}", None,
                    f"{where}: node at generation {gen} ({state or 'no state'}), the config at {cfg['generation']}")
    # 7. IP pools
    for pool in idx["pools"]:
        if not pool["nodes"] and not pool["terms"]:
            continue  # a pool with no allocation at all serves no node yet (or none of these)
        if not _terms_select(pool["terms"], labels) or name in pool["nodes"]:
            continue
        kind = "CIDRPool" if pool["_kind"] == "cidrpools" else "IPPool"
        where = f"{kind}/{pool['namespace']}/{pool['name']}"
        evs = idx["nofree"].get(pool["name"], ())
        # The controller's message names the node it could not serve ("failed to allocated prefix for Node:
        # X, no free prefixes"); an event naming another node is not this one's.
        ev = next((e for e in evs if f"Node: {name}," in e["message"]), None) or next(
            (e for e in evs if "Node: " not in e["message"]), None)
        if ev is not None:
            return ("failed", "ippool NoFreePrefixes", ev["last"], f"{where} NoFreePrefixes: {ev['message']}")
        return ("in-progress", "ippool allocation", None, f"{where}: no allocation for the node")
    # 8. rail resources
    for res in idx["resources"]:
        if not _selects(res[1], labels):
            continue
        have = node["allocatable"].get(res[0])
        if have is None:
            return ("in-progress", "rail resources", None, f"Node/{name} allocatable has no {res[0]}")
        if have <= 0:
            return ("failed", "rail resources 0", None, f"Node/{name} allocatable {res[0]} = 0")
    # 9. the node's own diagnosis
    if diagnosis:
        crit = [f for f in diagnosis.get("findings", ()) if f.get("severity") == "critical"]
        if crit:
            return ("in-progress", "node diagnosis", None,
                    f"the node's agent: {crit[0].get('code')} {crit[0].get('subject', '')}".rstrip())
    return None


def _index(view: ClusterView) -> dict[str, Any]:
    pods: dict[str, list[dict[str, Any]]] = {}
    for p in view.of("pods"):
        if p["owner"]:
            pods.setdefault(p["node"], []).append(p)
    devs: dict[str, list[dict[str, Any]]] = {}
    for d in view.of("nicdevices"):
        devs.setdefault(d["node"], []).append(d)
    nofree: dict[str, list[dict[str, Any]]] = {}
    for e in view.of("events"):
        if e["reason"] == "NoFreePrefixes" and e["object"].startswith("CIDRPool/"):
            nofree.setdefault(e["object"].split("/", 1)[1], []).append(e)
    for evs in nofree.values():
        evs.sort(key=lambda e: -(e["last"] or 0))
    pools = [dict(p, _kind="cidrpools") for p in view.of("cidrpools")] + [
        dict(p, _kind="ippools") for p in view.of("ippools")]
    resources = sorted({(f"{view.resource_prefix}/{p['resource']}", tuple(sorted(p["node_selector"].items())))
                        for p in view.of("sriovnetworknodepolicies") if p["resource"]})
    return {"pods": pods, "ds": {d["name"]: d for d in view.of("daemonsets")}, "nicdevices": devs,
            "sriov": {s["name"]: s for s in view.of("sriovnetworknodestates")},
            "maint": {m["node"]: m for m in view.of("nodemaintenances")},
            "nnp": list(view.of("nicnodepolicies")), "railpools": list(view.of("spectrumxrailpoolconfigs")),
            "pools": pools, "nofree": nofree, "resources": [(r, dict(s)) for r, s in resources]}


def judge(view: ClusterView, now: float, stuck_after: float = 1800.0,
          first_seen: MutableMapping[tuple[str, str], float] | None = None, only: str | None = None,
          diagnoses: Mapping[str, Mapping[str, Any]] | None = None) -> RolloutResult:
    """Every node's verdict (``only``: that node's alone), worst first; the components; the kinds skipped."""
    seen = first_seen if first_seen is not None else {}
    comps, cluster_answers = _components(view)
    idx = _index(view)
    verdicts = []
    live_keys = set()
    for node in view.of("nodes"):
        name = node["name"]
        if only is not None and name != only:
            continue
        ans = next((a for _scope, a in cluster_answers if a is not None and a[0] == "failed"), None) \
            or next((a for _scope, a in cluster_answers if a is not None), None) \
            or _node_clauses(view, node, idx, (diagnoses or {}).get(name))
        if ans is None:
            verdicts.append(NodeVerdict(name, "converged"))
            continue
        verdict, step, since, reason = ans
        key = (name, step)
        live_keys.add(key)
        first = seen.setdefault(key, now)
        since = since if since is not None else first
        if verdict == "in-progress" and now - since > stuck_after:
            verdict = "stuck"
            reason = f"{reason} (for {_age(now - since)}, more than {_age(stuck_after)})"
        verdicts.append(NodeVerdict(name, verdict, step, since, reason))
    for key in [k for k in seen if k not in live_keys and (only is None or k[0] == only)]:
        del seen[key]  # a step left is forgotten: coming back to it starts its clock again
    verdicts.sort(key=lambda v: (-SEVERITY[v.verdict], v.since if v.since is not None else now, v.node))
    return RolloutResult(tuple(verdicts), tuple(comps), tuple(view.missing))


def _age(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"


def render_text(result: RolloutResult, now: float) -> list[str]:
    """One line per node not converged (worst first), a count of those that have, the skipped kinds, a verdict."""
    lines = []
    for v in result.nodes:
        if v.verdict == "converged":
            continue
        age = f" since {_iso(v.since)} ({_age(now - v.since)})" if v.since is not None else ""
        lines.append(f"{v.verdict:<11} {v.node:<24} {v.step}{age}: {v.reason}")
    c = result.counts()
    lines.append(f"{c['converged']} of {len(result.nodes)} nodes converged")
    for comp in result.components:
        if comp["state"] not in ("ready", "rolled-out"):
            lines.append(f"component {comp['kind']}/{comp['name']}: {comp['state']}: {comp['reason']}")
    if result.skipped:
        lines.append("skipped (not in this cluster): " + ", ".join(result.skipped))
    word = {0: "converged", 1: "in progress", 2: "stuck or failed"}[result.exit_code]
    parts = ", ".join(f"{n} {k}" for k, n in c.items() if n and k != "converged")
    lines.append(f"rollout: {word}" + (f" ({parts})" if parts else ""))
    return lines
