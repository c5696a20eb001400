"""The bundle API: list, fetch and verify stored bundles (operator role, checked by ``collector.guard``).

``GET /v1/bundles?cluster=&date=&incident=&node=`` lists; ``GET /v1/bundles/<cluster>/<date>/<incident>/<name>``
streams a ``.tar.gz`` (or its ``.sha256``); ``POST …/<name>/verify`` re-hashes the stored object and
compares it with its ``.sha256``. Every path and query part passes ``proto.keys`` before the store sees it.
"""

from __future__ import annotations

import hashlib
import re

from aiohttp import web

from proto.keys import BundleKey, KeyPartError, check_part, parse_name

from .errors import Refused
from .state import STATE
from .storage import StoreError

__all__ = ["fetch", "list_bundles", "verify"]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _key(request: web.Request) -> tuple[BundleKey, bool]:
    m = request.match_info
    name, sha = m["name"], False
    if name.endswith(".sha256"):
        name, sha = name[: -len(".sha256")], True
    return parse_name(m["cluster"], m["date"], m["incident"], name), sha


async def list_bundles(request: web.Request) -> web.Response:
    q = request.query
    unknown = set(q) - {"cluster", "date", "incident", "node"}
    if unknown:
        raise Refused(400, "bad_key", f"unknown filter {sorted(unknown)[0][:40]!r}")
    try:
        for kind in ("cluster", "incident", "node"):
            if kind in q:
                check_part(kind, q[kind])
        if "date" in q and not _DATE.fullmatch(q["date"]):
            raise KeyPartError("date is yyyy-mm-dd")
    except KeyPartError as exc:
        raise Refused(400, "bad_key", str(exc)) from None
    col = request.app[STATE]
    try:
        found = await col.store.list(q.get("cluster"), q.get("date"), q.get("incident"), q.get("node"))
    except StoreError as exc:
        col.metrics.storage_errors.labels("list").inc()
        raise Refused(503, "store_unavailable", str(exc)) from None
    return web.json_response({"bundles": [s.to_json() for s in found]})


async def fetch(request: web.Request) -> web.StreamResponse:
    try:
        key, sha = _key(request)
    except KeyPartError as exc:
        raise Refused(400, "bad_key", str(exc)) from None
    col = request.app[STATE]
    try:
        st = await col.store.stat(key)
    except StoreError as exc:
        col.metrics.storage_errors.labels("read").inc()
        raise Refused(503, "store_unavailable", str(exc)) from None
    if st is None or (sha and st.sha256 is None):
        raise Refused(404, "not_found", f"no bundle {key.rel}")
    if sha:
        return web.Response(text=f"{st.sha256}  {key.name}\n", content_type="text/plain")
    resp = web.StreamResponse(headers={"Content-Type": "application/gzip", "Content-Length": str(st.bytes),
                                       "Content-Disposition": f'attachment; filename="{key.name}"',
                                       "X-Railscope-Sha256": st.sha256 or ""})
    await resp.prepare(request)
    try:
        async for piece in col.store.read(key):
            await resp.write(piece)
    except (StoreError, FileNotFoundError):
        col.metrics.storage_errors.labels("read").inc()
        # Headers are gone: cutting the body short makes the client see a short read, never a
        # complete-looking bundle.
        if request.transport is not None:
            request.transport.close()
        return resp
    await resp.write_eof()
    return resp


async def verify(request: web.Request) -> web.Response:
    try:
        key, sha = _key(request)
    except KeyPartError as exc:
        raise Refused(400, "bad_key", str(exc)) from None
    if sha:
        raise Refused(400, "bad_key", "verify a .tar.gz, not its .sha256")
    col = request.app[STATE]
    try:
        st = await col.store.stat(key)
        if st is None:
            raise Refused(404, "not_found", f"no bundle {key.rel}")
        h, n = hashlib.sha256(), 0
        async for piece in col.store.read(key):
            h.update(piece)
            n += len(piece)
    except StoreError as exc:
        col.metrics.storage_errors.labels("read").inc()
        raise Refused(503, "store_unavailable", str(exc)) from None
    ok = st.sha256 is not None and h.hexdigest() == st.sha256
    return web.json_response({"key": key.rel, "ok": ok, "sha256": h.hexdigest(), "recorded": st.sha256,
                              "bytes": n})
