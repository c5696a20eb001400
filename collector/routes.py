"""Every route of the collector, in one table: method, path, handler and who may call it.

The order is the order of registration; no two paths overlap (a ``{name}`` part never holds a ``/``),
so it decides nothing. A route without roles is open (the probes); every other route is checked by
``collector.guard`` before its handler runs, so a new route cannot forget its token check.
"""

from __future__ import annotations

from aiohttp import web

from . import alerts, bundles, ingest, pages, probes
from . import requests as capture_requests
from .guard import Route
from .state import ROUTE_SPECS

__all__ = ["ROUTES", "add_routes"]

_PARTS = "{cluster}/{date}/{incident}/{name}"

ROUTES: tuple[Route, ...] = (
    Route("healthz", "GET", "/healthz", probes.healthz),
    Route("readyz", "GET", "/readyz", probes.readyz),
    Route("metrics", "GET", "/metrics", probes.metrics),
    # An agent uploads as its own node: the hello names it, and the ingest checks it against the token.
    Route("upload", "POST", "/v1/bundles", ingest.upload, ("agent",), expect=ingest.expect_upload),
    Route("bundles_list", "GET", "/v1/bundles", bundles.list_bundles, ("operator",)),
    Route("bundles_get", "GET", f"/v1/bundles/{_PARTS}", bundles.fetch, ("operator",)),
    Route("bundles_verify", "POST", f"/v1/bundles/{_PARTS}/verify", bundles.verify, ("operator",)),
    Route("requests_poll", "GET", "/v1/requests", capture_requests.poll, ("agent",), node="query:node"),
    Route("requests_create", "POST", "/v1/requests", capture_requests.create, ("operator",)),
    Route("requests_show", "GET", "/v1/requests/{node}/{id}", capture_requests.show, ("operator", "agent"),
          node="path:node"),
    Route("requests_done", "POST", "/v1/requests/{node}/{id}/done", capture_requests.done, ("agent",),
          node="path:node"),
    Route("alerts", "POST", "/v1/alerts", alerts.receive, ("alerting",)),
    Route("ui_index", "GET", "/ui/", pages.index, ("operator",), page=pages.refused),
    Route("ui_incident", "GET", "/ui/incidents/{cluster}/{date}/{incident}", pages.incident, ("operator",),
          page=pages.refused),
    Route("ui_fabric", "GET", "/ui/fabric", pages.fabric, ("operator",), page=pages.refused),
    Route("ui_report", "GET", f"/ui/bundles/{_PARTS}", pages.report, ("operator",), page=pages.refused),
    Route("ui_download", "GET", f"/ui/bundles/{_PARTS}/download", bundles.fetch, ("operator",),
          page=pages.refused),
)


def add_routes(app: web.Application) -> None:
    """Register ``ROUTES`` in order (a GET answers HEAD too, as ``add_get`` does)."""
    specs: dict[int, Route] = {}
    for r in ROUTES:
        resource = app.router.add_resource(r.path)
        for method in ("HEAD", "GET") if r.method == "GET" else (r.method,):
            specs[id(resource.add_route(method, r.handler, expect_handler=r.expect))] = r
    app[ROUTE_SPECS] = specs
