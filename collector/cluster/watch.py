"""The collector's cluster watch: one replica (the Lease's holder) watches the operators' objects and stores the
slice of every new incident's nodes under the incident's key, once.

- **Who watches**: the replica holding the Lease ``--cluster-lease`` (``coordination.k8s.io/v1``, the
  collector's only write: :class:`proto.kube.LeaseLock`), renewed every ``renew_s``; a replica that cannot
  renew stops watching and drops what it held, and another takes over once the Lease was not renewed for its
  duration. Each replica otherwise stays a follower: one set of watches per cluster, whatever the replicas.
- **What is watched**: the kinds of :data:`agent.analysis.rollout.KINDS` the server serves (one LIST, then
  WATCH with bookmarks, :func:`proto.kube.watch_kinds`), each object kept as zlib'd compact JSON of what a
  snapshot keeps (:func:`proto.kube.slim`), and the per-node kinds indexed by node, so a slice of a few nodes
  reads a few objects of 80,000.
- **When a slice is stored**: the incidents are the capture requests' (``collector.requests``; an alert
  webhook that reaches any replica stores its requests, and every replica's board reads them). An incident
  whose first request is younger than ``window_s`` and has no slice yet gets one, once ``settle_s`` passed
  since that first request (a webhook's requests are written one by one: a listing between two of them
  would have cut the incident's nodes short): its nodes then, the
  cluster-wide objects whole (``collector.cluster.slice.store_slice``, ``only_new``: a second store of an
  incident, by this replica or a new leader, is a no-op). An older incident seen for the first time (a
  leader's first look after hours of none) gets none: a slice taken now is not the cluster of that moment.

The key is ``<--cluster>/<the first request's UTC date>/<incident>/cluster.tar.gz``: the incident's bundles'
directory (a bundle's date is its capture time's, the same day but for a capture across midnight).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from agent.analysis.rollout import KINDS, Kind
from proto.kube import Informer, KubeClient, KubeConfig, KubeError, LeaseLock, slim, watch_kinds

from ..storage import Store, StoreError
from .slice import NODE_OF, store_slice

__all__ = ["ClusterDesk", "incidents_of"]

log = logging.getLogger("railscope.collector.cluster")


def incidents_of(requests: Iterable[Any]) -> dict[str, tuple[float, set[str]]]:
    """incident -> (its first request's creation time, its nodes), of capture requests."""
    out: dict[str, tuple[float, set[str]]] = {}
    for r in requests:
        first, nodes = out.get(r.incident, (float(r.created), set()))
        nodes.add(r.node)
        out[r.incident] = (min(first, float(r.created)), nodes)
    return out


class ClusterDesk:
    """``await desk.run()`` for ever (a task of the app): lead or follow, watch while leading, slice incidents."""

    def __init__(self, config: KubeConfig, store: Store, cluster: str, namespace: str, lease: tuple[str, str],
                 identity: str, requests: Callable[[], Any], *, kinds: tuple[Kind, ...] = KINDS,
                 renew_s: float = 5.0, duration_s: int = 15, window_s: float = 600.0, settle_s: float = 5.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.config = config
        self.store = store
        self.cluster = cluster
        self.namespace = namespace
        self.lease_ns, self.lease_name = lease
        self.identity = identity
        #: an async callable answering the capture requests this replica knows (the request board's)
        self.requests = requests
        self.kinds = kinds
        self.renew_s = renew_s
        self.duration_s = duration_s
        self.window_s = window_s
        self.settle_s = settle_s
        self.clock = clock or time.time
        #: kind key -> (namespace, name) -> zlib'd JSON
        self.objects: dict[str, dict[tuple[str, str], bytes]] = {}
        #: per-node kind key -> node -> its objects' (namespace, name)
        self.by_node: dict[str, dict[str, set[tuple[str, str]]]] = {}
        self.missing: list[str] = []
        self.synced = asyncio.Event()
        self.sliced: set[str] = set()
        self.stored: list[str] = []
        self.lock: LeaseLock | None = None
        self._informers: dict[str, Informer] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- the view --------------------------------------------------------------------------------------

    def _handler(self, key: str) -> Callable[[str, dict[str, Any]], None]:
        objs = self.objects.setdefault(key, {})
        node_of = NODE_OF.get(key)
        index = self.by_node.setdefault(key, {}) if node_of is not None else None

        def handle(typ: str, obj: dict[str, Any]) -> None:
            md = obj.get("metadata") or {}
            k = (md.get("namespace", ""), md.get("name", ""))
            if index is not None and k in objs:  # the node an object names may change (a pod rescheduled)
                old = node_of(json.loads(zlib.decompress(objs[k])))
                index.get(old, set()).discard(k)
            if typ == "DELETED":
                objs.pop(k, None)
                return
            objs[k] = zlib.compress(json.dumps(slim(key, obj), separators=(",", ":")).encode(), 1)
            if index is not None:
                index.setdefault(node_of(obj), set()).add(k)
        return handle

    def slice_objects(self, nodes: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """The objects a slice of ``nodes`` draws from: the cluster-wide kinds whole, the per-node ones of
        ``nodes`` only (``store_slice`` then cuts the pools and rail pool configs to them)."""
        want = set(nodes)
        out: dict[str, list[dict[str, Any]]] = {}
        for key, objs in self.objects.items():
            index = self.by_node.get(key)
            if index is None:
                out[key] = [json.loads(zlib.decompress(b)) for b in objs.values()]
            else:
                out[key] = [json.loads(zlib.decompress(objs[k])) for n in sorted(want) for k in sorted(index.get(n, ()))
                            if k in objs]
        return out

    # -- leading ---------------------------------------------------------------------------------------

    async def _start_watch(self, client: KubeClient) -> None:
        self.objects.clear()
        self.by_node.clear()
        self._informers, self.missing = await watch_kinds(client, self.kinds, self.namespace, self._handler)
        self._tasks = [asyncio.create_task(inf.run(), name=f"railscope-cluster-{key}")
                       for key, inf in self._informers.items()]
        self.synced.set()
        log.info("cluster view: leading (Lease %s/%s), watching %d kinds%s", self.lease_ns, self.lease_name,
                 len(self._informers), f"; skipped: {', '.join(self.missing)}" if self.missing else "")

    async def _stop_watch(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks, self._informers = [], {}
        self.objects.clear()
        self.by_node.clear()
        self.synced.clear()

    async def slice_incidents(self) -> list[str]:
        """Store the slice of every new incident without one; the keys stored."""
        now = self.clock()
        out = []
        for incident, (first, nodes) in sorted(incidents_of(await self.requests()).items()):
            if incident in self.sliced:
                continue
            if now - first < self.settle_s:
                continue  # its requests are still being written (one webhook's, one by one): look again
            self.sliced.add(incident)
            if now - first > self.window_s:
                continue
            date = datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%d")
            try:
                rel = await store_slice(self.store, self.cluster, date, incident, nodes,
                                        self.slice_objects(nodes), now, self.missing, self.namespace)
            except ValueError as exc:
                log.warning("cluster slice of incident %s not stored: %s", incident, exc)
                continue
            except (StoreError, OSError) as exc:
                self.sliced.discard(incident)  # tried again at the next tick
                log.warning("cluster slice of incident %s: the store: %s", incident, exc)
                continue
            if rel is not None:
                out.append(rel)
                self.stored.append(rel)
                log.info("cluster slice of incident %s: %s (%d node(s))", incident, rel, len(nodes))
        return out

    async def run(self) -> None:
        async with KubeClient(self.config) as client:
            self.lock = LeaseLock(client, self.lease_ns, self.lease_name, self.identity, self.duration_s)
            try:
                while True:
                    try:
                        leading = await self.lock.try_acquire()
                    except KubeError as exc:
                        leading = False
                        log.warning("cluster view: the Lease %s/%s: %s", self.lease_ns, self.lease_name, exc)
                    try:
                        if leading and not self.synced.is_set():
                            await self._start_watch(client)
                        elif not leading and self.synced.is_set():
                            log.info("cluster view: no longer leading; stopped watching")
                            await self._stop_watch()
                        if leading:
                            await self.slice_incidents()
                    except KubeError as exc:
                        log.warning("cluster view: %s", exc)
                        await self._stop_watch()
                    except Exception:  # a bug or an object past parsing must not end the view for good
                        log.exception("cluster view: failed; starting over")
                        await self._stop_watch()
                    await asyncio.sleep(self.renew_s)
            finally:
                await self._stop_watch()
                with contextlib.suppress(Exception):
                    await self.lock.release()


def lease_of(text: str, own_namespace: str | None) -> tuple[str, str]:
    """``[NAMESPACE/]NAME`` -> (namespace, name): without one the pod's own namespace, else ``default``."""
    ns, _, name = text.rpartition("/")
    return (ns or own_namespace or "default", name)


def settings_config(server: str | None, token_file: str | None, ca_file: str | None,
                    environ: Mapping[str, str] | None = None) -> KubeConfig | None:
    """The API server the collector watches: its flags, else the pod's in-cluster configuration; None where
    there is neither (outside a cluster the watch is off unless asked)."""
    if server:
        return KubeConfig(server, token_file, ca_file)
    try:
        return KubeConfig.in_cluster(environ=environ)
    except KubeError:
        return None


def setup(app: Any) -> None:
    """The cluster view as a task of the app, where the settings ask for one (``--cluster-view``); needs the
    request board (:func:`collector.requests.setup`) first. ``SettingsError`` for ``on`` without an API server."""
    import os
    import platform
    import uuid

    from ..config import SettingsError
    from ..state import BOARD, CLUSTER, STATE

    col = app[STATE]
    s = col.settings
    if s.cluster_view == "off":
        return
    config = settings_config(s.cluster_api_server, s.cluster_api_token_file, s.cluster_api_ca_file)
    if config is None:
        if s.cluster_view == "on":
            raise SettingsError("--cluster-view on: no API server (not in a pod; give --cluster-api-server)")
        return  # auto, outside a cluster: off
    board = app[BOARD]

    async def requests() -> list[Any]:
        await board.fresh()
        return board.all()

    # The pod's name is unique among the replicas; the suffix keeps a restarted process from taking its
    # predecessor's Lease for its own before the predecessor's watch is surely gone.
    identity = f"{os.environ.get('HOSTNAME') or platform.node() or 'collector'}-{uuid.uuid4().hex[:8]}"
    desk = app[CLUSTER] = ClusterDesk(config, col.store, s.cluster or "default", s.operator_namespace,
                                      lease_of(s.cluster_lease, config.namespace), identity, requests)

    async def ctx(app: Any) -> Any:
        task = asyncio.create_task(desk.run(), name="railscope-cluster-view")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(ctx)
