"""Who may call a route, and how a refusal is answered: one middleware for every route of the app.

Each route of ``collector.routes`` names the roles it needs (docs/design.md §9: ``agent``, ``alerting``,
``operator``; none for the probes) and, for an agent, where the node it acts for is named (a query
parameter or a path part): the middleware authenticates the bearer token before the handler runs and
leaves the principal in ``request[PRINCIPAL]``. A browser page also takes the operator token as the
password of HTTP Basic credentials. Every :class:`Refused` raised by the token check or by a handler
is answered here, as JSON (or the route's own page), and counted by endpoint and reason.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from proto.keys import KeyPartError, check_part

from .errors import Refused, error_response
from .state import PRINCIPAL, ROUTE_SPECS, STATE

__all__ = ["Handler", "Route", "authorize", "guard", "refusal", "route_of"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    #: the ``endpoint`` label of the refusal counter
    name: str
    method: str
    path: str
    handler: Handler
    #: any one of these roles may call it; empty: open to all (the probes)
    roles: tuple[str, ...] = ()
    #: where an agent names its node: ``query:<name>`` or ``path:<name>``; an agent token may act
    #: for its own node only
    node: str | None = None
    #: a page for a browser: Basic credentials taken, a refusal rendered by this function
    page: Callable[[Refused], web.StreamResponse] | None = None
    #: answers ``Expect: 100-continue`` (it runs before any middleware, so it calls :func:`authorize`)
    expect: Handler | None = None


def route_of(request: web.Request) -> Route | None:
    return request.app[ROUTE_SPECS].get(id(request.match_info.route))


def _bearer(header: str | None) -> str | None:
    """``Basic`` credentials become the bearer token they carry (the password); others pass as given."""
    if header and header[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _user, _, password = decoded.partition(":")
        return f"Bearer {password}" if password else None
    return header


def _node(request: web.Request, where: str | None) -> str | None:
    if where is None:
        return None
    place, _, name = where.partition(":")
    return request.query.get(name) if place == "query" else request.match_info.get(name)


async def authorize(request: web.Request, route: Route) -> None:
    """Check the caller against ``route``; :class:`Refused` (401 / 403 / 503) when it may not call it."""
    if PRINCIPAL in request or not route.roles:
        return
    header = request.headers.get("Authorization")
    principal = await request.app[STATE].auth.authenticate(_bearer(header) if route.page else header,
                                                           request.remote or "?")
    node = _node(request, route.node)
    if node is not None:
        try:
            check_part("node", node)
        except KeyPartError as exc:
            raise Refused(400, "bad_key", str(exc)) from None
    first: Refused | None = None
    for role in route.roles:
        try:
            principal.require(role, node)
        except Refused as exc:
            first = first or exc
            continue
        request[PRINCIPAL] = principal
        return
    assert first is not None
    raise first


def refusal(request: web.Request, route: Route | None, r: Refused) -> web.StreamResponse:
    """Count ``r`` and answer it. A browser asked for its credentials (a 401 to a page) is a login
    prompt, counted apart: an alert on agents' refusals must not fire because someone opened /ui."""
    metrics = request.app[STATE].metrics
    if route is not None and route.page is not None and r.status == 401:
        metrics.page_challenges.labels(route.name).inc()
    else:
        metrics.refuse(route.name if route else "unknown", r.code)
    if route is not None and route.page is not None:
        return route.page(r)
    return error_response(r.status, r.code, r.message, r.headers, close=r.close)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = route_of(request)
    try:
        if route is not None:
            await authorize(request, route)
        return await handler(request)
    except Refused as r:
        return refusal(request, route, r)
