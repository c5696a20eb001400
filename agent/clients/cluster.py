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

from agent.analysis.rollout import KINDS, ClusterView, Kind
from agent.clients.kubernetes import (
    Informer,
    KubeClient,
    KubeError,
    discover,
    resource_path,
    slim,
    watch_kinds,
)

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
        # A kind the ServiceAccount may not read (the chart's clusterView group switched off) is skipped and
        # named, as a kind not served.
        self.informers, missing = await watch_kinds(self.client, self.kinds, self.view.namespace, self._handler,
                                                    self._selectors, self.watch_timeout)
        for key in set(self.view.objects) - set(self.informers):
            self.view.objects.pop(key, None)  # a forbidden kind's first page, if any came before the 403
        self.view.missing.extend(missing)
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


_strip = slim


#: The operator pods whose logs a snapshot keeps, and how much of each container's: the tail, as the vendor's
#: sosreport keeps it, bounded so that a 10,000-node cluster's snapshot stays one file to attach.
LOG_PODS = 40
LOG_TAIL_LINES = 500
LOG_TAIL_BYTES = 256 << 10
#: the name a forbidden pods/log read is skipped under
LOGS_FORBIDDEN = "pods/log (forbidden)"


def _log_worthy(pod: dict[str, Any]) -> tuple[int, str] | None:
    """Whether a pod's log tail is kept (None: no), and its place in the order: the operators' controllers
    (pods no DaemonSet owns) first, then DaemonSet pods that restarted or are not ready (one per node of a
    healthy DaemonSet says nothing the others do not)."""
    md, status = pod.get("metadata") or {}, pod.get("status") or {}
    owners = {o.get("kind") for o in md.get("ownerReferences") or ()}
    name = str(md.get("name", ""))
    if "DaemonSet" not in owners:
        return (0, name)
    cs = status.get("containerStatuses") or []
    if any(int(c.get("restartCount") or 0) > 0 or not c.get("ready") for c in cs) or status.get("phase") != "Running":
        return (1, name)
    return None


async def _logs(client: KubeClient, namespace: str, pods: list[dict[str, Any]],
                sink: Callable[[str, bytes], None]) -> tuple[int, bool]:
    """The log tails of the chosen pods (``logs/<pod>/<container>.log``): (how many, whether forbidden). The
    first 403 ends it: RBAC that refuses one pod's log refuses them all (the chart grants no subresource)."""
    from urllib.parse import quote

    chosen = sorted((w, p) for p in pods if (w := _log_worthy(p)) is not None)[:LOG_PODS]
    n = 0
    for _w, pod in chosen:
        name = (pod.get("metadata") or {}).get("name", "")
        for c in (pod.get("spec") or {}).get("containers") or ():
            path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/log"
            try:
                text = await client.get_text(path, {"container": str(c.get("name", "")),
                                                    "tailLines": str(LOG_TAIL_LINES),
                                                    "limitBytes": str(LOG_TAIL_BYTES)}, max_bytes=LOG_TAIL_BYTES)
            except KubeError as exc:
                if exc.status == 403:
                    return n, True
                if exc.status in (400, 404):  # the pod went, or the container has not started
                    continue
                raise
            sink(f"logs/{name}/{c.get('name', '')}.log", text.encode())
            n += 1
    return n, False


async def snapshot(client: KubeClient, namespace: str, sink: Callable[[str, bytes], None], now: float,
                   events_window: float = 3600.0, kinds: tuple[Kind, ...] = KINDS) -> dict[str, Any]:
    """One LIST per kind (pages of 500), each object as one JSON line handed to ``sink(member, line)``
    (``objects/<kind>.jsonl``), then the namespace's events of the last ``events_window`` seconds
    (``events.jsonl``), then the log tails of the operator pods (``logs/<pod>/<container>.log``) where the
    ServiceAccount may read them; returns the manifest (counts, the kinds skipped and what the
    ServiceAccount may not read, the chart versions)."""
    import json

    from agent.analysis.rollout import parse_time

    served = await discover(client, {k.group for k in kinds if k.group})
    counts: dict[str, int] = {}
    skipped: list[str] = []
    charts: set[str] = set()
    pods: list[dict[str, Any]] = []
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
            if key == "pods" and _log_worthy(obj) is not None:
                pods.append({"metadata": obj.get("metadata"), "spec": {"containers": [
                    {"name": c.get("name")} for c in (obj.get("spec") or {}).get("containers") or ()]},
                             "status": obj.get("status")})
            sink(f"objects/{key}.jsonl", json.dumps(_strip(key, obj), sort_keys=True).encode() + b"\n")

        try:
            await Informer(client, path, put, label_selector=kind.label_selector).list()
        except KubeError as exc:
            if exc.status != 403:
                raise
            del counts[kind.key]  # the role leaves the kind out: skipped and named, as one not served
            skipped.append(f"{kind.name} (forbidden)")
    counts["events"] = 0
    floor = now - events_window

    def event(_typ: str, obj: dict[str, Any]) -> None:
        t = parse_time(obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("metadata") or {}).get(
            "creationTimestamp"))
        if t is None or t >= floor:
            counts["events"] += 1
            sink("events.jsonl", json.dumps(_strip("events", obj), sort_keys=True).encode() + b"\n")

    await Informer(client, resource_path("", "v1", "events", namespace), event).list()
    logs, forbidden = await _logs(client, namespace, pods, sink)
    if forbidden:
        skipped.append(LOGS_FORBIDDEN)
    return {"schema": "railscope.cluster-snapshot/v1", "taken_at": now, "server": client.config.server,
            "namespace": namespace, "counts": counts, "skipped": skipped, "charts": sorted(charts),
            "events_window_s": events_window, "logs": logs,
            "log_tail": {"pods": LOG_PODS, "lines": LOG_TAIL_LINES, "bytes": LOG_TAIL_BYTES}}
