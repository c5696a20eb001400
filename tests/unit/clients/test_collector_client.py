"""The collector client against the real collector app (loopback port, local store): every call of the API.

Uploads are covered at length through the same client in ``tests/integration/test_collector_upload.py``;
here each call is shown working once, refused once, and the retry policy and the token file once.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from agent.capture.upload import drain_spool
from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy
from proto.keys import bundle_id
from proto.requests import CaptureRequest
from tests.support.collector_helpers import (
    AGENT_TOKEN,
    HELLO,
    OPERATOR_TOKEN,
    files,
    local_settings,
    running,
    spool_bundle,
)

NODE = "gpu-node-017"
DATA = os.urandom(200_000)


def _token(tmp_path: Path, token: str, name: str, mode: int = 0o600) -> str:
    p = tmp_path / name
    p.write_text(token + "\n")
    p.chmod(mode)
    return str(p)


def test_an_upload_is_stored_then_listed_fetched_and_verified(tmp_path: Path) -> None:
    src = tmp_path / "b.tar.gz"
    src.write_bytes(DATA)
    agent_tok = _token(tmp_path, AGENT_TOKEN, "agent")
    op_tok = _token(tmp_path, OPERATOR_TOKEN, "operator")

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token_file=agent_tok) as agent:
                first = await agent.upload(HELLO, src)
                again = await agent.upload(HELLO, str(src), expected_sha256=hashlib.sha256(DATA).hexdigest())
            async with CollectorClient(url, token_file=op_tok) as op:
                listed = await op.list(incident=HELLO.incident)
                none = await op.list(incident="inc-none")
                seen: list[int] = []
                path, sha = await op.get(first.key, tmp_path / "out", progress=lambda n, _t: seen.append(n))
                verified = await op.verify(first.key)
                with pytest.raises(CollectorError) as missing:
                    await op.get(first.key.replace(HELLO.bundle, "b9" + HELLO.bundle[2:]), tmp_path / "out")
            return first, again, listed, none, path, sha, seen, verified, missing.value

    first, again, listed, none, path, sha, seen, verified, missing = asyncio.run(go())
    digest = hashlib.sha256(DATA).hexdigest()
    assert (first.status, again.status, again.duplicate) == ("stored", "duplicate", True)
    assert [b["key"] for b in listed["bundles"]] == [first.key] and none["bundles"] == []
    assert path.read_bytes() == DATA and sha == digest and seen[-1] == len(DATA)
    assert (path.parent / (path.name + ".sha256")).read_text().split() == [digest, path.name]
    assert verified["ok"] is True and verified["sha256"] == digest
    assert missing.status == 404 and not missing.retryable
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [path.name, path.name + ".sha256"]


def test_a_download_that_does_not_hash_to_the_recorded_sha256_is_never_kept(tmp_path: Path) -> None:
    op_tok = _token(tmp_path, OPERATOR_TOKEN, "operator")

    async def go() -> CollectorError:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token=AGENT_TOKEN) as agent:
                res = await agent.upload(HELLO, [DATA])
            stored = tmp_path / "store" / res.key
            stored.write_bytes(b"x" + stored.read_bytes()[1:])  # the stored object rots in the bucket
            async with CollectorClient(url, token_file=op_tok) as op:
                with pytest.raises(CollectorError) as info:
                    await op.get(res.key, tmp_path / "out")
            return info.value

    err = asyncio.run(go())
    assert err.code == "digest_mismatch" and "is not the recorded" in str(err)
    assert list((tmp_path / "out").iterdir()) == []


def test_upload_while_producing_streams_what_the_producer_hands_over(tmp_path: Path) -> None:
    def produce(on_chunk) -> str:  # type: ignore[no-untyped-def]
        for off in range(0, len(DATA), 50_000):
            on_chunk(DATA[off:off + 50_000])
        return "produced"

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token=AGENT_TOKEN) as c:
                return await c.upload_while_producing(HELLO, produce)

    produced, res = asyncio.run(go())
    assert produced == "produced" and not isinstance(res, CollectorError) and res.status == "stored"
    stored = [f for f in files(tmp_path / "store") if f.endswith(".tar.gz")]
    assert len(stored) == 1 and (tmp_path / "store" / stored[0]).read_bytes() == DATA


def test_the_spool_is_drained_through_a_client(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool_bundle(spool, HELLO, DATA, 1.0)

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token_file=_token(tmp_path, AGENT_TOKEN, "agent")) as c:
                return await drain_spool(spool, c)

    res = asyncio.run(go())
    assert [r.status for r in res.sent] == ["stored"] and res.rejected == [] and res.left == 0
    assert not list(spool.glob("*.tar.gz"))


def test_a_request_is_queued_polled_done_and_shown(tmp_path: Path) -> None:
    agent_tok = _token(tmp_path, AGENT_TOKEN, "agent")
    op_tok = _token(tmp_path, OPERATOR_TOKEN, "operator")

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token_file=op_tok) as op, \
                    CollectorClient(url, token_file=agent_tok) as agent:
                queued = await op.queue(NODE, "inc-5", params={"pod_netns": True})
                again = await op.queue(NODE, "inc-5", params={"pod_netns": True})
                polled = await agent.poll(NODE, 0)
                with pytest.raises(CollectorError) as early:
                    await agent.done(NODE, queued["id"])  # nothing stored yet
                hello = HELLO.__class__(**{**HELLO.to_json(), "bundle": queued["id"], "incident": "inc-5",
                                           "plan": CaptureRequest.from_json(queued).plan_ref})
                stored = await agent.upload(hello, [DATA])
                done = await agent.done(NODE, queued["id"], stored.key)
                shown = await op.wait_done(NODE, queued["id"], timeout_s=5)
                with pytest.raises(CollectorError) as other_node:
                    await agent.poll("gpu-node-018", 0)
            return queued, again, polled, early.value, stored, done, shown, other_node.value

    queued, again, polled, early, stored, done, shown, other_node = asyncio.run(go())
    assert queued["id"] == bundle_id("inc-5", NODE, "node-bundle/v1;pod_netns=true") and again["id"] == queued["id"]
    assert [CaptureRequest.from_json(d).id for d in polled] == [queued["id"]]
    assert early.status == 409 and early.code == "not_stored" and not early.retryable
    assert done["state"] == "done" and done["bundle"] == stored.key and shown == done
    assert other_node.status == 403


def test_a_token_file_others_may_read_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    loose = _token(tmp_path, AGENT_TOKEN, "agent", mode=0o640)
    src = tmp_path / "b.tar.gz"
    src.write_bytes(DATA)

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, col):
            async with CollectorClient(url, token_file=loose, token_flag="--collector-token-file") as c:
                with pytest.raises(CollectorError) as up:
                    await c.upload(HELLO, src)
                with pytest.raises(CollectorError) as polled:
                    await c.poll(NODE, 0)
            return up.value, polled.value, col

    up, polled, _col = asyncio.run(go())
    for err in (up, polled):
        assert err.code == "token_file" and not err.retryable
        assert f"--collector-token-file {loose}: readable by its group (mode 0640)" in str(err)
        assert f"chmod 600 {loose}" in str(err)
    assert files(tmp_path / "store") == []


def test_the_retry_policy_backs_off_then_reports_and_a_refusal_is_final(tmp_path: Path) -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    async def go() -> tuple:
        async with CollectorClient("http://127.0.0.1:9", token=OPERATOR_TOKEN, sleep=sleep,
                                   call_retry=RetryPolicy(attempts=4, base_s=0.5, cap_s=5.0)) as c:
            with pytest.raises(CollectorError) as down:
                await c.list()
        calls = len(slept)
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token="not-a-token", sleep=sleep) as c:
                with pytest.raises(CollectorError) as refused:
                    await c.list()
        return down.value, calls, refused.value

    down, calls, refused = asyncio.run(go())
    assert down.retryable and "cannot reach http://127.0.0.1:9" in str(down)
    assert calls == 3 and all(0 <= s <= 5.0 for s in slept[:3])  # four attempts, three waits
    assert refused.status == 401 and not refused.retryable and len(slept) == calls  # never retried


def test_a_long_listing_is_read_whole_whatever_pieces_it_arrives_in(tmp_path: Path) -> None:
    """Hundreds of stored bundles make an answer of several TCP reads: every one is in the listing."""
    from proto.keys import sha256_line

    day = tmp_path / "store" / "lab" / "2026-12-01" / "inc-many"
    day.mkdir(parents=True)
    for i in range(800):
        name = f"{NODE}-20261201T093823Z-b{i:024d}.tar.gz"
        (day / name).write_bytes(b"x")
        (day / (name + ".sha256")).write_text(sha256_line(hashlib.sha256(b"x").hexdigest(), name))

    async def go() -> dict:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token=OPERATOR_TOKEN) as op:
                return await op.list(incident="inc-many")

    listed = asyncio.run(go())
    assert len(listed["bundles"]) == 800


def test_a_key_that_is_not_a_bundle_key_is_refused_before_any_request(tmp_path: Path) -> None:
    """The key's last part becomes a file name: it is checked as the collector checks it."""
    async def go() -> list[CollectorError]:
        out = []
        # nothing listens there: a request would be "unreachable", not "bad_key"
        async with CollectorClient("http://127.0.0.1:9", token=OPERATOR_TOKEN) as op:
            for key in ("lab/2026-12-01/inc/..", "../../etc/passwd", "lab/2026-12-01/inc-1/x.tar.gz",
                        "lab/2026-12-01/inc-1/n1-20261201T000000Z-b1.tar.gz/../.."):
                with pytest.raises(CollectorError) as info:
                    await op.get(key, tmp_path / "out")
                out.append(info.value)
            with pytest.raises(CollectorError) as ver:
                await op.verify("lab/../x")
            out.append(ver.value)
        return out

    errors = asyncio.run(go())
    assert [e.code for e in errors] == ["bad_key"] * 5
    assert not (tmp_path / "out").exists()


def test_an_answer_that_is_not_the_collectors_is_an_error_not_a_crash() -> None:
    """A stand-in server (not the collector: the real one never answers so) sends JSON nested past
    the recursion limit, a list, and a body over the cap: each is one CollectorError."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from agent.clients import collector as client_mod

    async def nested(_r: web.Request) -> web.Response:
        return web.Response(body=b"[" * 100_000, content_type="application/json")

    async def refused_nested(_r: web.Request) -> web.Response:
        return web.Response(status=400, body=b"[" * 60_000, content_type="application/json")

    async def a_list(_r: web.Request) -> web.Response:
        return web.json_response([1, 2])

    async def huge(_r: web.Request) -> web.StreamResponse:
        return web.Response(body=b" " * (client_mod.MAX_POLL_BYTES + 10), content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/bundles", nested)
    app.router.add_post("/v1/bundles/lab/2026-12-01/inc-1/n1-20261201T000000Z-b1.tar.gz/verify", refused_nested)
    app.router.add_get("/v1/requests/n1/b1", a_list)
    app.router.add_get("/v1/requests", huge)

    async def go() -> list[CollectorError]:
        server = TestServer(app)
        await server.start_server()
        out = []
        try:
            async with CollectorClient(str(server.make_url("/")), token=OPERATOR_TOKEN) as c:
                for call in (c.list(), c.verify("lab/2026-12-01/inc-1/n1-20261201T000000Z-b1.tar.gz"),
                             c.show("n1", "b1"), c.poll("n1", 0)):
                    with pytest.raises(CollectorError) as info:
                        await call
                    out.append(info.value)
        finally:
            await server.close()
        return out

    errors = asyncio.run(go())
    assert [e.code for e in errors] == ["bad_answer"] * 4
    assert errors[1].status == 400 and not errors[1].retryable


@pytest.mark.parametrize(("name", "answer", "why"), [
    ("4 MiB of empty objects", b'{"requests": [' + b"{}," * 1_398_000 + b"{}]}", "larger than"),
    ("nine requests", b'{"requests": [' + b",".join([b"{}"] * 9) + b"]}", "more than a collector serves"),
])
def test_a_poll_answer_with_more_requests_than_a_collector_serves_is_refused_whole(name: str, answer: bytes,
                                                                                   why: str) -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from proto.requests import MAX_SERVED_PER_POLL

    async def poll(_r: web.Request) -> web.Response:
        return web.Response(body=answer, content_type="application/json")

    async def one(_r: web.Request) -> web.Response:
        return web.json_response({"requests": [{}] * MAX_SERVED_PER_POLL})

    app = web.Application()
    app.router.add_get("/v1/requests", poll)
    app.router.add_get("/v2/v1/requests", one)

    async def go() -> tuple[object, int]:
        server = TestServer(app)
        await server.start_server()
        try:
            async with CollectorClient(str(server.make_url("/")), token=AGENT_TOKEN) as c:
                try:
                    got: object = await c.poll("n1", 0)
                except CollectorError as exc:
                    got = exc
            async with CollectorClient(str(server.make_url("/v2")), token=AGENT_TOKEN) as c:
                served = len(await c.poll("n1", 0))
        finally:
            await server.close()
        return got, served

    got, served = asyncio.run(go())
    assert isinstance(got, CollectorError), f"{name}: the poll returned {len(got)} items"  # type: ignore[arg-type]
    assert got.code == "bad_answer" and why in str(got), got
    assert served == MAX_SERVED_PER_POLL


def test_a_person_s_client_ends_at_once_on_a_refused_port_where_the_agent_s_retries(tmp_path: Path) -> None:
    """``fail_fast`` (the CLI's): a refused connection is final at once, with what to check; the agent's
    client (no fail_fast) keeps retrying it, a collector that restarts refuses for a while."""
    from tests.support.collector_env import free_port

    slept: list[float] = []
    said: list[str] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    url = f"http://127.0.0.1:{free_port()}"

    async def go() -> CollectorError:
        async with CollectorClient(url, token=OPERATOR_TOKEN, sleep=sleep, fail_fast=True, deadline_s=30,
                                   on_retry=said.append) as c:
            with pytest.raises(CollectorError) as down:
                await c.list()
        return down.value

    err = asyncio.run(go())
    assert not err.retryable and slept == [] and said == []
    assert "is the collector running, and the port right?" in str(err)
