"""The agent's uploader and spool drain against a real collector: retries, Retry-After, exactly once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.capture import upload as spool_upload
from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy, frame_stream
from proto.frames import Hello
from proto.keys import bundle_id
from tests.support.collector_env import ROOT

from tests.support.collector_helpers import (  # isort: skip
    AGENT_TOKEN, AGENT_TOKEN_18, HELLO, body, files, local_settings, post, run, running, spool_bundle,
)

DATA = os.urandom(2_500_000)  # three chunk frames
FAST = RetryPolicy(attempts=5, base_s=0.01, cap_s=0.05)
_CLIENT_KEYS = ("token", "token_file", "retry", "session", "rng", "timeout")


async def upload(url: str, hello: Hello, source: object, **kw: object) -> object:
    """One upload through a client of its own: the client's keywords, the rest the call's."""
    own = {k: kw.pop(k) for k in _CLIENT_KEYS if k in kw}
    async with CollectorClient(url, **own) as client:  # type: ignore[arg-type]
        return await client.upload(hello, source, **kw)  # type: ignore[arg-type]


async def drain_spool(spool: object, url: str, **kw: object) -> spool_upload.DrainResult:
    """The spool drained through a client of its own (its ``retry`` the drain's)."""
    retry = kw.pop("retry", None)
    async with CollectorClient(url, **kw) as client:  # type: ignore[arg-type]
        return await spool_upload.drain_spool(spool, client, retry=retry)  # type: ignore[arg-type]


def test_the_uploader_encodes_the_golden_vector() -> None:
    vectors = {v["name"]: v for v in json.loads((ROOT / "proto/vectors/v1.json").read_text())["vectors"]}
    vec = vectors["small_bundle"]
    hello = Hello.from_json(vec["frames"][0])
    data = bytes.fromhex(vec["frames"][1]["data_hex"])
    assert b"".join(frame_stream(hello, [data])).hex() == vec["hex"]
    # chunk boundaries of the source do not show on the wire beyond the frame bound
    assert b"".join(frame_stream(hello, [data[:3], data[3:]])) != bytes.fromhex(vec["hex"])
    two = vectors["two_chunks"]
    h0 = Hello.from_json(two["frames"][0])
    payload = b"".join(bytes.fromhex(f["data_hex"]) for f in two["frames"][1:3])
    assert b"".join(frame_stream(h0, [payload[:256], payload[256:]])).hex() == two["hex"]


def test_upload_from_a_file_then_again_is_a_duplicate(tmp_path: Path) -> None:
    f = tmp_path / "b.tar.gz"
    f.write_bytes(DATA)
    seen: list[int] = []

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            a = await upload(url, HELLO, f, token=AGENT_TOKEN, progress=lambda n, _t: seen.append(n))
            b = await upload(url, HELLO, str(f), token=AGENT_TOKEN)
            return a, b

    a, b = run(go())
    assert a.status == "stored" and not a.duplicate and a.sha256 == hashlib.sha256(DATA).hexdigest()
    assert b.duplicate and b.key == a.key
    assert seen[-1] == len(DATA) and seen == sorted(seen)


def test_upload_streams_an_iterator_of_chunks(tmp_path: Path) -> None:
    pieces = [DATA[:10], DATA[10:1_500_000], DATA[1_500_000:]]  # one piece above the frame bound

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            return await upload(url, HELLO, iter(pieces), token=AGENT_TOKEN)

    res = run(go())
    assert res.bytes == len(DATA)
    stored = [p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]
    assert (tmp_path / "store" / stored[0]).read_bytes() == DATA


def test_429_is_retried_after_retry_after(tmp_path: Path) -> None:
    async def slow():  # type: ignore[no-untyped-def]
        raw = body(replace(HELLO, bundle="bslow"), DATA)
        yield raw[:1000]
        await asyncio.sleep(0.6)
        yield raw[1000:]

    f = tmp_path / "b.tar.gz"
    f.write_bytes(DATA)

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path, max_inflight=1, retry_after_s=1)) as (url, col):
            holder = asyncio.create_task(post(url, slow()))
            while col.in_flight == 0:
                await asyncio.sleep(0.01)
            t0 = time.monotonic()
            res = await upload(url, HELLO, f, token=AGENT_TOKEN, retry=FAST, rng=random.Random(1))
            waited = time.monotonic() - t0
            await holder
            return res, waited

    res, waited = run(go())
    assert res.status == "stored" and res.attempts == 2
    assert waited >= 1.0  # the backoff alone (<= 0.05 s) would not have waited this long


def test_a_final_refusal_is_not_retried(tmp_path: Path) -> None:
    f = tmp_path / "b.tar.gz"
    f.write_bytes(DATA)

    async def go() -> CollectorError:
        async with running(local_settings(tmp_path)) as (url, _col):
            with pytest.raises(CollectorError) as info:
                await upload(url, HELLO, f, token=AGENT_TOKEN_18, retry=FAST)
            return info.value

    err = run(go())
    assert (err.status, err.code, err.retryable) == (403, "forbidden", False)


def test_an_unreachable_collector_is_retried_then_reported(tmp_path: Path) -> None:
    f = tmp_path / "b.tar.gz"
    f.write_bytes(DATA)
    calls = []

    async def go() -> CollectorError:
        with pytest.raises(CollectorError) as info:
            await upload("http://127.0.0.1:9", HELLO, f, token=AGENT_TOKEN,
                         retry=RetryPolicy(attempts=3, base_s=0.01, cap_s=0.01),
                         progress=lambda n, t: calls.append(n))
        return info.value

    err = run(go())
    assert err.retryable and err.status is None and "unreachable" in str(err)


def _spool(spool: Path, hello: Hello, data: bytes, mtime: float, sha: str | None = None) -> Path:
    return spool_bundle(spool, hello, data, mtime, sha)


def _hello(n: int) -> Hello:
    return replace(HELLO, bundle=bundle_id("inc-1", "gpu-node-017", f"replay/v{n}"), plan=f"replay/v{n}")


def test_drain_sends_oldest_first_sets_aside_the_bad_and_keeps_the_unfinished(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    now = time.time()
    _spool(spool, _hello(1), DATA, now - 300)
    _spool(spool, _hello(2), DATA[::-1], now - 200)
    corrupt = _spool(spool, _hello(3), DATA, now - 100, sha="0" * 64)  # bytes no longer match
    unfinished = _spool(spool, _hello(4), DATA[:1000], now - 50)
    (spool / unfinished.name.replace(".tar.gz", ".json")).unlink()  # no sidecar yet: still being written

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            return await drain_spool(spool, url, token=AGENT_TOKEN, retry=FAST)

    res = run(go())
    assert [r.key.split("-")[-1] for r in res.sent] == [f"{_hello(1).bundle}.tar.gz", f"{_hello(2).bundle}.tar.gz"]
    assert res.rejected == [corrupt.name] and res.left == 0
    # the unfinished one: a capture killed before its sidecar; the spool clears it, never sends it
    assert sorted(p.name for p in spool.iterdir() if p.is_file()) == []
    assert (spool / "rejected" / corrupt.name).exists()
    assert "sha256" in (spool / "rejected" / (corrupt.name + ".why")).read_text()
    stored = [p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]
    assert len(stored) == 2  # the corrupt one never became visible


def test_a_conflicting_spooled_bundle_is_set_aside(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _spool(spool, HELLO, DATA, time.time())

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            assert (await post(url, body(HELLO, DATA[::-1])))[0] == 200
            return await drain_spool(spool, url, token=AGENT_TOKEN, retry=FAST)

    res = run(go())
    name = f"{HELLO.node}-{HELLO.bundle}.tar.gz"
    assert res.rejected == [name] and res.sent == []
    assert "409" in (spool / "rejected" / (name + ".why")).read_text()


def test_the_spool_waits_for_the_collector_and_lands_once(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    for n in range(3):
        _spool(spool, _hello(n), DATA[n:], time.time() - 10 + n)
    token = tmp_path / "token"
    token.write_text(AGENT_TOKEN + "\n")
    token.chmod(0o600)  # a token file readable by others is refused

    down = run(drain_spool(spool, "http://127.0.0.1:9", token_file=str(token),
                           retry=RetryPolicy(attempts=2, base_s=0.01, cap_s=0.01)))
    assert down.left == 3 and down.sent == [] and len(list(spool.glob("*.tar.gz"))) == 3

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            first = await drain_spool(spool, url, token_file=str(token), retry=FAST)
            second = await drain_spool(spool, url, token_file=str(token), retry=FAST)
            return first, second

    first, second = run(go())
    assert len(first.sent) == 3 and second.sent == [] and list(spool.glob("*.tar.gz")) == []
    assert len([p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]) == 3


class _FlipOnce:
    """A TCP proxy in front of the collector that flips one byte of the bundle data on the first
    connection only: bytes damaged on the wire, the spooled file intact."""

    def __init__(self, target_port: int, pattern: bytes) -> None:
        self.target_port, self.pattern = target_port, pattern
        self.connections = 0
        self.flipped = False

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = self.connections == 1
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def up() -> None:
            pending = bytearray()
            while data := await cr.read(1 << 16):
                if not first or self.flipped:
                    sw.write(data)
                    await sw.drain()
                    continue
                pending += data
                at = pending.find(self.pattern)
                if at >= 0:
                    pending[at] ^= 0xFF
                    self.flipped = True
                    sw.write(bytes(pending))
                    pending.clear()
                else:  # keep back a tail that could begin the pattern (split over two reads)
                    keep = next((k for k in range(min(len(self.pattern) - 1, len(pending)), 0, -1)
                                 if pending.endswith(self.pattern[:k])), 0)
                    sw.write(bytes(pending[:len(pending) - keep]))
                    del pending[:len(pending) - keep]
                await sw.drain()
            sw.write(bytes(pending))
            sw.write_eof()

        async def down() -> None:
            while data := await sr.read(1 << 16):
                cw.write(data)
                await cw.drain()
            cw.close()

        await asyncio.gather(up(), down(), return_exceptions=True)
        sw.close()


def test_bytes_damaged_in_transit_are_sent_again_not_set_aside(tmp_path: Path) -> None:
    # The uploader trusts the spool's sha256 for the end frame instead of hashing the file again;
    # when the collector finds the bytes it got do not match, the file is hashed once to tell the
    # wire from the disk: an intact file is sent again, and stored once.
    spool = tmp_path / "spool"
    f = _spool(spool, HELLO, DATA, time.time())
    sha = hashlib.sha256(DATA).hexdigest()

    async def go():  # type: ignore[no-untyped-def]
        async with running(local_settings(tmp_path)) as (url, _col):
            proxy = _FlipOnce(int(url.rsplit(":", 1)[1]), DATA[1_800_000:1_800_032])
            purl = await proxy.start()
            try:
                res = await upload(purl, HELLO, f, token=AGENT_TOKEN, expected_sha256=sha, retry=FAST)
            finally:
                proxy.server.close()
            return res, proxy

    res, proxy = run(go())
    assert proxy.flipped and proxy.connections >= 2
    assert res.status == "stored" and res.attempts == 2 and res.sha256 == sha
    stored = [p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]
    assert len(stored) == 1 and (tmp_path / "store" / stored[0]).read_bytes() == DATA


def test_a_spooled_file_changed_on_disk_is_final_and_never_stored(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    f = _spool(spool, HELLO, DATA, time.time())
    sha = hashlib.sha256(DATA).hexdigest()
    raw = bytearray(f.read_bytes())
    raw[100] ^= 0xFF  # the disk changed the file after its .sha256 was written
    f.write_bytes(bytes(raw))

    async def go() -> CollectorError:
        async with running(local_settings(tmp_path)) as (url, _col):
            with pytest.raises(CollectorError) as info:
                await upload(url, HELLO, f, token=AGENT_TOKEN, expected_sha256=sha, retry=FAST)
            return info.value

    err = run(go())
    assert (err.code, err.retryable) == ("corrupt_spool", False) and "spool corrupt" in str(err)
    assert [p for p in files(tmp_path / "store") if p.endswith(".tar.gz")] == []


async def _stand_in(handler):  # type: ignore[no-untyped-def]
    """A stand-in HTTP server (aiohttp) in place of the collector, to see the request as sent."""
    from aiohttp import web

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/bundles", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


def test_a_file_goes_with_a_content_length_as_the_canonical_frames(tmp_path: Path) -> None:
    from aiohttp import web

    data = DATA + os.urandom(3 * (1 << 20) - len(DATA) + 17)  # three full chunk frames and a short one
    f = tmp_path / "b.tar.gz"
    f.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    seen: dict = {}

    async def handler(request: web.Request) -> web.Response:
        seen["headers"] = dict(request.headers)
        seen["body"] = await request.read()
        return web.json_response({"status": "stored", "key": "k", "bytes": len(data), "sha256": sha})

    async def go() -> None:
        runner, url = await _stand_in(handler)
        try:
            for expected in (None, sha):  # hashed here, or the spool's digest: the same wire
                await upload(url, HELLO, f, token=AGENT_TOKEN, expected_sha256=expected, retry=FAST)
                assert seen["body"] == b"".join(frame_stream(HELLO, [data]))
                assert int(seen["headers"]["Content-Length"]) == len(seen["body"])
                assert "Transfer-Encoding" not in seen["headers"]
        finally:
            await runner.cleanup()

    run(go())


def test_a_spooled_file_that_shrinks_while_sent_is_never_sent_short(tmp_path: Path) -> None:
    from aiohttp import web

    f = tmp_path / "b.tar.gz"
    f.write_bytes(DATA)

    async def handler(request: web.Request) -> web.Response:
        os.truncate(f, 1_000_000)  # before the body is read: the file shrinks under the upload
        await request.read()
        return web.json_response({"status": "stored"})

    async def go() -> CollectorError:
        runner, url = await _stand_in(handler)
        try:
            with pytest.raises(CollectorError) as info:
                await upload(url, HELLO, f, token=AGENT_TOKEN, retry=FAST)
            return info.value
        finally:
            await runner.cleanup()

    err = run(go())
    assert (err.code, err.retryable) == ("corrupt_spool", False) and "shrank" in str(err)
