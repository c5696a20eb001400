"""Render a ``MetricsState`` as the text the agent serves (exposition format 0.0.4)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from agent.metrics.collector import RailscopeCollector
from agent.metrics.state import MetricsState

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(state: MetricsState, *, clock: Callable[[], float] = time.time,
           representor_include: str | re.Pattern[str] | None = None) -> bytes:
    """The ``/metrics`` body for ``state``, from a private registry (no process / GC collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RailscopeCollector(lambda: state, clock=clock, representor_include=representor_include))
    return generate_latest(registry)
