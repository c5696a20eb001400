"""The agent's side of capture requests (docs/design.md §9): pull them from the collector, capture, upload.

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
import collections
import logging
import os
import random
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agent.capture.job import Job, event_incident_time
from agent.capture.spool import Spool
from agent.capture.upload import drain_spool
from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy
from agent.config import AgentSettings
from agent.findings import EVENT_CODES
from agent.service.background import run_with_app
from proto.keys import KeyPartError, check_part, parse_rel
from proto.requests import DEFAULT_CLUSTER, DEFAULT_PLAN, POLL_WAIT_S, CaptureRequest, RequestError

if TYPE_CHECKING:
    from agent.service.daemon import Agent

__all__ = ["ALERT_EVENTS", "Captured", "RequestPuller", "RunFn", "SpoolUploader", "attach", "parse_request"]

log = logging.getLogger("railscope.agent.pull")

#: alert -> the detector event of the same cause, whose local capture (``--capture-on``) a request
#: for that alert reuses within the capture cooldown instead of capturing again. Every event code has
#: its alert of the same name (deploy/prometheus/railscope-rules.yaml), so the map follows the codes.
ALERT_EVENTS: dict[str, str] = {f"Railscope{code}": code for code in EVENT_CODES}
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
#: Least time between two polls that gave nothing to run: a collector that answers at once (requests
#: this agent will not run, a clock ahead of the collector's) is not polled in a loop.
POLL_GAP_S = 10.0
#: ids whose upload was refused for good, kept so they are not captured again
_REFUSED_MEMORY = 256
#: ids this agent finished recently: a replica's view of the store may lag one listing behind
_DONE_MEMORY = 256
#: keys of the spool's bundles the collector stored, kept for the requests that reuse them
_UPLOADED_MEMORY = 64


def parse_request(doc: Any, node: str, cluster: str | None = None) -> CaptureRequest:
    """A request from the collector, checked by the contract and against this node and cluster (a
    request naming another cluster is another machine's of the same name), or :class:`RequestError`."""
    req = CaptureRequest.from_json(doc)
    if req.node != node:
        raise RequestError(f"a request for node {req.node!r}, not this node", "node")
    if cluster is not None and req.cluster and req.cluster != cluster:
        raise RequestError(f"a request for node {req.node} of cluster {req.cluster!r}, not this node's "
                           f"cluster {cluster!r} (--cluster)", "node")
    return req


@dataclass(frozen=True, slots=True)
class Captured:
    path: str
    sha256: str


#: (the request's capture job, a work directory) -> the bundle file; blocking, run in a worker thread
RunFn = Callable[[Job, str], Captured]


class SpoolUploader:
    """Empties the node spool into the collector, oldest first, every upload interval (and at once
    when a capture was spooled: the spool's listing changes). The keys it stored are ``uploaded``,
    newest last: a request for the same cause reuses them (:class:`RequestPuller`)."""

    def __init__(self, spool: Spool, client: CollectorClient, *, interval_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.spool = spool
        self.client = client
        self.interval_s = interval_s
        self.clock = clock
        self.uploaded: collections.deque[str] = collections.deque(maxlen=_UPLOADED_MEMORY)
        #: what became of spooled bundles (railscope_spool_uploads_total)
        self.outcomes: collections.Counter[str] = collections.Counter()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        seen: tuple[str, ...] = ()
        last = -1e9
        while True:
            names = tuple(e.name for e in await loop.run_in_executor(None, self.spool.entries))
            if names and (names != seen or self.clock() - last >= self.interval_s):
                last = self.clock()
                try:
                    await self.drain()
                except Exception:  # the uploader must never take the agent down
                    log.exception("spool upload failed")
                names = tuple(e.name for e in await loop.run_in_executor(None, self.spool.entries))
            seen = names
            await asyncio.sleep(1.0)

    async def drain(self) -> None:
        # Few attempts: the spool keeps what is not sent, and the next round sends it.
        res = await drain_spool(self.spool, self.client, retry=RetryPolicy(attempts=3))
        self.uploaded.extend(r.key for r in res.sent)
        for r in res.sent:
            self.outcomes["duplicate" if r.duplicate else "stored"] += 1
        self.outcomes["rejected"] += len(res.rejected)
        if res.left:
            # kept for the next round: the collector is away, or the token file must be fixed
            self.outcomes["deferred"] += 1
        if res.sent or res.rejected or res.left:
            log.info("spool upload", extra={"sent": len(res.sent), "rejected": len(res.rejected),
                                            "left": res.left, "error": res.error})


class RequestPuller:
    """Polls the collector for this node's requests and serves them one at a time.

    What it is given, and no more: the settings its bounds and jobs come from, the collector's client,
    ``run`` (a request's capture job into a work directory: the daemon's captures), and for the reuse of
    an event capture, the spool, the keys the spool upload stored and ``idle`` (wait until no event
    capture is queued or running).
    """

    def __init__(self, settings: AgentSettings, client: CollectorClient, run: RunFn, *,
                 spool: Spool | None = None, uploaded: Sequence[str] = (),
                 idle: Callable[[float], object] | None = None, own_client: bool = False,
                 work_dir: str | None = None, wait_s: int = POLL_WAIT_S, rng: random.Random | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not settings.node:
            raise ValueError("--collector needs --node (spec.nodeName): requests are polled per node")
        self.settings = settings
        self.node = check_part("node", settings.node)
        self.cluster = check_part("cluster", settings.cluster or "default")
        # Polls, uploads and done calls go through one client: the daemon's (shared with its spool
        # upload, closed by the daemon), or one the puller owns and closes.
        self.client = client
        self._own_client = own_client
        self.run_job = run
        self.spool = spool
        self.uploaded = uploaded
        self._idle = idle
        self.work_dir = work_dir
        self.wait_s = wait_s
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._done: OrderedDict[str, str] = OrderedDict()
        self._refused: OrderedDict[str, str] = OrderedDict()
        self._clock = clock
        # The agent's own bounds on what requests make it do, whoever wrote them (a collector, or
        # anyone who can write the bucket's _requests/): a least interval between two request
        # captures and a budget per hour; entering pod namespaces only with the agent's own opt-in.
        self.min_interval_s = float(settings.request_min_interval_s)
        self.budget_per_hour = int(settings.request_budget)
        self.allow_pod_netns = bool(settings.allow_pod_netns)
        self._captures: list[float] = []  # clock times of this hour's request captures
        self.deferred = 0
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
        if self.spool is None:
            return
        if self._idle is not None:
            await loop.run_in_executor(None, self._idle, 120.0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and await loop.run_in_executor(None, self.spool.entries):
            await asyncio.sleep(0.2)

    def _reusable(self, req: CaptureRequest) -> str | None:
        """The newest event capture of the request's cause stored within the capture cooldown."""
        code = ALERT_EVENTS.get(req.alertname)
        if code is None:
            return None
        for rel in reversed(self.uploaded):
            try:
                key = parse_rel(rel)
            except KeyPartError:
                continue
            when = event_incident_time(key.incident, code)
            if when is not None and time.time() - when <= self.settings.capture_cooldown_s:
                return rel
        return None

    async def _poll_loop(self, backoff: float) -> None:
        while True:
            try:
                started = self._clock()
                served = 0
                for req in await self.poll():
                    if await self.serve(req) is not None:
                        served += 1
                backoff = BACKOFF_MIN_S
                if served == 0 and self._clock() - started < POLL_GAP_S:
                    # Answered at once with nothing this agent runs: wait, or it polls in a tight loop.
                    await self._sleep(POLL_GAP_S * (0.75 + 0.5 * self._rng.random()))
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop outlives any one failure (a capture, the collector)
                self.errors += 1
                log.warning("capture requests: %s: %s; polling again in %.0f s", type(exc).__name__, exc,
                            backoff)
            await self._sleep(backoff * (0.5 + self._rng.random()))
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def poll(self) -> list[CaptureRequest]:
        out = []
        docs = await self.client.poll(self.node, self.wait_s)
        for item in docs:
            try:
                req = parse_request(item, self.node, self.settings.cluster or DEFAULT_CLUSTER)
            except RequestError as exc:
                log.warning("refusing a capture request: %s", exc)
                continue
            # Expiry is the collector's to judge (it serves only pending requests): this node's clock
            # may be ahead of it.
            if req.id in self._done or req.id in self._refused:
                continue
            out.append(req)
        return sorted(out, key=lambda r: r.created)

    async def serve(self, req: CaptureRequest) -> str | None:
        """Capture, upload and report one request; the stored key, or None when it must be tried again."""
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
        now = self._clock()
        self._captures = [t for t in self._captures if now - t < 3600.0]
        if self._captures and now - self._captures[-1] < self.min_interval_s:
            self.deferred += 1
            log.info("capture request deferred: the last request capture was %.0f s ago (least interval %.0f s)",
                     now - self._captures[-1], self.min_interval_s, extra={"request": req.id})
            return None
        if len(self._captures) >= self.budget_per_hour:
            self.deferred += 1
            log.warning("capture request deferred: %d request captures in the last hour (budget %d)",
                        len(self._captures), self.budget_per_hour, extra={"request": req.id})
            return None
        if req.params.get("pod_netns") and not self.allow_pod_netns:
            log.warning("capture request asks to enter pod network namespaces; this agent does not "
                        "(--allow-pod-netns): captured without them", extra={"request": req.id})
            req = replace(req, params={**req.params, "pod_netns": False})
        self._captures.append(now)
        # The request's one capture job: what is captured and what is uploaded come from it.
        job = Job.for_request(req, self.settings, redact_key=os.urandom(32) if req.params.get("redact") else None)
        work = tempfile.mkdtemp(prefix="railscope-request-", dir=self.work_dir)
        self.busy = True
        try:
            log.info("capturing for request", extra={"request": req.id, "incident": req.incident,
                                                     "alertname": req.alertname})
            captured = await asyncio.get_running_loop().run_in_executor(None, self.run_job, job, work)
            hello = job.hello(node=self.node, cluster=self.cluster, reason=req.alertname or req.source or "requested")
            key: str | None
            try:
                res = await self.client.upload(hello, captured.path, expected_sha256=captured.sha256)
                key = res.key
            except CollectorError as exc:
                if exc.status != 409:
                    if not exc.retryable:
                        # Refused for good (a 4xx): capturing it again would be refused again.
                        self._refused[req.id] = str(exc)[:200]
                        while len(self._refused) > _REFUSED_MEMORY:
                            self._refused.popitem(last=False)
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

    async def _done_call(self, req: CaptureRequest, key: str | None, reused: bool = False) -> str:
        try:
            done = await self.client.done(self.node, req.id, key, reused=reused)
        except CollectorError as exc:
            raise OSError(f"done for {req.id}: {exc}") from None
        return str(done.get("bundle"))


def attach(app: web.Application, agent: Agent) -> RequestPuller | None:
    """Run the puller with ``app`` when the agent has a collector (``--collector URL``)."""
    if not agent.settings.collector_url:
        return None
    if not agent.settings.node:
        log.warning("capture requests are not polled: --collector without --node (spec.nodeName)")
        return None
    puller = agent.request_puller()
    run_with_app(app, puller.run, "railscope-request-puller")
    return puller


# -- the operator's side: railscope capture --node N --incident ID --collector URL [--wait] -------

class RequestFailed(Exception):
    """The collector refused or never finished a request; the message is one line for the operator."""


async def queue_request(url: str, node: str, incident: str, *, token_file: str | None = None,
                        wait_s: float | None = None, poll_s: float = 2.0, plan: str = DEFAULT_PLAN,
                        params: Mapping[str, Any] | None = None,
                        client: CollectorClient | None = None, cluster: str | None = None) -> dict[str, Any]:
    """Queue a capture of ``node`` for ``incident`` (operator role); with ``wait_s``, wait for its bundle.
    ``client``: the one to use (the CLI's: its CA, its deadline), else one for ``url`` and ``token_file``.

    Returns the request as the collector last showed it (``state`` ``done`` and ``bundle`` when waited).
    """
    try:
        async with client or CollectorClient(url, token_file=token_file, token_flag="--token-file") as client:
            req = await client.queue(node, incident, plan=plan, params=params, cluster=cluster)
            if wait_s is None:
                return req
            return await client.wait_done(node, str(req.get("id")), wait_s, poll_s, cluster=cluster)
    except CollectorError as exc:
        raise RequestFailed(str(exc)) from None
