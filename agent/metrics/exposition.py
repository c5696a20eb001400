"""The one metrics registry: ``railscope metrics --from`` and the daemon's ``/metrics`` both render
through ``make_registry`` (exposition format 0.0.4)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from agent.metrics.exporter import NodeMetrics
from agent.metrics.state import MetricsState

__all__ = ["CONTENT_TYPE", "make_registry", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def make_registry(get_state: Callable[[], MetricsState | None], *, clock: Callable[[], float] = time.time,
                  representor_include: str | re.Pattern[str] | None = None,
                  extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """A private registry (no process / GC collectors) holding the railscope collector and ``extra``
    (the daemon's own health)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeMetrics(get_state, clock=clock, representor_include=representor_include))
    for collector in extra:
        registry.register(collector)
    return registry


def render(state: MetricsState, *, clock: Callable[[], float] = time.time,
           representor_include: str | re.Pattern[str] | None = None) -> bytes:
    """The ``/metrics`` body for ``state``."""
    return generate_latest(make_registry(lambda: state, clock=clock, representor_include=representor_include))
