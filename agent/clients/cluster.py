"""The operators' objects, watched into a :class:`agent.analysis.rollout.ClusterView` (docs/design.md §9, read-only).

One informer per kind of :data:`agent.analysis.rollout.KINDS` that the server serves (discovery first: a kind
whose group or resource the cluster lacks is skipped and named in ``view.missing``), each one LIST then WATCH.
The namespaced kinds are watched in the operator's namespace, Nodes and the cluster-scoped policies
cluster-wide. ``--node`` narrows with the selectors the real server has (Node and SriovNetworkNodeState by
``metadata.name``, pods by ``spec.nodeName``), never by listing per node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from agent.analysis.rollout import KIND_BY_KEY, KINDS, ClusterView, Kind
from agent.clients.kubernetes import Informer, KubeClient, KubeError, discover, resource_path

__all__ = ["ClusterWatch"]


class ClusterWatch:
    """``await w.sync()`` lists every kind once (the view is then complete); ``w.start()`` keeps it current.

    ``changed`` is set whenever an object changes after the first sync (the caller clears it)."""

    def __init__(self, client: KubeClient, namespace: str, node: str | None = None,
                 kinds: tuple[Kind, ...] = KINDS, watch_timeout: int = 300,
                 on_change: Callable[[str, str, dict[str, Any]], None] | None = None) -> None:
        self.client = client
        self.view = ClusterView(namespace=namespace)
        self.node = node
        self.kinds = kinds
        self.watch_timeout = watch_timeout
        self.informers: dict[str, Informer] = {}
        self.changed = asyncio.Event()
        self.on_change = on_change
        self._tasks: list[asyncio.Task[None]] = []

    def _selectors(self, kind: Kind) -> tuple[str, str]:
        field = kind.field_selector
        if self.node:
            narrow = {"nodes": f"metadata.name={self.node}", "pods": f"spec.nodeName={self.node}",
                      "sriovnetworknodestates": f"metadata.name={self.node}"}.get(kind.key)
            if narrow:
                field = f"{field},{narrow}" if field else narrow
        return kind.label_selector, field

    def _handler(self, key: str) -> Callable[[str, dict[str, Any]], None]:
        def handle(typ: str, obj: dict[str, Any]) -> None:
            md = obj.get("metadata") or {}
            if typ == "DELETED":
                self.view.remove(key, md.get("namespace", ""), md.get("name", ""))
            else:
                self.view.put(key, obj)
            if self.on_change is not None:
                self.on_change(key, typ, obj)
            self.changed.set()
        return handle

    async def sync(self) -> ClusterView:
        served = await discover(self.client, {k.group for k in self.kinds if k.group})
        for kind in self.kinds:
            versions = served.get(kind.group, {})
            version = next((v for v in kind.versions if kind.plural in versions.get(v, ())), None)
            if version is None:
                self.view.missing.append(kind.name)
                continue
            ns = self.view.namespace if kind.namespaced else None
            label, field = self._selectors(kind)
            self.informers[kind.key] = Informer(self.client, resource_path(kind.group, version, kind.plural, ns),
                                                self._handler(kind.key), label_selector=label,
                                                field_selector=field, watch_timeout=self.watch_timeout)
        # The first lists run side by side (a handful of kinds, each paged). A kind the ServiceAccount may
        # not read (the chart's clusterView group switched off) is skipped and named, as a kind not served.
        results = await asyncio.gather(*(inf.list() for inf in self.informers.values()), return_exceptions=True)
        for (key, _inf), res in zip(list(self.informers.items()), results, strict=True):
            if isinstance(res, KubeError) and res.status == 403:
                del self.informers[key]
                self.view.objects.pop(key, None)
                self.view.missing.append(f"{KIND_BY_KEY[key].name} (forbidden)")
            elif isinstance(res, BaseException):
                raise res
        self.changed.clear()
        return self.view

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(inf.run()) for inf in self.informers.values()]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []


#: Dropped from every object a snapshot keeps: bookkeeping of no use to a reader, and a Node's image list
#: (hundreds of KiB a node).
_DROP_META = ("managedFields",)


def _strip(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What a cluster snapshot keeps of an object: no managedFields, no Node image list, and no literal
    environment value of a pod or DaemonSet template (a value may be a password typed in; the name stays)."""
    md = obj.get("metadata") or {}
    for k in _DROP_META:
        md.pop(k, None)
    if key == "nodes":
        (obj.get("status") or {}).pop("images", None)
    if key in ("pods", "daemonsets"):
        spec = obj.get("spec") or {}
        if key == "daemonsets":
            spec = (spec.get("template") or {}).get("spec") or {}
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            for env in c.get("env") or ():
                if "value" in env:
                    env["value"] = "<redacted>"
    return obj


async def snapshot(client: KubeClient, namespace: str, sink: Callable[[str, bytes], None], now: float,
                   events_window: float = 3600.0, kinds: tuple[Kind, ...] = KINDS) -> dict[str, Any]:
    """One LIST per kind (pages of 500), each object as one JSON line handed to ``sink(member, line)``
    (``objects/<kind>.jsonl``), then the namespace's events of the last ``events_window`` seconds
    (``events.jsonl``); returns the manifest (counts, the kinds skipped, the chart versions)."""
    import json

    from agent.analysis.rollout import parse_time

    served = await discover(client, {k.group for k in kinds if k.group})
    counts: dict[str, int] = {}
    skipped: list[str] = []
    charts: set[str] = set()
    for kind in kinds:
        if kind.key == "events":
            continue
        versions = served.get(kind.group, {})
        version = next((v for v in kind.versions if kind.plural in versions.get(v, ())), None)
        if version is None:
            skipped.append(kind.name)
            continue
        path = resource_path(kind.group, version, kind.plural, namespace if kind.namespaced else None)
        counts[kind.key] = 0

        def put(_typ: str, obj: dict[str, Any], key: str = kind.key) -> None:
            counts[key] += 1
            if key == "daemonsets":
                chart = ((obj.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart")
                if chart:
                    charts.add(chart)
            sink(f"objects/{key}.jsonl", json.dumps(_strip(key, obj), sort_keys=True).encode() + b"\n")

        await Informer(client, path, put, label_selector=kind.label_selector).list()
    counts["events"] = 0
    floor = now - events_window

    def event(_typ: str, obj: dict[str, Any]) -> None:
        t = parse_time(obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("metadata") or {}).get(
            "creationTimestamp"))
        if t is None or t >= floor:
            counts["events"] += 1
            sink("events.jsonl", json.dumps(_strip("events", obj), sort_keys=True).encode() + b"\n")

    await Informer(client, resource_path("", "v1", "events", namespace), event).list()
    return {"schema": "railscope.cluster-snapshot/v1", "taken_at": now, "server": client.config.server,
            "namespace": namespace, "counts": counts, "skipped": skipped, "charts": sorted(charts),
            "events_window_s": events_window}
