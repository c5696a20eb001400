"""``railscope_node_maintenance{reason}``: the node is in planned maintenance, so its alerts are silent.

Three reasons, each 0 or 1:

- ``sriov_reconfiguring``: the sriov-network-operator is (re)configuring the node. Its drain
  controller keeps the node annotation ``sriovnetwork.openshift.io/state`` at ``Idle`` between
  changes and moves it through ``Drain_Required``, ``Draining``, ``DrainComplete`` and
  ``Reboot_Required`` while a policy is applied (sriov-network-operator's
  https://github.com/k8snetworkplumbingwg/sriov-network-operator/blob/master/doc/design/parallel-node-config.md);
- ``cordoned``: ``spec.unschedulable`` (``kubectl cordon``, a drain);
- ``driver_reload``: the agent's own ``DriverReload`` event (``srcversion`` changed) in the last minutes.

The first two come from the agent's own Node object, read with ONE watch on that object
(``fieldSelector=metadata.name=<node>``), never a cluster-wide list: a thousand agents listing every
Node would be a load the API server notices. The watch resumes from its ``resourceVersion``
(bookmarks keep it fresh), starts over with a GET when the server answers 410 Gone, and backs off
with jitter on any error. Where no API server is configured (``KUBERNETES_SERVICE_HOST`` unset, no
service account token) the series is not served at all.

The same watch gives the node's ``status.allocatable`` for the resources ``--rail-resources`` names
(``railscope_node_allocatable{resource}``), and feeds the ``RailResourcesLost`` detector
(``agent/detectors/rail_resources.py``): a resource seen above 0, then at 0, is one event, which the
agent logs, counts and captures on like a detector's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.detectors import rail_resources
from agent.model import Event
from agent.service.background import run_with_app

if TYPE_CHECKING:
    from agent.service.daemon import Agent
    from agent.service.events import EventLog

__all__ = ["REASONS", "SRIOV_STATE_ANNOTATION", "ApiConfig", "MaintenanceMetrics", "NodeWatch",
           "attach", "node_reasons"]

log = logging.getLogger("railscope.agent.maintenance")

REASONS = ("sriov_reconfiguring", "cordoned", "driver_reload")
SRIOV_STATE_ANNOTATION = "sriovnetwork.openshift.io/state"
#: The drain controller's resting state; anything else is a change in progress.
_SRIOV_IDLE = frozenset({"", "Idle"})

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: A DriverReload this recent keeps the node in maintenance: the driver container's pods restart,
#: rails come back one by one, and their first minutes look like faults.
DRIVER_RELOAD_WINDOW_S = 600.0
#: Server-side end of one watch; the client gives up a little later if the server falls silent.
WATCH_TIMEOUT_S = 290
#: A Node object with its images list can reach hundreds of KiB; one watch line is one object.
MAX_LINE_BYTES = 4 << 20
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0


def node_reasons(node: Mapping[str, Any]) -> frozenset[str]:
    """The reasons a Node object gives (``sriov_reconfiguring``, ``cordoned``), from its JSON."""
    out = set()
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    state = annotations.get(SRIOV_STATE_ANNOTATION)
    if isinstance(state, str) and state.strip() not in _SRIOV_IDLE:
        out.add("sriov_reconfiguring")
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    if spec.get("unschedulable") is True:
        out.add("cordoned")
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """How to reach the API server: the in-cluster service account, or a test's stand-in."""

    base_url: str
    token_path: str | None = None
    ca_path: str | None = None

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str] = os.environ, sa_dir: str = SA_DIR) -> ApiConfig | None:
        """The pod's in-cluster configuration, or None where there is no API server to ask."""
        host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
        port = environ.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
        token = os.path.join(sa_dir, "token")
        if not host or not os.path.isfile(token):
            return None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        ca = os.path.join(sa_dir, "ca.crt")
        return cls(f"https://{host}:{port}", token, ca if os.path.isfile(ca) else None)

    def headers(self) -> dict[str, str]:
        """Read on every connection: projected tokens rotate under a running pod."""
        out = {"Accept": "application/json"}
        if self.token_path:
            with open(self.token_path, encoding="ascii") as fh:
                out["Authorization"] = f"Bearer {fh.read().strip()}"
        return out

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.base_url.startswith("https:"):
            return None
        return ssl.create_default_context(cafile=self.ca_path)


class WatchError(Exception):
    """The watch must start over; the message says why."""


class _Gone(WatchError):
    """410: the resourceVersion is too old; start over with a GET."""


class NodeWatch:
    """Follows one Node object; ``reasons`` is what it says now (empty until the first read)."""

    def __init__(self, config: ApiConfig, node: str, *, rng: random.Random | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 resources: tuple[str, ...] = ("nvidia.com/*", "rdma/*", "openshift.io/*"),
                 on_event: Callable[[Event], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        """``resources``: the patterns of ``--rail-resources``; ``on_event`` gets every RailResourcesLost."""
        self.config = config
        self.node = node
        self.resources = resources
        #: the watched resources' allocatable, from the last object read (None: not read yet)
        self.allocatable: dict[str, int] | None = None
        self._detector = rail_resources.initial()
        self._emit_event = on_event
        self._clock = clock
        self.reasons: frozenset[str] = frozenset()
        #: True between a successful read and the next error
        self.synced = False
        self.resource_version: str | None = None
        self.errors = 0
        self.events = 0
        self._rng = rng or random.Random()
        self._sleep = sleep

    async def run(self) -> None:
        """Watch until cancelled; errors back off exponentially (with jitter) and never end the loop."""
        from agent.clients.kubernetes import Gone, KubeClient, KubeConfig, KubeError

        backoff = BACKOFF_MIN_S
        gone = 0
        # The token is read as it is mounted (the kubelet's, group-readable by default), on every request.
        cfg = KubeConfig(self.config.base_url, self.config.token_path, self.config.ca_path, owner_only=False)
        async with KubeClient(cfg, timeout=10) as client:
            while True:
                try:
                    if self.resource_version is None:
                        await self._get(client)
                    started = time.monotonic()
                    await self._watch(client)
                    gone = 0
                    backoff = BACKOFF_MIN_S  # a watch that ran to its timeout is a success
                    if time.monotonic() - started >= BACKOFF_MIN_S:
                        continue
                    # A server that ends every watch at once must not turn this into a busy loop.
                except asyncio.CancelledError:
                    raise
                except (_Gone, Gone):
                    self.resource_version = None
                    gone += 1
                    if gone == 1:
                        continue  # the usual case: the version aged out while the watch was idle
                except (KubeError, TimeoutError, OSError, ValueError, WatchError) as exc:
                    self.errors += 1
                    self.synced = False
                    self.resource_version = None
                    log.warning("node watch failed; retrying: %s", exc,
                                extra={"node": self.node, "retry_s": round(backoff, 1)})
                await self._sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _get(self, client: Any) -> None:
        obj = await client.get_json(f"/api/v1/nodes/{quote(self.node, safe='')}", max_bytes=MAX_LINE_BYTES)
        if not isinstance(obj, dict):
            raise WatchError(f"GET node {self.node}: not an object")
        self._apply(obj)

    async def _watch(self, client: Any) -> None:
        params = {"fieldSelector": f"metadata.name={self.node}", "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_TIMEOUT_S), "resourceVersion": self.resource_version or ""}
        async for ev in client.stream("/api/v1/nodes", params, timeout=WATCH_TIMEOUT_S + 30):
            self._on_event(ev)

    def _on_event(self, ev: Any) -> None:
        if not isinstance(ev, dict) or not isinstance(ev.get("object"), dict):
            raise WatchError("a watch event that is not an object")
        kind, obj = ev.get("type"), ev["object"]
        self.events += 1
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone(str(obj.get("message", "410 Gone")))
            raise WatchError(f"watch error: {obj.get('message', obj.get('code'))}")
        if kind == "BOOKMARK":
            self._note_version(obj)
        elif kind == "DELETED":
            self.reasons = frozenset()
            self._note_version(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self._apply(obj)

    def _apply(self, obj: Mapping[str, Any]) -> None:
        reasons = node_reasons(obj)
        if reasons != self.reasons:
            log.info("node maintenance", extra={"node": self.node, "reasons": sorted(reasons)})
        self.reasons = reasons
        alloc = rail_resources.parse_allocatable(obj, self.resources)
        if alloc is not None:
            self.allocatable = alloc
            self._detector, events = rail_resources.step(self._detector, alloc, self._clock(), self.node)
            for ev in events:
                log.warning("rail resource lost", extra={"node": self.node, "resource": ev.subject})
                if self._emit_event is not None:
                    self._emit_event(ev)
        self.synced = True
        self._note_version(obj)

    def _note_version(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if isinstance(rv, str) and rv:
            self.resource_version = rv


class MaintenanceMetrics:
    """Serves ``railscope_node_maintenance{reason}`` for every reason, 0 or 1."""

    def __init__(self, watch: NodeWatch, events: EventLog, *, clock: Callable[[], float] = time.time,
                 driver_reload_window_s: float = DRIVER_RELOAD_WINDOW_S) -> None:
        self.watch = watch
        self.events = events
        self._clock = clock
        self._window = driver_reload_window_s

    def describe(self) -> list[Metric]:
        return []

    def reasons(self) -> frozenset[str]:
        out = set(self.watch.reasons)
        since = self._clock() - self._window
        if any(ev.code == "DriverReload" for ev in self.events.recent(since)):
            out.add("driver_reload")
        return frozenset(out)

    def collect(self) -> Iterator[Metric]:
        now = self.reasons()
        fam = GaugeMetricFamily("railscope_node_maintenance",
                                "1 while the node is in planned maintenance for this reason (SR-IOV reconfiguration "
                                "in progress, cordoned, driver reloaded in the last minutes); node-scoped alerts "
                                "are silent meanwhile.", labels=["reason"])
        for reason in REASONS:
            fam.add_metric([reason], 1 if reason in now else 0)
        yield fam
        yield GaugeMetricFamily("railscope_agent_node_watch_synced",
                                "1 while the watch on this node's Node object is in sync with the API server.",
                                value=1 if self.watch.synced else 0)
        if self.watch.allocatable is not None:
            alloc = GaugeMetricFamily("railscope_node_allocatable",
                                      "Allocatable count of each extended resource --rail-resources watches, from "
                                      "the node's status.allocatable (0 after more: the device plugin lost the rails).",
                                      labels=["resource"])
            for name in sorted(self.watch.allocatable):
                alloc.add_metric([name], self.watch.allocatable[name])
            yield alloc


def attach(app: web.Application, agent: Agent, config: ApiConfig | None = None) -> NodeWatch | None:
    """Serve the maintenance series from ``agent``'s registry and run the watch with ``app``.

    Nothing happens without an API server (``config`` None and no in-cluster configuration) or
    without a node name (``--node``, spec.nodeName from the downward API).
    """
    config = config or ApiConfig.in_cluster()
    node = agent.settings.node
    if config is None or not node:
        return None
    watch = NodeWatch(config, node, resources=agent.settings.rail_resources, on_event=agent.emit, clock=agent.clock)
    agent.registry.register(MaintenanceMetrics(watch, agent.events, clock=agent.clock))

    run_with_app(app, watch.run, "railscope-node-watch")
    return watch
