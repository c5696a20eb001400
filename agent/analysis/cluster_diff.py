"""Two cluster snapshots compared (pure): what changed, and what regressed (``railscope diff BEFORE AFTER``).

Changes: the DaemonSets' template images and chart label, the CRDs' served versions, each custom resource's
``spec`` (added, removed, changed), the operators' node labels. Regressions: a component ready before and
not after (the NicClusterPolicy, a DaemonSet rolled out), a node converged before and not after (its verdict
judged on each side at its own snapshot's time), a rail resource allocatable before and 0 or gone after.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.analysis.rollout import ClusterView, judge

__all__ = ["ClusterDiff", "Item", "cluster_diff", "view_of"]

#: the kinds whose objects are the operators' intent (their spec is compared)
_SPEC_KINDS = ("nicclusterpolicies", "nicnodepolicies", "nicconfigurationtemplates", "nicinterfacenametemplates",
               "nicfirmwaretemplates", "nicfirmwaresources", "sriovnetworknodepolicies", "sriovoperatorconfigs",
               "spectrumxrailpoolconfigs", "cidrpools", "ippools", "nicdevices")
#: node label prefixes of the operators (the driver upgrade state, mofed.wait, NFD's network features)
_LABEL_PREFIXES = ("nvidia.com/", "network.nvidia.com/", "feature.node.kubernetes.io/network-")


@dataclass(frozen=True)
class Item:
    kind: str  # what: image, chart, crd, spec, label, component, convergence, resource
    subject: str
    before: Any
    after: Any
    message: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "before": self.before, "after": self.after,
                "message": self.message}


@dataclass(frozen=True)
class ClusterDiff:
    changes: tuple[Item, ...]
    regressions: tuple[Item, ...]

    def as_json(self) -> dict[str, Any]:
        return {"schema": "railscope.cluster-diff/v1", "regressions": [i.as_json() for i in self.regressions],
                "changes": [i.as_json() for i in self.changes]}


def view_of(objects: Mapping[str, list[dict[str, Any]]], manifest: Mapping[str, Any]) -> ClusterView:
    v = ClusterView(namespace=str(manifest.get("namespace", "nvidia-network-operator")),
                    missing=list(manifest.get("skipped", ())))
    for key, objs in objects.items():
        for obj in objs:
            v.put(key, obj)
    return v


def _name(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}" if md.get("namespace") else str(md.get("name"))


def _by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {_name(o): o for o in objs}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def _images(ds: Mapping[str, Any]) -> list[str]:
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return sorted(c.get("image", "") for c in spec.get("containers") or ())


def cluster_diff(before: tuple[Mapping[str, Any], Mapping[str, list[dict[str, Any]]]],
                 after: tuple[Mapping[str, Any], Mapping[str, list[dict[str, Any]]]]) -> ClusterDiff:
    """``before`` and ``after`` are (manifest, objects) as ``read_snapshot`` gives them."""
    (mb, ob), (ma, oa) = before, after
    changes: list[Item] = []
    regressions: list[Item] = []
    dsb, dsa = _by_name(ob.get("daemonsets", [])), _by_name(oa.get("daemonsets", []))
    for name in sorted(set(dsb) | set(dsa)):
        b, a = dsb.get(name), dsa.get(name)
        ib, ia = (_images(b) if b else None), (_images(a) if a else None)
        if ib != ia:
            changes.append(Item("image", f"DaemonSet/{name}", ib, ia, f"DaemonSet/{name}: images {ib} -> {ia}"))
        cb = ((b or {}).get("metadata") or {}).get("labels", {}).get("helm.sh/chart")
        ca = ((a or {}).get("metadata") or {}).get("labels", {}).get("helm.sh/chart")
        if cb != ca and b and a:
            changes.append(Item("chart", f"DaemonSet/{name}", cb, ca, f"DaemonSet/{name}: chart {cb} -> {ca}"))
    crdb, crda = _by_name(ob.get("crds", [])), _by_name(oa.get("crds", []))
    for name in sorted(set(crdb) | set(crda)):
        vb = sorted(v["name"] for v in (crdb.get(name) or {}).get("spec", {}).get("versions", ())) if name in crdb else None
        va = sorted(v["name"] for v in (crda.get(name) or {}).get("spec", {}).get("versions", ())) if name in crda else None
        if vb != va:
            changes.append(Item("crd", f"CustomResourceDefinition/{name}", vb, va, f"CRD {name}: versions {vb} -> {va}"))
    for key in _SPEC_KINDS:
        b, a = _by_name(ob.get(key, [])), _by_name(oa.get(key, []))
        for name in sorted(set(b) | set(a)):
            hb = _digest(b[name].get("spec")) if name in b else None
            ha = _digest(a[name].get("spec")) if name in a else None
            if hb != ha:
                what = "added" if hb is None else "removed" if ha is None else "spec changed"
                kind = (a.get(name) or b.get(name) or {}).get("kind", key)
                changes.append(Item("spec", f"{kind}/{name}", hb, ha, f"{kind}/{name}: {what}"))
    nb, na = _by_name(ob.get("nodes", [])), _by_name(oa.get("nodes", []))
    for name in sorted(set(nb) & set(na)):
        lb = {k: v for k, v in ((nb[name].get("metadata") or {}).get("labels") or {}).items()
              if k.startswith(_LABEL_PREFIXES)}
        la = {k: v for k, v in ((na[name].get("metadata") or {}).get("labels") or {}).items()
              if k.startswith(_LABEL_PREFIXES)}
        for k in sorted(set(lb) | set(la)):
            if lb.get(k) != la.get(k):
                changes.append(Item("label", f"Node/{name}", {k: lb.get(k)}, {k: la.get(k)},
                                    f"Node/{name}: {k} {lb.get(k)} -> {la.get(k)}"))
    # regressions, from each side's own verdicts
    vb, va = view_of(ob, mb), view_of(oa, ma)
    rb = judge(vb, float(mb.get("taken_at", 0)))
    ra = judge(va, float(ma.get("taken_at", 0)))
    cb_ = {(c["kind"], c["name"]): c for c in rb.components}
    for c in ra.components:
        was = cb_.get((c["kind"], c["name"]))
        if was and was["state"] in ("ready", "rolled-out") and c["state"] not in ("ready", "rolled-out"):
            regressions.append(Item("component", f"{c['kind']}/{c['name']}", was["state"], c["state"],
                                    f"{c['kind']}/{c['name']} no longer ready: {c['reason']}"))
    verdicts_b = {v.node: v for v in rb.nodes}
    for v in ra.nodes:
        was = verdicts_b.get(v.node)
        if was and was.verdict == "converged" and v.verdict != "converged":
            regressions.append(Item("convergence", f"Node/{v.node}", "converged", v.verdict,
                                    f"Node/{v.node} lost its convergence: {v.verdict} {v.step}: {v.reason}"))
    alloc_b = {r["name"]: r["allocatable"] for r in vb.of("nodes")}
    for r in va.of("nodes"):
        before_alloc = alloc_b.get(r["name"], {})
        for res, n in sorted(before_alloc.items()):
            if n > 0 and r["allocatable"].get(res, 0) <= 0 and not res.endswith("/gpu"):
                regressions.append(Item("resource", f"Node/{r['name']}", {res: n}, {res: r["allocatable"].get(res)},
                                        f"Node/{r['name']} lost its rails: {res} {n:g} -> "
                                        f"{r['allocatable'].get(res, 'absent')}"))
    return ClusterDiff(tuple(changes), tuple(regressions))
