"""The collector's shared state and its ``web.AppKey`` declaration, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from .auth import Authenticator
from .config import CollectorSettings
from .metrics import CollectorMetrics
from .storage import Store

__all__ = ["STATE", "Collector"]


@dataclass
class Collector:
    settings: CollectorSettings
    store: Store
    auth: Authenticator
    metrics: CollectorMetrics = field(default_factory=CollectorMetrics)
    in_flight: int = 0
    #: uploads in flight per node (agent principals): no node holds every slot
    in_flight_by_node: dict[str, int] = field(default_factory=dict)


STATE: web.AppKey[Collector] = web.AppKey("collector", Collector)
