"""Capture requests on the collector's side: where they live, and the ``/v1/requests`` routes.

What a request is — its document, plans, parameters, id and object key — is ``proto/requests.py``
(``proto/SPEC.md``, "Capture requests"), which the agent reads with too. A request names a fixed,
versioned plan, never a command; its id is the bundle id of its incident, node and plan, so a request
captured twice (an agent restarted mid-capture) is stored once, and posting the same alert group
again finds the request it made.

Requests live in the object store (``<prefix>/_requests/<cluster>/<node>/<id>.json``; ``_`` can start
no cluster name, so they never mix with bundles), so every collector replica sees every request. A
request names its cluster: an agent is served, and may close, only the requests of its own cluster
(its token's binding), so cluster A's alert for ``n1`` never makes cluster B's ``n1`` capture. A request
stored before requests named their cluster (``_requests/<node>/<id>.json``) is the default cluster's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

from aiohttp import web

from proto.keys import KeyPartError, check_part, parse_rel
from proto.requests import (
    DEFAULT_CLUSTER,
    DEFAULT_PLAN,
    MAX_POLL_WAIT_S,
    MAX_REQUEST_BYTES,
    MAX_TAKES,
    PLANS,
    POLL_WAIT_S,
    REQUEST_SCHEMA,
    REQUESTS_DIR,
    CaptureRequest,
    PlanSpec,
    RequestError,
    check_params,
    object_key,
    plan_ref,
    request_for,
    take_id,
)

from . import limits as limits_mod
from .errors import Refused
from .state import BOARD, LIMITS, PRINCIPAL, STATE
from .storage import Store, StoreError

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_PLAN", "MAX_REQUEST_BYTES", "PLANS", "REQUESTS_DIR", "REQUEST_SCHEMA", "CaptureRequest",
           "PlanSpec", "RequestError", "check_params", "plan_ref", "request_for"]

log = logging.getLogger("railscope.collector.requests")


# -- the board: one listing per replica answers every waiting agent ----------------------------

#: Requests finished or expired this long ago are deleted (the bucket lifecycle rule is the backstop).
KEEP_S = 86400.0

#: ``<prefix>/_agents/<cluster>/<node>.json``: the node's agent polled at the object's last-modified time.
#: Every replica sees it, so the alert policy tells a node with an agent from one without (gone, never
#: deployed). A marker of an older collector, ``_agents/<node>.json``, is the default cluster's node.
AGENTS_DIR = "_agents"

#: a node of a cluster: what requests, poll markers and per-node caps are keyed by (node names repeat
#: across clusters)
NodeKey = tuple[str, str]
#: a replica rewrites a node's marker at most this often, however often the agent polls
MARK_EVERY_S = 60.0


class RequestBoard:
    """This replica's view of the stored requests, refreshed by one listing every ``interval_s``.

    A listing runs only while an agent waits (or when the alert handler asks for a fresh view); new or
    rewritten objects are fetched, unchanged ones come from the cache, so a quiet bucket costs one
    LIST per interval whatever the number of waiting agents.
    """

    def __init__(self, store: Store, *, interval_s: float = 2.0, clock: Any = time.time,
                 cooldown_s: float = 0.0, default_cluster: str = DEFAULT_CLUSTER) -> None:
        self.store = store
        #: the cluster of a request or marker that names none (stored by an older collector)
        self.default_cluster = default_cluster
        self.interval_s = interval_s
        #: least time between a node's last request capture (done) and the next request it is served
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._cache: dict[str, tuple[str, CaptureRequest | None]] = {}
        self._waiters: dict[NodeKey, set[asyncio.Future[None]]] = {}
        self._wanted = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._fresh_at = float("-inf")
        #: (cluster, node) -> (monotonic, wall) time this replica last wrote its poll marker
        self._marked: dict[NodeKey, tuple[float, float]] = {}
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

    def key_of(self, req: CaptureRequest) -> NodeKey:
        """The (cluster, node) ``req`` is for."""
        return req.in_cluster(self.default_cluster), req.node

    def pending(self, node: str, cluster: str | None = None) -> list[CaptureRequest]:
        """What ``node`` of ``cluster`` (None: the default cluster) is served: its oldest pending
        request, one at a time, and none within the cooldown after its last request capture but an
        operator's. The caps apply here as well as where alerts queue requests: anyone who can write
        the bucket's ``_requests/`` can queue one."""
        now = self.clock()
        want = (cluster or self.default_cluster, node)
        mine = [r for r in self.all() if r.node == node and self.key_of(r) == want]
        waiting = sorted((r for r in mine if r.in_flight(now)), key=lambda r: (r.created, r.id))
        if not waiting:
            return []
        first = waiting[0]
        if first.source != "operator" and self.cooldown_s > 0:
            last = max((r.done_at or 0.0 for r in mine if r.state == "done"), default=0.0)
            if now - last < self.cooldown_s:
                return []
        return [first]

    def note(self, req: CaptureRequest) -> None:
        """A request this replica wrote: serve it now, without waiting for the next listing."""
        self._cache[req.object_key()] = ("", req)
        self._wake(self.key_of(req))

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
        listed = await self.store.list_small(REQUESTS_DIR)
        self.listings += 1
        self._fresh_at = time.monotonic()
        now = self.clock()
        seen = set()
        for rel, tag in listed:
            seen.add(rel)
            old = self._cache.get(rel)
            if old is not None and old[0] == tag and tag:
                continue
            data = await self.store.get_small(rel, MAX_REQUEST_BYTES + 1)
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
                self._wake(self.key_of(req))
        for rel in set(self._cache) - seen:
            tag, _req = self._cache[rel]
            if tag:  # written here before a listing saw it: keep it until one does
                del self._cache[rel]
        for rel, (_tag, req) in list(self._cache.items()):
            if req is not None and now - (req.done_at or req.expires) > KEEP_S:
                await self.store.delete_small(rel)
                self._cache.pop(rel, None)

    async def mark_polled(self, node: str, cluster: str | None = None) -> None:
        """Note in the store that the agent of ``node`` of ``cluster`` (None: the default cluster) polls:
        at most one write a minute per node per replica; a failed write is logged, never the poll's
        failure."""
        cluster = cluster or self.default_cluster
        key = (cluster, node)
        mono = time.monotonic()
        last = self._marked.get(key)
        if last is not None and mono - last[0] < MARK_EVERY_S:
            return
        if len(self._marked) > 100_000:  # nodes that stopped polling long ago
            self._marked = {n: t for n, t in self._marked.items() if mono - t[0] < MARK_EVERY_S}
        wall = self.clock()
        self._marked[key] = (mono, wall)
        try:
            await self.store.put_small(f"{AGENTS_DIR}/{cluster}/{node}.json",
                                       json.dumps({"node": node, "cluster": cluster, "polled_at": wall}).encode())
        except (StoreError, OSError) as exc:
            self._marked.pop(key, None)
            log.warning("marking the poll of %s (cluster %s) failed: %s", node, cluster, exc)

    def _marker_key(self, name: str) -> NodeKey | None:
        """The (cluster, node) of a marker's name below ``_agents/``, None for junk."""
        parts = name[:-5].split("/") if name.endswith(".json") else []
        if len(parts) == 2:
            return parts[0], parts[1]
        if len(parts) == 1:  # an older collector's marker: the default cluster's node
            return self.default_cluster, parts[0]
        return None

    async def agents_seen(self) -> dict[NodeKey, float]:
        """(cluster, node) -> when its agent last polled, as far as any replica marked it (one listing,
        no reads). :class:`StoreError` when the store fails."""
        seen: dict[NodeKey, float] = {}
        now = self.clock()
        stale = []
        for rel, at in await self.store.list_small_times(AGENTS_DIR):
            name = rel[len(AGENTS_DIR) + 1:]
            if now - at > KEEP_S:
                stale.append(rel)  # a node gone for a day: its marker would only grow the listing
            elif (key := self._marker_key(name)) is not None:
                seen[key] = max(seen.get(key, at), at)
        for rel in stale[:100]:  # a few per alert: the answer must not wait on a long sweep
            await self.store.delete_small(rel)
        # what this replica wrote counts by its own clock too (the store's clock may lag it)
        for key, (_mono, wall) in self._marked.items():
            seen[key] = max(seen.get(key, wall), wall)
        return seen

    def release(self) -> None:
        """Answer every waiting agent now (the replica is shutting down; they poll another)."""
        for key in list(self._waiters):
            self._wake(key)

    def _wake(self, key: NodeKey) -> None:
        for fut in self._waiters.pop(key, set()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, node: str, timeout_s: float, cluster: str | None = None) -> list[CaptureRequest]:
        """The pending requests of ``node`` of ``cluster`` (None: the default cluster), waiting up to
        ``timeout_s`` for one to appear."""
        try:
            await self.fresh()
        except (StoreError, OSError) as exc:
            self.errors += 1
            log.warning("listing the requests failed: %s", exc)
        key = (cluster or self.default_cluster, node)
        got = self.pending(node, key[0])
        if got or timeout_s <= 0:
            return got
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(fut)
        self._wanted.set()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[key]
        return self.pending(node, key[0])

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

#: The longest an agent's poll is held: under a minute, so that proxies and load balancers with a
#: 60 s idle timeout never cut a poll.
MAX_WAIT_S = float(MAX_POLL_WAIT_S)
DEFAULT_WAIT_S = float(POLL_WAIT_S)
MAX_JSON_BYTES = 16 * 1024


def _refusal(exc: Exception) -> Refused:
    """The answer to a bad key, a bad request or a failed store (the guard counts and sends it)."""
    if isinstance(exc, KeyPartError):
        return Refused(400, "bad_key", str(exc))
    if isinstance(exc, RequestError):
        return Refused(400, "bad_request", str(exc))
    if isinstance(exc, StoreError):
        return Refused(503, "store_unavailable", str(exc)[:200], headers={"Retry-After": "5"})
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


def _cluster(request: web.Request, asked: object = None) -> str:
    """The cluster a call acts in: the one it names (``asked``; an agent only its own), else the
    caller's binding (an agent token's cluster), else the collector's default cluster."""
    principal = request.get(PRINCIPAL)
    bound = principal.cluster if principal is not None else None
    if asked is None:
        return bound or request.app[BOARD].default_cluster
    cluster = check_part("cluster", asked)
    if principal is not None:
        principal.require_cluster(cluster)
    return cluster


async def poll(request: web.Request) -> web.Response:
    """``GET /v1/requests?node=N&wait=S``: the node's pending requests of the agent's own cluster,
    held up to ``wait`` seconds."""
    try:
        node = check_part("node", request.query.get("node"))
        cluster = _cluster(request, request.query.get("cluster"))
        try:
            wait = float(request.query.get("wait", DEFAULT_WAIT_S))
        except ValueError:
            raise RequestError("wait must be a number of seconds") from None
        if not 0 <= wait <= MAX_WAIT_S:
            raise RequestError(f"wait must be between 0 and {MAX_WAIT_S:.0f} s")
    except (KeyPartError, RequestError) as exc:
        raise _refusal(exc) from None
    board = request.app[BOARD]
    principal = request.get(PRINCIPAL)
    if principal is not None and "agent" in principal.roles:
        await board.mark_polled(node, cluster)
    got = await board.wait(node, wait, cluster)
    return web.json_response({"requests": [r.to_json() for r in got], "poll_interval_s": board.interval_s})


async def create(request: web.Request) -> web.Response:
    """``POST /v1/requests`` (operator): capture ``node`` for ``incident``; idempotent per (incident, node,
    plan) while the request is pending, a new request (``…#take<n>``) once it was captured."""
    try:
        doc = await _json_body(request)
        limits = request.app[LIMITS]
        req = request_for(doc.get("incident"), doc.get("node"), now=time.time(), ttl_s=limits.request_ttl_s,
                          plan=doc.get("plan", DEFAULT_PLAN), params=doc.get("params"), source="operator",
                          cluster=_cluster(request, doc.get("cluster")))
        board = request.app[BOARD]
        first = req
        for take in range(2, MAX_TAKES + 2):
            stored = await board.store.get_small(req.object_key(), MAX_REQUEST_BYTES + 1)
            if stored is None:
                break
            old = CaptureRequest.loads(stored)
            if old.state != "done" and not old.expired(time.time()):
                # the same ask again (a retried POST, a second operator) while it is pending: that request
                return web.json_response({"created": False, "request": old.to_json()})
            if old.state != "done":
                break  # expired without a bundle: asked again under the same id
            # Captured already: a second capture of the node in this incident (after a fix, to compare)
            # gets an id of its own, never the first one's (its upload would be a 409).
            req = dataclasses.replace(first, take=take, id=take_id(first.incident, first.node, first.plan_ref, take))
        else:
            raise RequestError(f"{first.node} was captured {MAX_TAKES} times for {first.incident}; start another "
                               "incident")
        await board.store.put_small(req.object_key(), req.dumps())
        board.note(req)
    except (KeyPartError, RequestError, StoreError) as exc:
        raise _refusal(exc) from None
    log.info("capture requested by an operator: %s on %s (cluster %s)", req.incident, req.node, req.cluster)
    return web.json_response({"created": True, "request": req.to_json()}, status=201)


async def _load(request: web.Request) -> CaptureRequest:
    """The request the path names, in the caller's cluster (an agent: its own; an operator: the
    ``cluster`` query, else the default): another cluster's request of a node of the same name is
    404 to it, never closed by it."""
    node = check_part("node", request.match_info["node"])
    rid = check_part("request id", request.match_info["id"])
    board = request.app[BOARD]
    cluster = _cluster(request, request.query.get("cluster"))
    keys = [object_key(node, rid, cluster)]
    if cluster == board.default_cluster:
        keys.append(object_key(node, rid))  # stored before requests named their cluster
    for key in keys:
        data = await board.store.get_small(key, MAX_REQUEST_BYTES + 1)
        if data is not None:
            req = CaptureRequest.loads(data)
            if req.object_key() != key:
                raise RequestError("a request stored under another node's or id's key")
            return req
    raise Refused(404, "not_found", "no such request")


async def show(request: web.Request) -> web.Response:
    """``GET /v1/requests/<node>/<id>`` (operator, or the node's agent)."""
    try:
        req = await _load(request)
    except (KeyPartError, RequestError, StoreError) as exc:
        raise _refusal(exc) from None
    return web.json_response({"request": req.to_json()})


async def done(request: web.Request) -> web.Response:
    """``POST /v1/requests/<node>/<id>/done`` (the node's agent): the bundle is stored.

    The body may name the bundle's key; without one (the upload was answered 409 because an earlier
    capture of this request was stored before the agent restarted) the collector finds the bundle by
    its id. With ``"reused": true`` the key is the node's own capture of the same cause (a local
    trigger within its cooldown), copied under the request's incident and bundle id
    (``collector.rekey``). Either way the bundle must be in the store: a request is never marked done
    on a word.
    """
    try:
        req = await _load(request)
        doc = await _json_body(request)
        if req.state == "done":
            return web.json_response({"request": req.to_json()})
        store = request.app[STATE].store
        key = None
        if doc.get("bundle") is not None:
            key = parse_rel(doc["bundle"]) if isinstance(doc["bundle"], str) else None
            cluster = req.in_cluster(request.app[BOARD].default_cluster)
            if doc.get("reused") is True:
                # The agent's own capture of the same cause (a local trigger within its cooldown),
                # stored under the incident of its event: any stored bundle of this node.
                if key is None or (key.cluster, key.node) != (cluster, req.node):
                    raise RequestError("a reused bundle must be one of this request's cluster and node")
            elif key is None or (key.cluster, key.incident, key.node, key.bundle) != (
                    cluster, req.incident, req.node, req.id):
                raise RequestError("the bundle key is not this request's cluster, incident, node and bundle id")
            found = await store.stat(key)
        else:
            found = next((s for s in await store.list(cluster=req.in_cluster(request.app[BOARD].default_cluster),
                                                      incident=req.incident, node=req.node)
                          if s.key.bundle == req.id), None)
        if found is None:
            raise Refused(409, "not_stored", f"no stored bundle {req.id} for this request yet")
        if doc.get("reused") is True and found.key.incident != req.incident:
            # the event's one-node incident keeps its bundle; the alert's incident gets a copy
            from .rekey import file_under_request

            found = await file_under_request(store, found, req.incident, req.id)
        finished = req.done(found.key.rel, time.time())
        await request.app[BOARD].store.put_small(finished.object_key(), finished.dumps())
        request.app[BOARD].note(finished)
    except (KeyPartError, RequestError, StoreError) as exc:
        raise _refusal(exc) from None
    log.info("capture request %s of %s done: %s", req.id, req.node, finished.bundle)
    await _file_for_followers(request.app[BOARD], finished, found)
    return web.json_response({"request": finished.to_json()})


async def _file_for_followers(board: RequestBoard, finished: CaptureRequest, found: Any) -> None:
    """The alerts of other incidents that came while ``finished`` was being captured (their requests
    stored pending behind it, ``collector.alerts`` ``follow``) get its bundle, copied under their
    incident and id, instead of a second capture. A failure is logged: the request stays pending and
    is served once the node's cooldown is over."""
    from .rekey import file_under_request

    where = board.key_of(finished)
    followers = [r for r in board.all() if board.key_of(r) == where and r.id != finished.id and r.state == "pending"
                 and r.source == "alert" and finished.created <= r.created <= (finished.done_at or r.created)]
    for r in followers:
        try:
            copied = await file_under_request(board.store, found, r.incident, r.id)
            done_r = r.done(copied.key.rel, finished.done_at or time.time())
            await board.store.put_small(done_r.object_key(), done_r.dumps())
            board.note(done_r)
            log.info("capture request %s of %s (%s) answered with %s", r.id, r.node, r.incident, finished.bundle)
        except (StoreError, OSError) as exc:
            log.warning("filing %s under %s for request %s failed: %s", finished.bundle, r.incident, r.id, exc)


def setup(app: web.Application, *, interval_s: float = 2.0) -> None:
    """The request board, started and stopped with ``app`` (the routes are in ``collector.routes``)."""
    settings = app[STATE].settings
    board = app[BOARD] = RequestBoard(app[STATE].store, interval_s=interval_s,
                                      cooldown_s=settings.alerts.cooldown_s,
                                      default_cluster=settings.cluster or DEFAULT_CLUSTER)

    async def ctx(app: web.Application) -> Any:
        await board.start()
        yield
        await board.close()

    async def shutdown(_app: web.Application) -> None:
        # Before aiohttp waits for open requests: a poll held for 50 s must not hold a rolling update.
        board.release()

    app.cleanup_ctx.append(ctx)
    app.on_shutdown.append(shutdown)
