"""The operators' intent against each node's reality, and the operators' objects against each other (pure).

Two codes (docs/design.md §4, ``agent.findings.CLUSTER_CODES``: judged from the cluster's objects, so no node image
carries them):

- ``RailIntentMismatch`` (critical) joins the objects with what a node's agent reports (the ``rails[]`` of
  its ``railscope.doctor/v1`` diagnosis: rail, pci, netdev, mtu, numvfs, eswitch_mode): the
  NicInterfaceNameTemplate's PCI → rail mapping against the node's rails; a NicDevice saying
  ``InterfaceNameApplied=True`` while the node's netdev at that PCI address has another name; the
  SriovNetworkNodeState's ``spec.interfaces`` (numVfs, eSwitchMode, mtu: what the SR-IOV config daemon is
  asked to set on the PF) against the node (``rails[].numvfs``, ``eswitch_mode``, ``mtu``; a value the node
  does not report is not judged). Subject: the rail netdev (the PCI address where the node has no netdev
  there); the object and field in the evidence.
- ``OperatorConfigConflict`` (warning) needs the objects alone: SR-IOV's Mellanox plug-in enabled while the
  NIC Configuration Operator manages the same NICs (the guide's "two owners flip one setting": the SR-IOV
  operator's mellanox plug-in writes the same firmware parameters — ``disablePlugins: [mellanox]``); a
  NicConfigurationTemplate with ``spectrumXOptimized`` and ``numVfs != 1`` (the operator ignores it); a
  ``-beta`` chart version. Subject: ``<kind>/<namespace>/<name>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.analysis.rollout import ClusterView
from agent.findings import Finding

__all__ = ["intent_findings"]


def _obj(kind: str, rec: Mapping[str, Any]) -> str:
    return f"{kind}/{rec['namespace']}/{rec['name']}" if rec.get("namespace") else f"{kind}/{rec['name']}"


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _conflicts(view: ClusterView) -> list[Finding]:
    out = []
    templates = list(view.of("nicconfigurationtemplates"))
    for cfg in view.of("sriovoperatorconfigs"):
        if templates and "mellanox" not in cfg["disable_plugins"]:
            out.append(Finding(
                "OperatorConfigConflict", "warning", _obj("SriovOperatorConfig", cfg),
                f"the SR-IOV operator's mellanox plug-in is enabled while the NIC Configuration Operator manages the "
                f"NICs ({len(templates)} NicConfigurationTemplate): two owners set the same firmware parameters",
                {"object": _obj("SriovOperatorConfig", cfg), "field": "spec.disablePlugins",
                 "value": list(cfg["disable_plugins"]), "want": ["mellanox"],
                 "templates": sorted(_obj("NicConfigurationTemplate", t) for t in templates)[:8]}))
    for t in templates:
        if t["spectrumx"] and t["numvfs"] != 1:
            out.append(Finding(
                "OperatorConfigConflict", "warning", _obj("NicConfigurationTemplate", t),
                f"spectrumXOptimized with numVfs {t['numvfs']}: the operator applies Spectrum-X settings with one VF "
                f"only and ignores the template",
                {"object": _obj("NicConfigurationTemplate", t), "field": "spec.template.numVfs",
                 "value": t["numvfs"], "want": 1}))
    for ds in view.of("daemonsets"):
        chart = ds["chart"]
        if "-beta" in chart:
            out.append(Finding(
                "OperatorConfigConflict", "warning", _obj("DaemonSet", ds),
                f"deployed by a beta chart ({chart}): not a release for production clusters",
                {"object": _obj("DaemonSet", ds), "field": "metadata.labels[helm.sh/chart]", "value": chart}))
    return out


def _node_rails(diag: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(r["pci"]): r for r in diag.get("rails") or () if isinstance(r, dict) and r.get("pci")}


def _mismatch(node: str, pci: str, row: Mapping[str, Any] | None, message: str, evidence: dict[str, Any]) -> Finding:
    subject = (row or {}).get("netdev") or pci
    return Finding("RailIntentMismatch", "critical", str(subject), f"{node}: {message}",
                   {"node": node, "pci": pci, **evidence})


def _intent(view: ClusterView, node: Mapping[str, Any], diag: Mapping[str, Any]) -> list[Finding]:
    name = node["name"]
    rails = _node_rails(diag)
    if not rails:
        return []
    out = []
    for tmpl in view.of("nicinterfacenametemplates"):
        if not _selects(tmpl["node_selector"], node["labels"]):
            continue
        for rail, pcis in enumerate(tmpl["rails"]):
            for pci in pcis:
                row = rails.get(pci)
                if row is None:
                    continue  # a PCI address this node does not have (another platform under the same selector)
                if row.get("rail") is not None and int(row["rail"]) != rail:
                    out.append(_mismatch(name, pci, row, f"the NicInterfaceNameTemplate puts {pci} on rail {rail}, "
                                                         f"the node has it as rail {row['rail']}",
                                         {"object": _obj("NicInterfaceNameTemplate", tmpl),
                                          "field": f"spec.railPciAddresses[{rail}]", "want": rail,
                                          "node_rail": row["rail"]}))
    for dev in view.of("nicdevices"):
        if dev["node"] != name:
            continue
        applied = dev["conditions"].get("InterfaceNameApplied")
        if not applied or applied[0] != "True":
            continue
        for pci, netdev, _rdma in dev["ports"]:
            row = rails.get(pci)
            if row is not None and netdev and row.get("netdev") and row["netdev"] != netdev:
                out.append(_mismatch(name, pci, row, f"the NicDevice says InterfaceNameApplied=True with {netdev} at "
                                                     f"{pci}; the node's netdev there is {row['netdev']}",
                                     {"object": _obj("NicDevice", dev), "field": "status.ports[].networkInterface",
                                      "want": netdev, "node_netdev": row["netdev"]}))
    st = next((s for s in view.of("sriovnetworknodestates") if s["name"] == name), None)
    if st is not None and st["sync"] == "Succeeded":
        for pci, _ifname, numvfs, mtu, eswitch in st["interfaces"]:
            row = rails.get(pci)
            if row is None:
                continue
            where = {"object": _obj("SriovNetworkNodeState", st)}
            if numvfs is not None and row.get("numvfs") is not None and int(row["numvfs"]) != int(numvfs):
                out.append(_mismatch(name, pci, row, f"SR-IOV asks {numvfs} VFs on {pci}, the node has {row['numvfs']}",
                                     {**where, "field": "spec.interfaces[].numVfs", "want": numvfs,
                                      "node_value": row["numvfs"]}))
            if eswitch and row.get("eswitch_mode") and row["eswitch_mode"] != eswitch:
                out.append(_mismatch(name, pci, row, f"SR-IOV asks eSwitch mode {eswitch} on {pci}, the node has "
                                                     f"{row['eswitch_mode']}",
                                     {**where, "field": "spec.interfaces[].eSwitchMode", "want": eswitch,
                                      "node_value": row["eswitch_mode"]}))
            if mtu and row.get("mtu") and int(row["mtu"]) != int(mtu):
                out.append(_mismatch(name, pci, row, f"SR-IOV asks MTU {mtu} on {pci}, the node has {row['mtu']}",
                                     {**where, "field": "spec.interfaces[].mtu", "want": mtu,
                                      "node_value": row["mtu"]}))
    return out


def intent_findings(view: ClusterView, diagnoses: Mapping[str, Mapping[str, Any]] | None = None,
                    only: str | None = None) -> list[Finding]:
    """The conflicts among the objects, and for each node with a diagnosis (``railscope.doctor/v1``) given
    its intent mismatches; sorted as a diagnosis sorts its findings."""
    out: list[Finding] = _conflicts(view)
    nodes: Iterable[Mapping[str, Any]] = view.of("nodes")
    for node in nodes:
        if only is not None and node["name"] != only:
            continue
        diag = (diagnoses or {}).get(node["name"])
        if diag:
            out.extend(_intent(view, node, diag))
    return sorted(out, key=Finding.sort_key)
