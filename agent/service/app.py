"""The agent's HTTP app: ``/metrics``, ``/healthz``, ``/readyz`` and the recorder endpoints, and the
aiohttp runner that serves it until SIGTERM / SIGINT.

Every handler serves state the background samplers already hold: nothing here reads the node,
except ``/v1/image``, which records a node image in a worker thread (one at a time) and streams it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator

from aiohttp import web

from agent.config import AgentSettings
from agent.service import maintenance, pull
from agent.service.captures import CaptureBusy, CaptureFailed
from agent.service.daemon import Agent
from agent.service.data_access import DataAccess, data_access_middleware
from agent.service.keys import AGENT
from proto.connections import (
    ConnectionGuard,
    GuardedSite,
    limit_accept_errors,
    runner_args,
    total_connections,
)

__all__ = ["make_app", "serve"]

log = logging.getLogger("railscope.agent.http")

_CHUNK = 1 << 16


async def metrics(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    body = await agent.render_metrics()
    return web.Response(body=body, headers={"Content-Type": agent.metrics_content_type})


async def healthz(request: web.Request) -> web.Response:
    """Live: the event loop answers. A stuck source is reported in /metrics, not here: restarting
    the pod would not unstick a read that hangs in the driver."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    if agent.ready:
        doc: dict[str, object] = {"status": "ready", "sample_age_s": agent.sample_age()}
        warnings = agent.warnings()
        if warnings:
            # still ready (the agent serves what it read), but it judges nothing per rail
            doc["warnings"] = warnings
        return web.json_response(doc)
    return web.json_response({"status": "starting", "waiting_for": agent.waiting_for()}, status=503)


async def recorder(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    if agent.recorder is None:
        raise web.HTTPNotFound(text="the flight recorder is off (--recorder-window 0)\n")
    text = await asyncio.get_running_loop().run_in_executor(None, agent.recorder_jsonl)
    return web.Response(text=text, content_type="application/x-ndjson")


async def events(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    return web.Response(text=json.dumps(agent.events.to_json(), default=str) + "\n",
                        content_type="application/json")


async def image(request: web.Request) -> web.StreamResponse:
    agent = request.app[AGENT]
    reason = request.query.get("reason", "requested")
    incident = request.query.get("incident")
    try:
        path, name = await agent.record_image(reason=reason, incident=incident)
    except CaptureBusy:
        raise web.HTTPTooManyRequests(text="a node image is being recorded; retry shortly\n",
                                      headers={"Retry-After": "5"}) from None
    except CaptureFailed as exc:
        raise web.HTTPServiceUnavailable(text=f"{exc}\n") from None
    try:
        size = os.path.getsize(path)
        resp = web.StreamResponse(headers={
            "Content-Type": "application/gzip",
            "Content-Disposition": f'attachment; filename="{name}.tar.gz"',
            "Content-Length": str(size),
        })
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        with open(path, "rb") as fh:
            while True:
                chunk = await loop.run_in_executor(None, fh.read, _CHUNK)
                if not chunk:
                    break
                await resp.write(chunk)
        await resp.write_eof()
        return resp
    finally:
        agent.discard_image(path)


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    agent = app[AGENT]
    await agent.start()
    yield
    await agent.stop()


def make_app(agent: Agent) -> web.Application:
    """The app factory: the agent's background work starts and stops with the app."""
    app = web.Application(client_max_size=1 << 16,
                          middlewares=[data_access_middleware(DataAccess(agent.settings.data_token_file))])
    app[AGENT] = agent
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/recorder", recorder)
    app.router.add_get("/v1/events", events)
    app.router.add_get("/v1/image", image)
    app.cleanup_ctx.append(_agent_ctx)
    maintenance.attach(app, agent)
    pull.attach(app, agent)
    return app


def _unix_site(runner: web.AppRunner, path: str) -> web.UnixSite:
    """The data socket, owner-only: a stale one from a previous run is replaced."""
    if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
        os.unlink(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    class _Site(web.UnixSite):
        async def start(self) -> None:
            old = os.umask(0o177)
            try:
                await super().start()
            finally:
                os.umask(old)

    return _Site(runner, path)


async def serve(settings: AgentSettings) -> int:
    """Serve until SIGTERM / SIGINT; 1 when the address cannot be bound, 3 for a bad setting."""
    try:
        agent = Agent(settings)
    except ValueError as exc:  # a --kernel-table file that does not parse, a bad threshold
        print(f"railscope agent: {exc}", file=sys.stderr)
        return 3
    app = make_app(agent)
    # The collector's bounds (proto/connections.py): the agent listens on the node's address in the
    # host network, where no NetworkPolicy applies, so half-sent requests must not hold /healthz
    # and /metrics, nor a failing accept() write a traceback a second.
    runner = web.AppRunner(app, handle_signals=False, access_log=None, **runner_args(settings.header_timeout_s))
    await runner.setup()
    limit_accept_errors(asyncio.get_running_loop(), log=log)
    conns = ConnectionGuard(settings.max_conns_per_peer, total_connections())
    site = GuardedSite(runner, settings.listen, settings.port, guard=conns, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot serve", extra={"listen": settings.listen, "port": settings.port,
                                         "reason": exc.strerror or str(exc)})
        print(f"railscope agent: cannot listen on {settings.listen} port {settings.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        await runner.cleanup()
        return 1
    if settings.data_socket:
        try:
            await _unix_site(runner, settings.data_socket).start()
        except OSError as exc:
            print(f"railscope agent: cannot serve on {settings.data_socket}: {exc.strerror or exc}", file=sys.stderr)
            await runner.cleanup()
            return 1
        log.info("serving the data endpoints", extra={"socket": settings.data_socket})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("serving", extra={"listen": settings.listen, "port": settings.port})
    await stop.wait()
    log.info("stopping (signal)")
    await runner.cleanup()
    return 0
