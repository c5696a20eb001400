"""A stand-in for the Kubernetes API server: one Node object and its watch stream, fed by the test."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from agent.service import maintenance
from agent.service.maintenance import ApiConfig

NODE = "gpu-node-7"
TOKEN = "stand-in-token"


def node_object(rv: int, *, state: str | None = "Idle", unschedulable: bool | None = None) -> dict[str, Any]:
    """The Node ``NODE`` at resource version ``rv``, with an SR-IOV operator state and a cordon."""
    meta: dict[str, Any] = {"name": NODE, "resourceVersion": str(rv), "annotations": {}}
    if state is not None:
        meta["annotations"][maintenance.SRIOV_STATE_ANNOTATION] = state
    spec: dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    # A real Node carries a long images list; the watch must cope with lines far beyond 64 KiB.
    return {"kind": "Node", "apiVersion": "v1", "metadata": meta, "spec": spec,
            "status": {"images": [{"names": [f"registry.example/img-{i}:{'x' * 200}"]} for i in range(600)]}}


class KubeApiStandIn:
    """A stand-in for the API server: one Node, its watch stream fed by the test."""

    def __init__(self) -> None:
        self.node = node_object(100)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.streams: asyncio.Queue[list[dict[str, Any] | None]] = asyncio.Queue()
        self.get_failures = 0
        self.gone_versions: set[str] = set()
        self.watching = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes/{name}", self._get)
        app.router.add_get("/api/v1/nodes", self._collection)
        return app

    def _auth(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise web.HTTPUnauthorized()

    async def _get(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.query)))
        self._auth(request)
        if self.get_failures:
            self.get_failures -= 1
            raise web.HTTPInternalServerError()
        if request.match_info["name"] != NODE:
            raise web.HTTPNotFound()
        return web.json_response(self.node)

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, dict(request.query)))
        self._auth(request)
        if request.query.get("fieldSelector") != f"metadata.name={NODE}" or request.query.get("watch") != "true":
            raise web.HTTPForbidden(text="this stand-in serves one node's watch only")
        if request.query.get("resourceVersion") in self.gone_versions:
            return web.json_response({"kind": "Status", "code": 410, "reason": "Expired"}, status=410)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        self.watching.set()
        events = await self.streams.get()
        for ev in events:
            if ev is None:
                break
            await resp.write(json.dumps(ev).encode() + b"\n")
            await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(3600)  # the test ends the run before this
        return resp


async def until(cond: Any, what: str, timeout: float = 5.0) -> None:
    """Wait until ``cond()`` holds; after ``timeout`` seconds fail naming ``what``."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def with_stand_in(body: Any, tmp: Path) -> KubeApiStandIn:
    """Run ``await body(api, cfg)`` against a started stand-in, ``cfg`` the agent's API config for it."""
    api = KubeApiStandIn()
    server = TestServer(api.app())
    await server.start_server()
    token = tmp / "token"
    token.write_text(TOKEN)
    cfg = ApiConfig(str(server.make_url("")), str(token))
    try:
        await body(api, cfg)
    finally:
        await server.close()
    return api
