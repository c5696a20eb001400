"""The agent does not trust whatever answers as its collector.

``HostileCollector`` is a stand-in (not the collector): an aiohttp app on loopback that answers the
agent's requests the way a compromised or broken collector, or anything on the path, could — a new
capture request on every poll, requests the agent has already done, answers of hundreds of MB, a
``Retry-After`` of decades, uploads refused for good. The agent under test is the real request
puller (``agent.service.pull``) and the one collector client (``agent.clients.collector``), with the
clock and the sleep as arguments so no test waits for real time.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent.capture.job import Job
from agent.clients.collector import MAX_RETRY_AFTER_S, CollectorClient, CollectorError, RetryPolicy
from agent.config import AgentSettings
from agent.service import pull
from agent.service.pull import RequestPuller
from proto.frames import Hello
from proto.requests import request_for

NODE = "gpu-node-017"
CLUSTER = "prod-east"  # the agent's: it runs only its own cluster's requests
MiB = 1 << 20


class HostileCollector:
    """A stand-in answering as a collector would not (see the module's docstring)."""

    def __init__(self, *, poll: str = "new", upload: str = "ok", params: dict | None = None) -> None:
        self.poll_mode, self.upload_mode, self.params = poll, upload, params or {}
        self.polls = 0
        self.uploads = 0
        self.sent = 0
        self.enough = asyncio.Event()
        self.limit = 60
        self.same = request_for("inc-same", NODE, now=1796117903.0, ttl_s=1800, params=self.params, cluster=CLUSTER)

    async def _poll(self, request: web.Request) -> web.StreamResponse:
        self.polls += 1
        if self.polls >= self.limit:
            self.enough.set()
        if self.poll_mode == "huge":
            return await self._huge(request)
        if self.poll_mode == "nested":
            return web.Response(body=b'{"requests":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
                                content_type="application/json")
        if self.poll_mode == "expired":
            # Already expired by the agent's clock (a clock ahead of the collector's), still pending here.
            req = request_for(f"inc-{self.polls % 3}", NODE, now=1.0, ttl_s=60, params=self.params, cluster=CLUSTER)
        elif self.poll_mode == "same":
            req = self.same
        else:
            req = request_for(f"inc-{self.polls}", NODE, now=1796117903.0 + self.polls, ttl_s=1800,
                              params=self.params, cluster=CLUSTER)
        return web.json_response({"requests": [req.to_json()]})

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        block = b'{"requests":[' + b" " * (MiB - 13)
        try:
            for _ in range(300):
                await resp.write(block)
                self.sent += len(block)
                block = b" " * MiB
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        self.uploads += 1
        while await request.content.read(1 << 16):
            pass
        if self.upload_mode == "forbidden":
            return web.json_response({"error": "forbidden", "message": "not yours"}, status=403)
        if self.upload_mode == "retry-after":
            return web.json_response({"error": "busy", "message": "later"}, status=429,
                                     headers={"Retry-After": "999999999"})
        if self.upload_mode == "huge":
            return await self._huge(request)
        return web.json_response({"status": "stored", "key": f"c/2026-12-01/i/{NODE}-x.tar.gz", "bytes": 1,
                                  "sha256": "0" * 64})

    async def _done(self, request: web.Request) -> web.StreamResponse:
        if self.upload_mode == "huge-done":
            return await self._huge(request)
        rid = request.match_info["rid"]
        return web.json_response({"request": {"id": rid, "state": "done", "bundle": "c/k.tar.gz"}})

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/requests", self._poll)
        app.router.add_post("/v1/bundles", self._upload)
        app.router.add_post("/v1/requests/{node}/{rid}/done", self._done)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    async def __aexit__(self, *_exc: object) -> None:
        await self.runner.cleanup()


class Clock:
    """Fake time: ``sleep`` advances it instead of waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s
        await asyncio.sleep(0)


def _settings(**kw: Any) -> AgentSettings:
    return AgentSettings(listen="127.0.0.1", port=0, node=NODE, cluster=CLUSTER, **kw)


def _capture(seen: list) -> pull.RunFn:
    def capture(job: Job, work: str) -> pull.Captured:
        seen.append(job)
        path = Path(work) / "b.tar.gz"
        path.write_bytes(b"bundle")
        import hashlib

        return pull.Captured(str(path), hashlib.sha256(b"bundle").hexdigest())
    return capture


async def _run_puller(stand_in: HostileCollector, url: str, clock: Clock, seen: list, **settings: Any) -> RequestPuller:
    # The puller's inputs and nothing else: settings, a client, the run function.
    rng = random.Random(7)
    client = CollectorClient(url, rng=rng, sleep=clock.sleep)
    puller = RequestPuller(_settings(**settings), client, _capture(seen), own_client=True, wait_s=1,
                           sleep=clock.sleep, clock=clock, rng=rng)
    task = asyncio.create_task(puller.run())
    try:
        await asyncio.wait_for(stand_in.enough.wait(), 60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return puller


def test_a_new_request_on_every_poll_is_bounded_by_the_agents_own_limits() -> None:
    """A collector answering each poll with a new request got 377 captures in 75 s."""
    stand_in, clock, seen = HostileCollector(poll="new", params={"pod_netns": True}), Clock(), []

    async def go() -> RequestPuller:
        async with stand_in as url:
            return await _run_puller(stand_in, url, clock, seen)

    puller = asyncio.run(go())
    hours = (clock.now - 1000.0) / 3600
    assert len(seen) <= 6 * (hours + 1), (len(seen), hours)
    times = puller._captures
    assert all(b - a >= 300 for a, b in itertools.pairwise(times))
    # pod_netns asked by the request, not allowed by the agent: captured without.
    assert seen and all(job.pod_netns is False for job in seen)


def test_pod_netns_is_the_agents_own_opt_in() -> None:
    stand_in, clock, seen = HostileCollector(poll="new", params={"pod_netns": True}), Clock(), []
    stand_in.limit = 3

    async def go() -> None:
        async with stand_in as url:
            await _run_puller(stand_in, url, clock, seen, allow_pod_netns=True)

    asyncio.run(go())
    assert seen and seen[0].pod_netns is True


@pytest.mark.parametrize("mode", ["expired", "same"])
def test_a_poll_with_nothing_to_run_is_not_repeated_at_once(mode: str) -> None:
    """A clock ahead of the collector's made every pending request look expired: 55-61 % of a core."""
    stand_in, clock, seen = HostileCollector(poll=mode), Clock(), []

    async def go() -> RequestPuller:
        async with stand_in as url:
            return await _run_puller(stand_in, url, clock, seen, request_min_interval_s=0)

    asyncio.run(go())
    gaps = [s for s in clock.slept if s >= pull.POLL_GAP_S * 0.75]
    # every poll but the captures' is followed by a wait of about the poll gap
    assert len(gaps) >= stand_in.polls - len(seen) - 2, (mode, stand_in.polls, clock.slept[:10])
    if mode == "same":
        assert len(seen) == 1  # served once, then remembered


def test_a_request_refused_for_good_is_not_captured_again() -> None:
    stand_in, clock, seen = HostileCollector(poll="same", upload="forbidden"), Clock(), []
    stand_in.limit = 30

    async def go() -> None:
        async with stand_in as url:
            await _run_puller(stand_in, url, clock, seen, request_min_interval_s=0, request_budget=100)

    asyncio.run(go())
    assert len(seen) == 1 and stand_in.uploads == 1


@pytest.mark.parametrize("mode", ["huge", "nested"])
def test_a_poll_answer_is_read_with_a_cap(mode: str) -> None:
    stand_in = HostileCollector(poll=mode)

    async def go() -> CollectorError:
        async with stand_in as url, CollectorClient(url) as client:
            with pytest.raises(CollectorError) as err:
                await client.poll(NODE, 1)
            return err.value

    err = asyncio.run(go())
    assert err.code == "bad_answer"
    assert stand_in.sent < 64 * MiB  # it stopped reading: not 300 MB into memory


@pytest.mark.parametrize("mode", ["huge", "huge-done"])
def test_an_upload_or_done_answer_is_read_with_a_small_cap(tmp_path: Path, mode: str) -> None:
    stand_in = HostileCollector(upload=mode)
    f = tmp_path / "b.tar.gz"
    f.write_bytes(b"bundle")
    hello = Hello(bundle="b1", node=NODE, cluster="c", incident="i", reason="r", agent="t", created=1796117903,
                  plan="node-bundle/v1")

    async def go() -> None:
        async with stand_in as url, CollectorClient(url, retry=RetryPolicy(attempts=1)) as client:
            with pytest.raises(CollectorError):
                if mode == "huge":
                    await client.upload(hello, f)
                else:
                    await client.done(NODE, "b1", "c/k.tar.gz")

    asyncio.run(go())
    assert stand_in.sent < 32 * MiB, stand_in.sent


def test_retry_after_is_capped(tmp_path: Path) -> None:
    stand_in, clock = HostileCollector(upload="retry-after"), Clock()
    f = tmp_path / "b.tar.gz"
    f.write_bytes(b"bundle")
    hello = Hello(bundle="b1", node=NODE, cluster="c", incident="i", reason="r", agent="t", created=1796117903,
                  plan="node-bundle/v1")

    async def go() -> None:
        async with stand_in as url, CollectorClient(url, retry=RetryPolicy(attempts=3), sleep=clock.sleep) as c:
            with pytest.raises(CollectorError):
                await c.upload(hello, f)

    asyncio.run(go())
    assert len(clock.slept) == 2 and max(clock.slept) <= MAX_RETRY_AFTER_S * 1.5, clock.slept


def test_a_request_is_one_capture_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is captured and what is uploaded come from the same job: one ``Job.for_request`` per request
    (two were built before, one for the capture and one for the upload's hello)."""
    built: list[Job] = []
    real = Job.for_request.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Job], *a: Any, **kw: Any) -> Job:
        built.append(real(cls, *a, **kw))
        return built[-1]

    monkeypatch.setattr(Job, "for_request", classmethod(counted))
    stand_in, clock, seen = HostileCollector(poll="new"), Clock(), []
    stand_in.limit = 3

    async def go() -> RequestPuller:
        async with stand_in as url:
            return await _run_puller(stand_in, url, clock, seen, request_min_interval_s=0)

    puller = asyncio.run(go())
    # the job captured is the one built (the last may be built and not run yet when the poller stops)
    assert puller.served >= 1 and all(any(j is b for b in built) for j in seen)
    assert len(seen) <= len(built) <= len(seen) + 1, (len(built), len(seen))
