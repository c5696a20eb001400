"""The operators' objects, watched into a :class:`agent.analysis.rollout.ClusterView` (DESIGN §9, read-only).

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
from agent.clients.kubernetes import Informer, KubeClient, discover, resource_path

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
        # The first lists run side by side (a handful of kinds, each paged).
        await asyncio.gather(*(inf.list() for inf in self.informers.values()))
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
