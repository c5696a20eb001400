"""The agent's side of capture requests (DESIGN §9): pull them from the collector, capture, upload.

Nothing connects into the privileged pod: the agent long-polls ``GET /v1/requests?node=<own node>``
on the collector (answered within a minute), and for each pending request captures this node in
process — one capture at a time, through the capture runner — streams the bundle to
``POST /v1/bundles`` with the request's incident, and reports ``…/done`` with the stored key.

Nothing about a request is kept on the node. An agent killed mid-capture polls again after its
restart and finds the request still pending; the bundle id is the request's id (a function of
incident, node and plan) and the bundle's time is the request's, so the capture it makes then is
the same object to the collector: stored once, never twice. A request names a plan the agent ships
(``PLANS``); anything else is refused here too, whatever the collector said.
"""

from __future__ import annotations

import asyncio
import calendar
import logging
import os
import random
import re
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from agent.service.background import run_with_app
from proto.keys import KeyPartError, bundle_id, check_part

if TYPE_CHECKING:
    from agent.service.daemon import Agent

__all__ = ["PLANS", "Captured", "PullRequest", "RequestPuller", "attach", "parse_request"]

log = logging.getLogger("railscope.agent.pull")

#: plan -> (version, parameter defaults): the plans this agent can run (collector/requests.py PLANS).
PLANS: dict[str, tuple[int, dict[str, Any]]] = {"node-bundle": (1, {"pod_netns": False, "redact": False})}
#: alert -> the detector event of the same cause, whose local capture (``--capture-on``) a request
#: for that alert reuses within the capture cooldown instead of capturing again
ALERT_EVENTS: dict[str, str] = {
    "RailscopeLinkFlapping": "LinkFlapping", "RailscopeConfigFlapping": "ConfigFlapping",
    "RailscopePfcStorm": "PfcStorm", "RailscopeLosslessDrops": "LosslessDrops",
    "RailscopeRepresentorStale": "RepresentorStale",
}
POLL_WAIT_S = 50
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
#: ids this agent finished recently: a replica's view of the store may lag one listing behind
_DONE_MEMORY = 256


class RequestRefused(ValueError):
    """A request this agent will not run; the message says why."""


@dataclass(frozen=True, slots=True)
class PullRequest:
    id: str
    incident: str
    node: str
    plan: str
    plan_version: int
    params: Mapping[str, Any]
    created: int
    expires: int
    alertname: str = ""
    source: str = ""

    @property
    def plan_ref(self) -> str:
        """As ``collector/requests.py plan_ref``: the name, version and parameters off their default."""
        defaults = PLANS[self.plan][1]
        extra = "".join(f";{k}={'true' if v is True else 'false' if v is False else v}"
                        for k, v in sorted(self.params.items()) if v != defaults[k])
        return f"{self.plan}/v{self.plan_version}{extra}"


def parse_request(doc: Any, node: str) -> PullRequest:
    """A request from the collector, checked against what this agent runs, or :class:`RequestRefused`."""
    if not isinstance(doc, dict):
        raise RequestRefused("a request that is not an object")
    try:
        incident = check_part("incident", doc.get("incident"))
        if doc.get("node") != node:
            raise RequestRefused(f"a request for node {str(doc.get('node'))[:64]!r}, not this node")
        plan = doc.get("plan")
        if plan not in PLANS:
            raise RequestRefused(f"unknown capture plan {str(plan)[:40]!r}")
        version, defaults = PLANS[plan]
        if doc.get("plan_version") != version:
            raise RequestRefused(f"plan {plan} version {doc.get('plan_version')!r}; this agent runs {version}")
        params = dict(defaults)
        given = doc.get("params") or {}
        if not isinstance(given, dict) or set(given) - set(defaults):
            raise RequestRefused(f"plan {plan}: unknown parameters")
        for k, v in given.items():
            if type(v) is not type(defaults[k]):
                raise RequestRefused(f"plan {plan}: parameter {k} has the wrong type")
            params[k] = v
        created, expires = doc.get("created"), doc.get("expires")
        if type(created) is not int or type(expires) is not int:
            raise RequestRefused("created and expires must be Unix seconds")
        req = PullRequest(id=str(doc.get("id")), incident=incident, node=node, plan=plan, plan_version=version,
                          params=params, created=created, expires=expires,
                          alertname=str(doc.get("alertname") or "")[:200], source=str(doc.get("source") or "")[:32])
        if req.id != bundle_id(incident, node, req.plan_ref):
            raise RequestRefused("the request id is not the bundle id of its incident, node and plan")
        return req
    except KeyPartError as exc:
        raise RequestRefused(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Captured:
    path: str
    sha256: str


#: (agent, request, work directory) -> the bundle file, captured in a worker thread
CaptureFn = Callable[["Agent", PullRequest, str], Captured]


def capture_in_process(agent: Agent, req: PullRequest, work: str) -> Captured:
    """The request's plan as one of the daemon's captures (``Job``): one at a time with its other
    captures, under its firmware gate, with its events and flight recorder, in ``railscope_captures``."""
    from agent.capture.job import Job

    job = Job.for_request(req, agent.settings, redact_key=os.urandom(32) if req.params.get("redact") else None)
    res = agent.capture.run(job, work + "/")
    assert res.path is not None
    return Captured(res.path, res.sha256)


class RequestPuller:
    """Polls the collector for this node's requests and serves them one at a time."""

    def __init__(self, agent: Agent, url: str, *, token_file: str | None = None, cluster: str | None = None,
                 capture: CaptureFn = capture_in_process, work_dir: str | None = None,
                 wait_s: int = POLL_WAIT_S, rng: random.Random | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        node = agent.settings.node
        if not node:
            raise ValueError("--collector needs --node (spec.nodeName): requests are polled per node")
        self.agent = agent
        self.node = check_part("node", node)
        self.cluster = check_part("cluster", cluster or agent.settings.cluster or "default")
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.capture = capture
        self.work_dir = work_dir
        self.wait_s = wait_s
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._done: OrderedDict[str, str] = OrderedDict()
        self.reused = 0
        self.served = 0
        self.errors = 0
        self.busy = False

    def _headers(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        # Read on every request: a projected ServiceAccount token is rotated in place.
        return {"Authorization": f"Bearer {Path(self.token_file).read_text().strip()}"}

    async def run(self) -> None:
        backoff = BACKOFF_MIN_S
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.wait_s + 30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await self._poll_loop(session, backoff)

    async def _local_uploaded(self, timeout_s: float = 30.0) -> None:
        """Wait until the event captures have run and the daemon's spool upload has sent them."""
        loop = asyncio.get_running_loop()
        capture = getattr(self.agent, "capture", None)
        if capture is None or capture.spool is None:
            return
        await loop.run_in_executor(None, capture.idle, 120.0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and await loop.run_in_executor(None, capture.spool.entries):
            await asyncio.sleep(0.2)

    def _reusable(self, req: PullRequest) -> str | None:
        """The newest event capture of the request's cause stored within the capture cooldown."""
        code = ALERT_EVENTS.get(req.alertname)
        if code is None:
            return None
        for key in reversed(getattr(self.agent, "uploaded", ())):
            parts = key.split("/")
            # <cluster>/<date>/<incident: code-yyyymmddThhmmssZ>/<node>-<stamp>-<bundle id>.tar.gz
            if len(parts) != 4 or not parts[2].startswith(code.lower() + "-"):
                continue
            m = re.search(r"-(\d{8}t\d{6}z)$", parts[2])
            if m is None:
                continue
            when = calendar.timegm(time.strptime(m.group(1).upper(), "%Y%m%dT%H%M%SZ"))
            if time.time() - when <= self.agent.settings.capture_cooldown_s:
                return key
        return None

    async def _poll_loop(self, session: aiohttp.ClientSession, backoff: float) -> None:
        while True:
            try:
                for req in await self.poll(session):
                    await self.serve(session, req)
                backoff = BACKOFF_MIN_S
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop outlives any one failure (a capture, the collector)
                self.errors += 1
                log.warning("capture requests: %s: %s; polling again in %.0f s", type(exc).__name__, exc,
                            backoff)
            await self._sleep(backoff * (0.5 + self._rng.random()))
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def poll(self, session: aiohttp.ClientSession) -> list[PullRequest]:
        url = f"{self.url}/v1/requests?node={quote(self.node)}&wait={self.wait_s}"
        async with session.get(url, headers=self._headers()) as resp:
            if resp.status != 200:
                raise OSError(f"GET /v1/requests answered {resp.status}: {(await resp.text())[:200]}")
            doc = await resp.json(content_type=None)
        out = []
        now = time.time()
        for item in doc.get("requests", []) if isinstance(doc, dict) else []:
            try:
                req = parse_request(item, self.node)
            except RequestRefused as exc:
                log.warning("refusing a capture request: %s", exc)
                continue
            if req.expires <= now or req.id in self._done:
                continue
            out.append(req)
        return sorted(out, key=lambda r: r.created)

    async def serve(self, session: aiohttp.ClientSession, req: PullRequest) -> str | None:
        """Capture, upload and report one request; the stored key, or None when it must be tried again."""
        from agent.capture.job import Job
        from agent.capture.upload import UploadError, upload

        if req.alertname in ALERT_EVENTS:
            # The same cause may have captured locally a moment ago: let that capture finish and
            # reach the collector, then use it.
            await self._local_uploaded()
        local = self._reusable(req)
        if local is not None:
            done = await self._done_call(session, req, local, reused=True)
            self._remember(req.id, done)
            self.reused += 1
            log.info("capture request answered with the local capture", extra={"request": req.id, "bundle": done})
            return done
        work = tempfile.mkdtemp(prefix="railscope-request-", dir=self.work_dir)
        self.busy = True
        try:
            log.info("capturing for request", extra={"request": req.id, "incident": req.incident,
                                                     "alertname": req.alertname})
            captured = await asyncio.get_running_loop().run_in_executor(None, self.capture, self.agent, req, work)
            hello = Job.for_request(req, self.agent.settings).hello(
                node=self.node, cluster=self.cluster, reason=req.alertname or req.source or "requested")
            key: str | None
            try:
                res = await upload(self.url, hello, captured.path, token_file=self.token_file,
                                   expected_sha256=captured.sha256, session=session)
                key = res.key
            except UploadError as exc:
                if exc.status != 409:
                    raise OSError(f"upload of {req.id}: {exc}") from None
                # An earlier capture of this request was stored (this agent restarted before it
                # said done): the collector finds that bundle by its id.
                key = None
            done = await self._done_call(session, req, key)
            self._remember(req.id, done)
            self.served += 1
            log.info("capture request done", extra={"request": req.id, "bundle": done})
            return done
        finally:
            self.busy = False
            shutil.rmtree(work, ignore_errors=True)

    def _remember(self, rid: str, done: str) -> None:
        self._done[rid] = done
        while len(self._done) > _DONE_MEMORY:
            self._done.popitem(last=False)

    async def _done_call(self, session: aiohttp.ClientSession, req: PullRequest, key: str | None,
                         reused: bool = False) -> str:
        url = f"{self.url}/v1/requests/{quote(self.node)}/{quote(req.id)}/done"
        body: dict[str, Any] = {"bundle": key} if key else {}
        if reused:
            body["reused"] = True
        async with session.post(url, json=body, headers=self._headers()) as resp:
            doc = await resp.json(content_type=None)
            if resp.status != 200:
                raise OSError(f"done for {req.id} answered {resp.status}: {str(doc)[:200]}")
        return str(doc["request"]["bundle"])


def attach(app: web.Application, agent: Agent) -> RequestPuller | None:
    """Run the puller with ``app`` when the agent has a collector (``--collector URL``)."""
    url = agent.settings.collector_url
    if not url:
        return None
    if not agent.settings.node:
        log.warning("capture requests are not polled: --collector without --node (spec.nodeName)")
        return None
    puller = RequestPuller(agent, url, token_file=agent.settings.collector_token_file)

    run_with_app(app, puller.run, "railscope-request-puller")
    return puller


# -- the operator's side: railscope capture --node N --incident ID --collector URL [--wait] -------

class RequestFailed(Exception):
    """The collector refused or never finished a request; the message is one line for the operator."""


async def queue_request(url: str, node: str, incident: str, *, token: str | None, wait_s: float | None = None,
                        poll_s: float = 2.0, plan: str = "node-bundle",
                        params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Queue a capture of ``node`` for ``incident`` (operator role); with ``wait_s``, wait for its bundle.

    Returns the request as the collector last showed it (``state`` ``done`` and ``bundle`` when waited).
    """
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"node": node, "incident": incident, "plan": plan, "params": dict(params or {})}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(base + "/v1/requests", json=body, headers=headers) as resp:
            doc = await resp.json(content_type=None)
            if resp.status not in (200, 201):
                raise RequestFailed(f"the collector answered {resp.status}: {doc.get('message', doc)}")
        req = doc["request"]
        if wait_s is None:
            return req
        deadline = time.monotonic() + wait_s
        show = f"{base}/v1/requests/{quote(node)}/{quote(req['id'])}"
        while req.get("state") != "done":
            if time.monotonic() > deadline:
                raise RequestFailed(f"request {req['id']} not done after {wait_s:.0f} s (is the agent of "
                                    f"{node} running with --collector?)")
            await asyncio.sleep(poll_s)
            async with session.get(show, headers=headers) as resp:
                doc = await resp.json(content_type=None)
                if resp.status != 200:
                    raise RequestFailed(f"the collector answered {resp.status}: {doc.get('message', doc)}")
            req = doc["request"]
        return req
