"""The collector client against ``railscope collector`` as a process of its own, on the local store and on
SeaweedFS: every call of the API in the order an incident uses them, and the retry policy riding
through a collector that starts only after the first attempt failed."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy
from proto.frames import Hello
from proto.requests import CaptureRequest
from tests.support.collector_env import BUCKET, Collector, Weed, running_weed

from tests.support.collector_helpers import AGENT_TOKEN, OPERATOR_TOKEN, write_tokens  # isort: skip

pytestmark = [pytest.mark.slow]

NODE = "gpu-node-017"
DATA = os.urandom(3 << 20)  # more than one chunk frame and more than one S3 part


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def _token(tmp_path: Path, name: str, token: str) -> str:
    p = tmp_path / name
    p.write_text(token + "\n")
    p.chmod(0o600)
    return str(p)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_an_operators_request_goes_round_the_api(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    extra: dict = {}
    store = str(tmp_path / "store")
    if kind == "s3":
        extra["endpoint"] = request.getfixturevalue("weed").endpoint
        store = f"s3://{BUCKET}/railscope"
    col = Collector(tmp_path, store, cluster="lab", tokens=write_tokens(tmp_path / "tokens"), **extra).start()
    agent_tok, op_tok = _token(tmp_path, "agent", AGENT_TOKEN), _token(tmp_path, "operator", OPERATOR_TOKEN)
    bundle = tmp_path / "bundle.tar.gz"
    bundle.write_bytes(DATA)

    async def go() -> tuple:
        async with CollectorClient(col.url, token_file=op_tok) as op, \
                CollectorClient(col.url, token_file=agent_tok) as agent:
            queued = await op.queue(NODE, "inc-int", params={"redact": True})
            (polled,) = await agent.poll(NODE, 5)
            req = CaptureRequest.from_json(polled)
            hello = Hello(bundle=req.id, node=NODE, cluster="lab", incident=req.incident, reason="test",
                          agent="0.1.0", created=req.created, plan=req.plan_ref)
            stored = await agent.upload(hello, bundle, expected_sha256=hashlib.sha256(DATA).hexdigest())
            done = await agent.done(NODE, req.id, stored.key)
            shown = await op.wait_done(NODE, req.id, timeout_s=10)
            listed = await op.list(cluster="lab", incident="inc-int")
            path, sha = await op.get(stored.key, tmp_path / "out")
            verified = await op.verify(stored.key)
            return queued, req, stored, done, shown, listed, path, sha, verified

    try:
        queued, req, stored, done, shown, listed, path, sha, verified = asyncio.run(go())
    finally:
        col.stop()
    assert queued["id"] == req.id and req.plan_ref == "node-bundle/v1;redact=true"
    assert stored.status == "stored" and f"/inc-int/{NODE}-" in stored.key and stored.key.endswith(f"-{req.id}.tar.gz")
    assert done["state"] == "done" and done["bundle"] == stored.key and shown == done
    assert [b["key"] for b in listed["bundles"]] == [stored.key]
    assert path.read_bytes() == DATA and sha == hashlib.sha256(DATA).hexdigest() and verified["ok"] is True


def test_the_retry_policy_rides_through_a_collector_that_starts_late(tmp_path: Path) -> None:
    col = Collector(tmp_path, str(tmp_path / "store"), cluster="lab", tokens=write_tokens(tmp_path / "tokens"))
    bundle = tmp_path / "bundle.tar.gz"
    bundle.write_bytes(DATA)
    hello = Hello(bundle="b" + "1" * 24, node=NODE, cluster="lab", incident="inc-late", reason="test",
                  agent="0.1.0", created=1796117903, plan="")
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) == 1:
            await asyncio.to_thread(col.start)  # the collector comes up after the first failure

    async def go():  # type: ignore[no-untyped-def]
        async with CollectorClient(col.url, token_file=_token(tmp_path, "agent", AGENT_TOKEN), sleep=sleep,
                                   retry=RetryPolicy(attempts=3, base_s=0.1, cap_s=1.0)) as c:
            res = await c.upload(hello, bundle)
        async with CollectorClient(col.url, token="not-a-token", sleep=sleep) as c:
            with pytest.raises(CollectorError) as refused:
                await c.upload(hello, bundle)
        return res, refused.value

    try:
        res, refused = asyncio.run(go())
    finally:
        col.stop()
    assert res.status == "stored" and res.attempts == 2 and len(waits) == 1
    assert refused.status == 401 and len(waits) == 1  # a refusal is final: never sent again
