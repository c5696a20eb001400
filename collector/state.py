"""The collector's shared state and every ``web.AppKey`` of its app, in one place (docs/design.md §11, aiohttp apps).

A module that needs another's state reads it through a key declared here, so no handler module
imports another for its state (the alert handler and the request API once did, both ways).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from agent.config import Expectations

from .auth import Authenticator, Principal
from .config import AlertLimits, CollectorSettings
from .metrics import CollectorMetrics
from .readiness import Readiness
from .storage import Store

if TYPE_CHECKING:
    from .alerts import FabricDesk
    from .cluster.watch import ClusterDesk
    from .guard import Route
    from .requests import RequestBoard

__all__ = ["ANALYSIS_EXPECT", "ANALYSIS_LOCKS", "ANALYSIS_SLOTS", "BOARD", "CLUSTER", "FABRIC", "LIMITS", "PRINCIPAL", "ROUTE_SPECS", "STATE",
           "Collector"]


@dataclass
class Collector:
    settings: CollectorSettings
    store: Store
    auth: Authenticator
    metrics: CollectorMetrics = field(default_factory=CollectorMetrics)
    in_flight: int = 0
    #: (cluster, node) -> uploads in flight (agent principals): no node holds every slot
    in_flight_by_node: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (cluster, node) -> when (monotonic) each of its uploads of the last hour was admitted on this replica
    uploads_by_node: dict[tuple[str, str], deque[float]] = field(default_factory=dict)
    #: (cluster, node) -> (monotonic time, bundle bytes) received of the last hour on this replica
    bytes_by_node: dict[tuple[str, str], deque[tuple[float, int]]] = field(default_factory=dict)
    #: /readyz's cached answer
    readiness: Readiness = field(default_factory=Readiness)


STATE: web.AppKey[Collector] = web.AppKey("collector", Collector)
#: each registered route's spec (its roles and name), by the id of aiohttp's route object
ROUTE_SPECS: web.AppKey[dict[int, Route]] = web.AppKey("route_specs", dict)
#: who is calling, once the guard let the request through (``collector.guard``)
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)
#: this replica's view of the stored capture requests (``requests.setup`` starts and stops it)
BOARD: web.AppKey[RequestBoard] = web.AppKey("request_board")
#: the recent rail alerts correlated into fabric events, and the payloads held for it (``alerts.setup``)
FABRIC: web.AppKey[FabricDesk] = web.AppKey("fabric_desk")
#: the cluster view, where this collector runs one (``collector.cluster.watch.setup``)
CLUSTER: web.AppKey[ClusterDesk] = web.AppKey("cluster_desk")
#: the bounds on captures asked by alerts and operators
LIMITS: web.AppKey[AlertLimits] = web.AppKey("alert_limits", AlertLimits)
#: a lock per bundle being analysed, so two pages asking for one bundle share one analysis (weak
#: values: an entry lives while a page holds or waits on its lock)
ANALYSIS_LOCKS: web.AppKey[weakref.WeakValueDictionary[str, asyncio.Lock]] = web.AppKey(
    "analysis_locks", weakref.WeakValueDictionary)
#: analyses running at once on this replica
ANALYSIS_SLOTS: web.AppKey[asyncio.Semaphore] = web.AppKey("analysis_slots", asyncio.Semaphore)
#: what stored bundles are judged against (the ``RAILSCOPE_<FLAG>`` variables)
ANALYSIS_EXPECT: web.AppKey[Expectations] = web.AppKey("analysis_expectations", Expectations)
