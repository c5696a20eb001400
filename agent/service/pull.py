"""The agent's side of capture requests (DESIGN §9): pull them from the collector, capture, upload.

Nothing connects into the privileged pod: the agent long-polls ``GET /v1/requests?node=<own node>``
on the collector (answered within a minute), and for each pending request captures this node in
process — one capture at a time, through the capture runner — streams the bundle to
``POST /v1/bundles`` with the request's incident, and reports ``…/done`` with the stored key.

Nothing about a request is kept on the node. An agent killed mid-capture polls again after its
restart and finds the request still pending; the bundle id is the request's id (a function of
incident, node and plan) and the bundle's time is the request's, so the capture it makes then is
the same object to the collector: stored once, never twice. A request names a plan the agent ships
(``proto.requests.PLANS``); anything else is refused here too, whatever the collector said.
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
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agent.clients.collector import CollectorClient, CollectorError
from agent.findings import EVENT_CODES
from agent.service.background import run_with_app
from proto.keys import check_part
from proto.requests import DEFAULT_PLAN, POLL_WAIT_S, CaptureRequest, RequestError

if TYPE_CHECKING:
    from agent.service.daemon import Agent

__all__ = ["ALERT_EVENTS", "Captured", "PullRequest", "RequestPuller", "RequestRefused", "attach", "parse_request"]

log = logging.getLogger("railscope.agent.pull")

#: alert -> the detector event of the same cause, whose local capture (``--capture-on``) a request
#: for that alert reuses within the capture cooldown instead of capturing again. Every event code has
#: its alert of the same name (deploy/prometheus/railscope-rules.yaml), so the map follows the codes.
ALERT_EVENTS: dict[str, str] = {f"Railscope{code}": code for code in EVENT_CODES}
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
#: ids this agent finished recently: a replica's view of the store may lag one listing behind
_DONE_MEMORY = 256

#: The request as the capture path takes it: the one type of ``proto.requests``.
PullRequest = CaptureRequest
#: A request this agent will not run (a plan it does not ship, another node's, a bad id).
RequestRefused = RequestError


def parse_request(doc: Any, node: str) -> CaptureRequest:
    """A request from the collector, checked by the contract and against this node, or :class:`RequestError`."""
    req = CaptureRequest.from_json(doc)
    if req.node != node:
        raise RequestError(f"a request for node {req.node!r}, not this node", "node")
    return req


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
                 client: CollectorClient | None = None,
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
        # Polls, uploads and done calls go through one client: the daemon's (given, shared with its spool
        # upload, closed by the daemon) or one of the puller's own.
        self._own_client = client is None
        self.client = client or CollectorClient(self.url, token_file=token_file, token_flag="--collector-token-file",
                                                rng=rng, sleep=sleep,
                                                outcomes=getattr(agent, "collector_outcomes", None))
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

    async def run(self) -> None:
        try:
            await self._poll_loop(BACKOFF_MIN_S)
        finally:
            if self._own_client:
                await self.client.close()

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

    async def _poll_loop(self, backoff: float) -> None:
        while True:
            try:
                for req in await self.poll():
                    await self.serve(req)
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

    async def poll(self) -> list[PullRequest]:
        out = []
        docs = await self.client.poll(self.node, self.wait_s)
        now = time.time()
        for item in docs:
            try:
                req = parse_request(item, self.node)
            except RequestError as exc:
                log.warning("refusing a capture request: %s", exc)
                continue
            if req.expires <= now or req.id in self._done:
                continue
            out.append(req)
        return sorted(out, key=lambda r: r.created)

    async def serve(self, req: PullRequest) -> str | None:
        """Capture, upload and report one request; the stored key, or None when it must be tried again."""
        from agent.capture.job import Job

        if req.alertname in ALERT_EVENTS:
            # The same cause may have captured locally a moment ago: let that capture finish and
            # reach the collector, then use it.
            await self._local_uploaded()
        local = self._reusable(req)
        if local is not None:
            done = await self._done_call(req, local, reused=True)
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
                res = await self.client.upload(hello, captured.path, expected_sha256=captured.sha256)
                key = res.key
            except CollectorError as exc:
                if exc.status != 409:
                    raise OSError(f"upload of {req.id}: {exc}") from None
                # An earlier capture of this request was stored (this agent restarted before it
                # said done): the collector finds that bundle by its id.
                key = None
            done = await self._done_call(req, key)
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

    async def _done_call(self, req: PullRequest, key: str | None, reused: bool = False) -> str:
        try:
            done = await self.client.done(self.node, req.id, key, reused=reused)
        except CollectorError as exc:
            raise OSError(f"done for {req.id}: {exc}") from None
        return str(done.get("bundle"))


def attach(app: web.Application, agent: Agent) -> RequestPuller | None:
    """Run the puller with ``app`` when the agent has a collector (``--collector URL``)."""
    url = agent.settings.collector_url
    if not url:
        return None
    if not agent.settings.node:
        log.warning("capture requests are not polled: --collector without --node (spec.nodeName)")
        return None
    puller = RequestPuller(agent, url, token_file=agent.settings.collector_token_file, client=agent.collector)

    run_with_app(app, puller.run, "railscope-request-puller")
    return puller


# -- the operator's side: railscope capture --node N --incident ID --collector URL [--wait] -------

class RequestFailed(Exception):
    """The collector refused or never finished a request; the message is one line for the operator."""


async def queue_request(url: str, node: str, incident: str, *, token_file: str | None = None,
                        wait_s: float | None = None, poll_s: float = 2.0, plan: str = DEFAULT_PLAN,
                        params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Queue a capture of ``node`` for ``incident`` (operator role); with ``wait_s``, wait for its bundle.

    Returns the request as the collector last showed it (``state`` ``done`` and ``bundle`` when waited).
    """
    try:
        async with CollectorClient(url, token_file=token_file, token_flag="--token-file") as client:
            req = await client.queue(node, incident, plan=plan, params=params)
            if wait_s is None:
                return req
            return await client.wait_done(node, str(req.get("id")), wait_s, poll_s)
    except CollectorError as exc:
        raise RequestFailed(str(exc)) from None
