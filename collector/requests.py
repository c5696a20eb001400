"""Capture requests: what the collector asks an agent to capture, and where requests live.

A request names a fixed, versioned capture plan and its parameters — never a command: the agent
maps the plan name to code it ships, so a collector (or whoever can write to the bucket) cannot make
a privileged pod run anything new. A request expires; its id is the bundle id of
``proto.keys.bundle_id(incident, node, plan)``, so a request captured twice (an agent restarted
mid-capture) is stored once, and posting the same alert group again finds the request it made.

Requests live in the object store (``<prefix>/_requests/<node>/<id>.json``; ``_`` can start no
cluster name, so they never mix with bundles), so every collector replica sees every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from proto.keys import KeyPartError, bundle_id, check_part, parse_rel

from . import limits as limits_mod
from .auth import AuthError, Principal
from .errors import error_response
from .state import STATE
from .storage import StoreError
from .storage.local import _create, _mkdirs

__all__ = ["PLANS", "REQUEST_SCHEMA", "CaptureRequest", "PlanSpec", "RequestError", "check_params",
           "plan_ref", "request_for"]

log = logging.getLogger("railscope.collector.requests")

REQUEST_SCHEMA = "railscope.request/v1"
#: The directory of requests below the store prefix.
REQUESTS_DIR = "_requests"
MAX_REQUEST_BYTES = 16 * 1024


class RequestError(ValueError):
    """A request that cannot be made or read; the message is one line for a person."""


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """A capture plan the agents ship: its version and the parameters a request may set."""

    name: str
    version: int
    #: parameter -> (type, default)
    params: Mapping[str, tuple[type, Any]] = field(default_factory=dict)


#: The plans a request may name. ``node-bundle`` is the full node image of DESIGN §7 (the replay
#: plug-in plus every plug-in for people); entering pod network namespaces stays off unless asked.
PLANS: dict[str, PlanSpec] = {
    "node-bundle": PlanSpec("node-bundle", 1, {"pod_netns": (bool, False), "redact": (bool, False)}),
}
DEFAULT_PLAN = "node-bundle"


def check_params(plan: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full parameter set of ``plan`` (defaults filled in), or :class:`RequestError`."""
    spec = PLANS.get(plan) if isinstance(plan, str) else None
    if spec is None:
        raise RequestError(f"unknown capture plan {str(plan)[:40]!r} (known: {', '.join(sorted(PLANS))})")
    params = dict(params or {})
    out = {}
    for name, (kind, default) in spec.params.items():
        value = params.pop(name, default)
        if type(value) is not kind:
            raise RequestError(f"plan {plan} parameter {name} must be {kind.__name__}")
        out[name] = value
    if params:
        raise RequestError(f"plan {plan} has no parameter {sorted(params)[0][:40]!r}")
    return out


def plan_ref(plan: str, params: Mapping[str, Any]) -> str:
    """The plan as the bundle id sees it: name, version, and every parameter away from its default."""
    spec = PLANS[plan]
    extra = "".join(f";{k}={json.dumps(v)}" for k, v in sorted(params.items()) if v != spec.params[k][1])
    return f"{spec.name}/v{spec.version}{extra}"


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    id: str
    incident: str
    node: str
    plan: str
    plan_version: int
    params: Mapping[str, Any]
    created: int
    expires: int
    #: what asked: "alert", "operator" or "local" (an agent's own trigger)
    source: str = "alert"
    alertname: str = ""
    severity: str = ""
    state: str = "pending"  # pending | done
    #: the stored bundle's key (``<cluster>/<date>/<incident>/<name>``) once done
    bundle: str | None = None
    done_at: int | None = None

    def expired(self, now: float) -> bool:
        return self.state == "pending" and now >= self.expires

    def in_flight(self, now: float) -> bool:
        return self.state == "pending" and now < self.expires

    def done(self, bundle: str, now: float) -> CaptureRequest:
        return replace(self, state="done", bundle=bundle, done_at=int(now))

    def to_json(self) -> dict[str, Any]:
        return {"schema": REQUEST_SCHEMA, "id": self.id, "incident": self.incident, "node": self.node,
                "plan": self.plan, "plan_version": self.plan_version, "params": dict(self.params),
                "created": self.created, "expires": self.expires, "source": self.source,
                "alertname": self.alertname, "severity": self.severity, "state": self.state,
                "bundle": self.bundle, "done_at": self.done_at}

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def loads(cls, data: bytes) -> CaptureRequest:
        """A stored request, validated: anything in the bucket is checked before an agent sees it."""
        if len(data) > MAX_REQUEST_BYTES:
            raise RequestError("a stored request larger than 16 KiB")
        try:
            doc = limits_mod.loads(data, "a stored request")
        except ValueError as exc:
            raise RequestError(f"a stored request is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("schema") != REQUEST_SCHEMA:
            raise RequestError(f"not a {REQUEST_SCHEMA} document")
        try:
            incident = check_part("incident", doc.get("incident"))
            node = check_part("node", doc.get("node"))
            plan = doc.get("plan")
            params = check_params(plan, doc.get("params"))
        except KeyPartError as exc:
            raise RequestError(str(exc)) from None
        spec = PLANS[plan]
        if doc.get("plan_version") != spec.version:
            raise RequestError(f"plan {plan} version {doc.get('plan_version')!r} is not {spec.version}")
        rid = bundle_id(incident, node, plan_ref(plan, params))
        if doc.get("id") != rid:
            raise RequestError("the request id is not the bundle id of its incident, node and plan")
        state = doc.get("state")
        if state not in ("pending", "done"):
            raise RequestError(f"request state {str(state)[:20]!r}")
        ints = {}
        for name in ("created", "expires"):
            v = doc.get(name)
            if type(v) is not int or v < 0:
                raise RequestError(f"request {name} must be Unix seconds")
            ints[name] = v
        bundle = doc.get("bundle")
        if bundle is not None and (not isinstance(bundle, str) or len(bundle) > 512):
            raise RequestError("request bundle must be a key")
        done_at = doc.get("done_at")
        strs = {k: doc.get(k) if isinstance(doc.get(k), str) else "" for k in ("source", "alertname", "severity")}
        return cls(id=rid, incident=incident, node=node, plan=plan, plan_version=spec.version, params=params,
                   created=ints["created"], expires=ints["expires"], source=strs["source"][:32] or "alert",
                   alertname=strs["alertname"][:200], severity=strs["severity"][:32], state=state,
                   bundle=bundle, done_at=done_at if type(done_at) is int else None)

    def object_key(self) -> str:
        """The key below the store prefix."""
        return f"{REQUESTS_DIR}/{self.node}/{self.id}.json"


def request_for(incident: str, node: str, *, now: float, ttl_s: float, plan: str = DEFAULT_PLAN,
                params: Mapping[str, Any] | None = None, source: str = "alert", alertname: str = "",
                severity: str = "") -> CaptureRequest:
    """A new pending request; :class:`KeyPartError` / :class:`RequestError` for a bad part or plan."""
    check_part("incident", incident)
    check_part("node", node)
    full = check_params(plan, params)
    return CaptureRequest(id=bundle_id(incident, node, plan_ref(plan, full)), incident=incident, node=node,
                          plan=plan, plan_version=PLANS[plan].version, params=full, created=int(now),
                          expires=int(now + ttl_s), source=source, alertname=alertname[:200],
                          severity=severity[:32])


# -- where requests live -----------------------------------------------------------------------

class RequestBox(Protocol):
    """Small objects below the store prefix (``_requests/...``)."""

    async def put(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        """Write ``data`` at ``rel``; with ``only_new``, False (and nothing written) when it exists."""

    async def get(self, rel: str) -> bytes | None: ...

    async def list(self, rel_dir: str) -> list[tuple[str, str]]:
        """(rel key, version tag) of every object below ``rel_dir``; the tag changes when it is rewritten."""

    async def delete(self, rel: str) -> None: ...


class LocalBox:
    """Requests as files beside the local store's bundles: write, fsync, rename (or link, to create only)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _put(self, rel: str, data: bytes, only_new: bool) -> bool:
        path = self.root / rel
        _mkdirs(path.parent)  # 0o750 every level, files 0o640: requests name nodes and incidents
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
        with os.fdopen(_create(tmp), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            if only_new:
                try:
                    os.link(tmp, path)  # atomic create-if-absent, across replicas on one filesystem
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, path)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    async def put(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        return await self._run(self._put, rel, data, only_new)

    def _get(self, rel: str) -> bytes | None:
        try:
            with open(self.root / rel, "rb") as fh:
                return fh.read(MAX_REQUEST_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def get(self, rel: str) -> bytes | None:
        return await self._run(self._get, rel)

    def _list(self, rel_dir: str) -> list[tuple[str, str]]:
        out = []
        base = self.root / rel_dir
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith("."):
                    continue
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                out.append((str(p.relative_to(self.root)), f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"))
        return sorted(out)

    async def list(self, rel_dir: str) -> list[tuple[str, str]]:
        return await self._run(self._list, rel_dir)

    async def delete(self, rel: str) -> None:
        await self._run(lambda: (self.root / rel).unlink(missing_ok=True))


class S3Box:
    """Requests as objects under the S3 store's prefix, through the store's own boto3 client and pool."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _key(self, rel: str) -> str:
        return f"{self.store.prefix}/{rel}" if self.store.prefix else rel

    async def put(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        try:
            if only_new and await self.get(rel) is not None:
                # Not atomic across replicas; the request id is deterministic, so two replicas that
                # race write the same request, and the bundle id still stores one capture.
                return False
            await self.store.call("put_object", Bucket=self.store.bucket, Key=self._key(rel), Body=data,
                                  ContentType="application/json")
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"s3 put request: {type(exc).__name__}: {exc}") from None
        return True

    async def get(self, rel: str) -> bytes | None:
        try:
            resp = await self.store.call("get_object", Bucket=self.store.bucket, Key=self._key(rel))
            return await asyncio.get_running_loop().run_in_executor(None, resp["Body"].read, MAX_REQUEST_BYTES + 1)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"s3 get request: {type(exc).__name__}: {exc}") from None

    async def list(self, rel_dir: str) -> list[tuple[str, str]]:
        base = self._key(rel_dir).rstrip("/") + "/"
        cut = len(self.store.prefix) + 1 if self.store.prefix else 0

        def run() -> list[tuple[str, str]]:
            out = []
            pages = self.store.client.get_paginator("list_objects_v2").paginate(Bucket=self.store.bucket, Prefix=base)
            for page in pages:
                for o in page.get("Contents", []):
                    out.append((o["Key"][cut:], f"{o.get('ETag', '')}:{o.get('LastModified', '')}"))
            return out

        try:
            return await asyncio.get_running_loop().run_in_executor(None, run)
        except Exception as exc:
            raise StoreError(f"s3 list requests: {type(exc).__name__}: {exc}") from None

    async def delete(self, rel: str) -> None:
        try:
            await self.store.call("delete_object", Bucket=self.store.bucket, Key=self._key(rel))
        except Exception as exc:
            raise StoreError(f"s3 delete request: {type(exc).__name__}: {exc}") from None


def box_for(store: Any) -> RequestBox:
    """The request box beside ``store``'s bundles."""
    if hasattr(store, "client") and hasattr(store, "bucket"):
        return S3Box(store)
    return LocalBox(store.root)


# -- the board: one listing per replica answers every waiting agent ----------------------------

#: Requests finished or expired this long ago are deleted (the bucket lifecycle rule is the backstop).
KEEP_S = 86400.0


class RequestBoard:
    """This replica's view of the stored requests, refreshed by one listing every ``interval_s``.

    A listing runs only while an agent waits (or when the alert handler asks for a fresh view); new or
    rewritten objects are fetched, unchanged ones come from the cache, so a quiet bucket costs one
    LIST per interval whatever the number of waiting agents.
    """

    def __init__(self, box: RequestBox, *, interval_s: float = 2.0, clock: Any = time.time) -> None:
        self.box = box
        self.interval_s = interval_s
        self.clock = clock
        self._cache: dict[str, tuple[str, CaptureRequest | None]] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._wanted = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._fresh_at = float("-inf")
        self.listings = 0
        self.errors = 0
        self.bad_objects = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="railscope-request-board")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.cancel()

    def all(self) -> list[CaptureRequest]:
        return [r for _tag, r in self._cache.values() if r is not None]

    def pending(self, node: str) -> list[CaptureRequest]:
        now = self.clock()
        return sorted((r for r in self.all() if r.node == node and r.in_flight(now)), key=lambda r: r.created)

    def note(self, req: CaptureRequest) -> None:
        """A request this replica wrote: serve it now, without waiting for the next listing."""
        self._cache[req.object_key()] = ("", req)
        self._wake(req.node)

    async def fresh(self) -> None:
        """Refresh unless a listing finished within the interval: concurrent callers share one."""
        if time.monotonic() - self._fresh_at < self.interval_s:
            return
        async with self._lock:
            if time.monotonic() - self._fresh_at >= self.interval_s:
                await self._refresh()

    async def refresh(self) -> None:
        async with self._lock:
            await self._refresh()

    async def _refresh(self) -> None:
        listed = await self.box.list(REQUESTS_DIR)
        self.listings += 1
        self._fresh_at = time.monotonic()
        now = self.clock()
        seen = set()
        for rel, tag in listed:
            seen.add(rel)
            old = self._cache.get(rel)
            if old is not None and old[0] == tag and tag:
                continue
            data = await self.box.get(rel)
            if data is None:
                continue
            try:
                req: CaptureRequest | None = CaptureRequest.loads(data)
                if req is not None and req.object_key() != rel:
                    raise RequestError("a request stored under another node's or id's key")
            except RequestError as exc:
                self.bad_objects += 1
                log.warning("ignoring stored request %s: %s", rel[:120], exc)
                req = None
            self._cache[rel] = (tag, req)
            if req is not None and req.in_flight(now):
                self._wake(req.node)
        for rel in set(self._cache) - seen:
            tag, _req = self._cache[rel]
            if tag:  # written here before a listing saw it: keep it until one does
                del self._cache[rel]
        for rel, (_tag, req) in list(self._cache.items()):
            if req is not None and now - (req.done_at or req.expires) > KEEP_S:
                await self.box.delete(rel)
                self._cache.pop(rel, None)

    def release(self) -> None:
        """Answer every waiting agent now (the replica is shutting down; they poll another)."""
        for node in list(self._waiters):
            self._wake(node)

    def _wake(self, node: str) -> None:
        for fut in self._waiters.pop(node, set()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, node: str, timeout_s: float) -> list[CaptureRequest]:
        """The node's pending requests, waiting up to ``timeout_s`` for one to appear."""
        try:
            await self.fresh()
        except (StoreError, OSError) as exc:
            self.errors += 1
            log.warning("listing the requests failed: %s", exc)
        got = self.pending(node)
        if got or timeout_s <= 0:
            return got
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(node, set()).add(fut)
        self._wanted.set()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(node)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[node]
        return self.pending(node)

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def _loop(self) -> None:
        while True:
            if not self._waiters:
                self._wanted.clear()
                await self._wanted.wait()
            try:
                await self.fresh()
            except (StoreError, OSError) as exc:
                self.errors += 1
                log.warning("listing the requests failed: %s", exc)
            await asyncio.sleep(max(0.05, self._fresh_at + self.interval_s - time.monotonic()))


# -- HTTP: GET /v1/requests (agents), POST /v1/requests (operators), done ----------------------

BOARD: web.AppKey[RequestBoard] = web.AppKey("request_board", RequestBoard)
#: The longest an agent's poll is held: under a minute, so that proxies and load balancers with a
#: 60 s idle timeout never cut a poll.
MAX_WAIT_S = 54.0
DEFAULT_WAIT_S = 50.0
MAX_JSON_BYTES = 16 * 1024


async def _principal(request: web.Request, role: str, node: str | None = None) -> Principal:
    principal = await request.app[STATE].auth.authenticate(request.headers.get("Authorization"))
    principal.require(role, node)
    return principal


def _refuse(exc: Exception) -> web.Response:
    if isinstance(exc, AuthError):
        return error_response(exc.status, exc.code, exc.message)
    if isinstance(exc, KeyPartError):
        return error_response(400, "bad_key", str(exc))
    if isinstance(exc, RequestError):
        return error_response(400, "bad_request", str(exc))
    if isinstance(exc, StoreError):
        return error_response(503, "store_unavailable", str(exc)[:200], headers={"Retry-After": "5"})
    raise exc


async def _json_body(request: web.Request) -> dict[str, Any]:
    data = await request.content.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise RequestError(f"the body is larger than {MAX_JSON_BYTES} bytes")
    if not data.strip():
        return {}
    try:
        doc = limits_mod.loads(data)
    except ValueError:
        raise RequestError("the body is not JSON (or nests too deep)") from None
    if not isinstance(doc, dict):
        raise RequestError("the body must be a JSON object")
    return doc


async def poll(request: web.Request) -> web.Response:
    """``GET /v1/requests?node=N&wait=S``: the node's pending requests, held up to ``wait`` seconds."""
    try:
        node = check_part("node", request.query.get("node"))
        await _principal(request, "agent", node)
        try:
            wait = float(request.query.get("wait", DEFAULT_WAIT_S))
        except ValueError:
            raise RequestError("wait must be a number of seconds") from None
        if not 0 <= wait <= MAX_WAIT_S:
            raise RequestError(f"wait must be between 0 and {MAX_WAIT_S:.0f} s")
    except (AuthError, KeyPartError, RequestError) as exc:
        return _refuse(exc)
    board = request.app[BOARD]
    got = await board.wait(node, wait)
    return web.json_response({"requests": [r.to_json() for r in got], "poll_interval_s": board.interval_s})


async def create(request: web.Request) -> web.Response:
    """``POST /v1/requests`` (operator): capture ``node`` for ``incident``; idempotent per (incident, node, plan)."""
    from .alerts import LIMITS

    try:
        await _principal(request, "operator")
        doc = await _json_body(request)
        limits = request.app[LIMITS]
        req = request_for(doc.get("incident"), doc.get("node"), now=time.time(), ttl_s=limits.request_ttl_s,
                          plan=doc.get("plan", DEFAULT_PLAN), params=doc.get("params"), source="operator")
        board = request.app[BOARD]
        stored = await board.box.get(req.object_key())
        if stored is not None:
            old = CaptureRequest.loads(stored)
            if not old.expired(time.time()):
                return web.json_response({"created": False, "request": old.to_json()})
        await board.box.put(req.object_key(), req.dumps())
        board.note(req)
    except (AuthError, KeyPartError, RequestError, StoreError) as exc:
        return _refuse(exc)
    log.info("capture requested by an operator: %s on %s", req.incident, req.node)
    return web.json_response({"created": True, "request": req.to_json()}, status=201)


async def _load(request: web.Request) -> CaptureRequest:
    node = check_part("node", request.match_info["node"])
    rid = check_part("request id", request.match_info["id"])
    data = await request.app[BOARD].box.get(f"{REQUESTS_DIR}/{node}/{rid}.json")
    if data is None:
        raise web.HTTPNotFound(text=json.dumps({"error": "not_found", "message": "no such request"}),
                               content_type="application/json")
    return CaptureRequest.loads(data)


async def show(request: web.Request) -> web.Response:
    """``GET /v1/requests/<node>/<id>`` (operator, or the node's agent)."""
    try:
        principal = await request.app[STATE].auth.authenticate(request.headers.get("Authorization"))
        node = check_part("node", request.match_info["node"])
        if "operator" not in principal.roles:
            principal.require("agent", node)
        req = await _load(request)
    except (AuthError, KeyPartError, RequestError, StoreError) as exc:
        return _refuse(exc)
    return web.json_response({"request": req.to_json()})


async def done(request: web.Request) -> web.Response:
    """``POST /v1/requests/<node>/<id>/done`` (the node's agent): the bundle is stored.

    The body may name the bundle's key; without one (the upload was answered 409 because an earlier
    capture of this request was stored before the agent restarted) the collector finds the bundle by
    its id. With ``"reused": true`` the key is the node's own capture of the same cause (a local
    trigger within its cooldown). Either way the bundle must be in the store: a request is never
    marked done on a word.
    """
    try:
        node = check_part("node", request.match_info["node"])
        await _principal(request, "agent", node)
        req = await _load(request)
        doc = await _json_body(request)
        if req.state == "done":
            return web.json_response({"request": req.to_json()})
        store = request.app[STATE].store
        key = None
        if doc.get("bundle") is not None:
            key = parse_rel(doc["bundle"]) if isinstance(doc["bundle"], str) else None
            if doc.get("reused") is True:
                # The agent's own capture of the same cause (a local trigger within its cooldown),
                # stored under the incident of its event: any stored bundle of this node.
                if key is None or key.node != req.node:
                    raise RequestError("a reused bundle must be one of this request's node")
            elif key is None or (key.incident, key.node, key.bundle) != (req.incident, req.node, req.id):
                raise RequestError("the bundle key is not this request's incident, node and bundle id")
            found = await store.stat(key)
        else:
            found = next((s for s in await store.list(incident=req.incident, node=req.node)
                          if s.key.bundle == req.id), None)
        if found is None:
            return error_response(409, "not_stored", f"no stored bundle {req.id} for this request yet")
        finished = req.done(found.key.rel, time.time())
        await request.app[BOARD].box.put(finished.object_key(), finished.dumps())
        request.app[BOARD].note(finished)
    except (AuthError, KeyPartError, RequestError, StoreError) as exc:
        return _refuse(exc)
    log.info("capture request %s of %s done: %s", req.id, req.node, finished.bundle)
    return web.json_response({"request": finished.to_json()})


def setup(app: web.Application, *, interval_s: float = 2.0) -> None:
    """The request board (started and stopped with ``app``) and the ``/v1/requests`` routes."""
    board = app[BOARD] = RequestBoard(box_for(app[STATE].store), interval_s=interval_s)

    async def ctx(app: web.Application) -> Any:
        await board.start()
        yield
        await board.close()

    async def shutdown(_app: web.Application) -> None:
        # Before aiohttp waits for open requests: a poll held for 50 s must not hold a rolling update.
        board.release()

    app.cleanup_ctx.append(ctx)
    app.on_shutdown.append(shutdown)
    app.router.add_get("/v1/requests", poll)
    app.router.add_post("/v1/requests", create)
    app.router.add_get("/v1/requests/{node}/{id}", show)
    app.router.add_post("/v1/requests/{node}/{id}/done", done)
