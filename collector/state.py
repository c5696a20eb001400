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


STATE: web.AppKey[Collector] = web.AppKey("collector", Collector)
