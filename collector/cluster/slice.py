"""The cluster slice of an incident: the objects that concern its nodes, as one ``tar.gz`` under the
incident's key (``<cluster>/<yyyy-mm-dd>/<incident>/cluster.tar.gz`` and its ``.sha256``), written once.

The layout is ``railscope snapshot --cluster``'s (``railscope-cluster/manifest.json``, ``objects/<kind>.jsonl``,
``events.jsonl``), so ``railscope diff`` and ``report`` read a slice as they read a snapshot. Kept: the
cluster-wide objects whole (policies, DaemonSets, CRDs, templates, SR-IOV policies and config, pools), and of
the per-node kinds only the incident's nodes' (Node, pods on them, their NicDevices, SriovNetworkNodeStates,
NodeMaintenances); a SpectrumXRailPoolConfig's ``nodeStates`` and a pool's ``allocations`` cut to those nodes.
The name holds no timestamp on purpose: ``only_new`` makes the second store of an incident a no-op.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping
from typing import Any

from collector.storage import Store
from proto.keys import check_part, sha256_line

__all__ = ["MAX_SLICE_BYTES", "NODE_OF", "SLICE_NAME", "incident_slice", "pack", "read_slice", "slice_rel",
           "store_slice"]

TOP = "railscope-cluster"
SCHEMA = "railscope.cluster-snapshot/v1"
#: The slice's name in the incident's directory (``railscope doctor --from`` / ``report`` look for it beside a
#: bundle of the incident).
SLICE_NAME = "cluster.tar.gz"
#: A slice of a few nodes is small; a slice past this is refused, never stored half.
MAX_SLICE_BYTES = 64 << 20

#: kind key -> how an object names its node (None: a cluster-wide object, kept whole)
NODE_OF = {
    "nodes": lambda o: (o.get("metadata") or {}).get("name"),
    "pods": lambda o: (o.get("spec") or {}).get("nodeName"),
    "nicdevices": lambda o: (o.get("status") or {}).get("node"),
    "sriovnetworknodestates": lambda o: (o.get("metadata") or {}).get("name"),
    "nodemaintenances": lambda o: (o.get("spec") or {}).get("nodeName"),
}


def incident_slice(objects: Mapping[str, Iterable[dict[str, Any]]], nodes: Iterable[str]) -> dict[str, list[dict]]:
    """The objects that concern ``nodes`` (kind key -> objects), copies: the view is never changed."""
    want = set(nodes)
    out: dict[str, list[dict[str, Any]]] = {}
    for key, objs in objects.items():
        node_of = NODE_OF.get(key)
        kept = []
        for obj in objs:
            if node_of is not None:
                if node_of(obj) in want:
                    kept.append(copy.deepcopy(obj))
                continue
            obj = copy.deepcopy(obj)
            status = obj.get("status")
            if key == "spectrumxrailpoolconfigs" and isinstance(status, dict):
                status["nodeStates"] = [s for s in status.get("nodeStates") or () if s.get("name") in want]
            if key in ("cidrpools", "ippools") and isinstance(status, dict):
                status["allocations"] = [a for a in status.get("allocations") or () if a.get("nodeName") in want]
            kept.append(obj)
        out[key] = kept
    return out


def pack(manifest: Mapping[str, Any], objects: Mapping[str, Iterable[dict[str, Any]]]) -> bytes:
    """The slice as ``railscope snapshot --cluster`` lays it out, gzip in memory (bounded by the caller)."""
    buf = io.BytesIO()
    mtime = int(manifest.get("taken_at", 0))
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))

        add("manifest.json", json.dumps(dict(manifest), indent=1, sort_keys=True).encode())
        for key in sorted(objects):
            lines = b"".join(json.dumps(o, sort_keys=True).encode() + b"\n" for o in objects[key])
            add("events.jsonl" if key == "events" else f"objects/{key}.jsonl", lines)
    return buf.getvalue()


def slice_rel(cluster: str, date: str, incident: str) -> str:
    return f"{cluster}/{date}/{incident}/{SLICE_NAME}"


def read_slice(data: bytes, sha256: str | None = None) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The manifest and ``{kind key: [objects]}`` of a stored slice (what :func:`pack` wrote); ``ValueError``
    for one that is not a slice, or whose digest is not ``sha256`` (its ``.sha256``)."""
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("the cluster slice does not match its .sha256")
    manifest: dict[str, Any] = {}
    objects: dict[str, list[dict[str, Any]]] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                if not member.isfile() or not member.name.startswith(f"{TOP}/"):
                    continue
                fh = tar.extractfile(member)
                name = member.name[len(TOP) + 1:]
                if fh is None:
                    continue
                if name == "manifest.json":
                    manifest = json.loads(fh.read())
                elif name.endswith(".jsonl"):
                    objects[name.rsplit("/", 1)[-1][:-len(".jsonl")]] = [json.loads(x) for x in fh if x.strip()]
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"not a cluster slice: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} slice")
    return manifest, objects


async def store_slice(store: Store, cluster: str, date: str, incident: str, nodes: Iterable[str],
                      objects: Mapping[str, Iterable[dict[str, Any]]], now: float,
                      skipped: Iterable[str] = (), namespace: str | None = None) -> str | None:
    """Store the incident's slice once; its key, or None when the incident has one already.

    ``ValueError`` for a part that is not a key part or a slice over :data:`MAX_SLICE_BYTES`."""
    for kind, value in (("cluster", cluster), ("incident", incident)):
        check_part(kind, value)
    nodes = sorted(set(nodes))
    for n in nodes:
        check_part("node", n)
    part = incident_slice(objects, nodes)
    manifest = {"schema": SCHEMA, "taken_at": now, "incident": incident, "nodes": nodes,
                "counts": {k: len(v) for k, v in part.items()}, "skipped": sorted(skipped)}
    if namespace:
        manifest["namespace"] = namespace
    data = pack(manifest, part)
    if len(data) > MAX_SLICE_BYTES:
        raise ValueError(f"the cluster slice of {incident} is {len(data)} bytes, more than {MAX_SLICE_BYTES}")
    rel = slice_rel(cluster, date, incident)
    if not await store.put_small(rel, data, only_new=True):
        return None
    await store.put_small(rel + ".sha256", sha256_line(hashlib.sha256(data).hexdigest(), SLICE_NAME).encode())
    return rel
