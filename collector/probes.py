"""``/healthz``, ``/readyz`` and ``/metrics``: the collector's own health and metrics, open to all."""

from __future__ import annotations

from aiohttp import web

from .metrics import CONTENT_TYPE_LATEST
from .state import STATE

__all__ = ["healthz", "metrics", "readyz"]


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    col = request.app[STATE]
    error, fresh = await col.readiness.check(col.store)  # cached a few seconds, one check at a time
    if error is not None:
        if fresh:
            col.metrics.storage_errors.labels("ready").inc()
        return web.json_response({"status": "store unreachable", "store": col.store.description,
                                  "error": error}, status=503)
    return web.json_response({"status": "ready", "store": col.store.description})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
