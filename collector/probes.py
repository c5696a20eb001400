"""``/healthz``, ``/readyz`` and ``/metrics``: the collector's own health and metrics, open to all."""

from __future__ import annotations

import asyncio

from aiohttp import web

from .metrics import CONTENT_TYPE_LATEST
from .state import STATE
from .storage import StoreError

__all__ = ["healthz", "metrics", "readyz"]


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    col = request.app[STATE]
    try:
        await asyncio.wait_for(col.store.ready(), 5)
    except (StoreError, TimeoutError) as exc:
        col.metrics.storage_errors.labels("ready").inc()
        return web.json_response({"status": "store unreachable", "store": col.store.description,
                                  "error": str(exc) or "timeout"}, status=503)
    return web.json_response({"status": "ready", "store": col.store.description})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
