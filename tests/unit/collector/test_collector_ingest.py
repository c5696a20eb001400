"""Streaming ingest into the local store: stored once, verified, visible only on a match, refusals clean."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import msgpack
import pytest

from collector.config import CollectorSettings
from proto.frames import Chunk, End, Hello, encode
from proto.keys import PART
from tests.support.collector_helpers import (
    AGENT_TOKEN,
    AGENT_TOKEN_18,
    AGENT_TOKEN_N1,
    ALERTING_TOKEN,
    HELLO,
    OPERATOR_TOKEN,
    body,
    claims,
    files,
    get,
    local_settings,
    post,
    run,
    running,
)

DATA = os.urandom(300_000)
KEY = "prod-east/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-b0123456789abcdef01234567.tar.gz"


def test_a_bundle_is_stored_under_its_key_with_its_sha256(tmp_path: Path) -> None:
    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            status, doc, _h = await post(url, body(HELLO, DATA))
            return status, doc

    status, doc = run(go())
    assert status == 200, doc
    assert doc == {"status": "stored", "duplicate": False, "key": KEY, "bytes": len(DATA),
                   "sha256": hashlib.sha256(DATA).hexdigest()}
    root = tmp_path / "store"
    assert files(root) == [KEY, KEY + ".sha256"]
    assert (root / KEY).read_bytes() == DATA
    res = subprocess.run(["sha256sum", "-c", Path(KEY).name + ".sha256"], cwd=(root / KEY).parent,
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip().endswith(": OK")


def test_resending_the_same_bundle_is_a_no_op_and_another_digest_is_409(tmp_path: Path) -> None:
    async def go() -> list[tuple[int, dict]]:
        async with running(local_settings(tmp_path)) as (url, _col):
            out = []
            for data in (DATA, DATA, DATA[:-1] + b"x"):
                status, doc, _h = await post(url, body(HELLO, data))
                out.append((status, doc))
            return out

    first, again, other = run(go())
    assert first[0] == 200 and not first[1]["duplicate"]
    mtime = (tmp_path / "store" / KEY).stat().st_mtime_ns
    assert again[0] == 200 and again[1]["duplicate"] is True and again[1]["status"] == "duplicate"
    assert other[0] == 409 and other[1]["error"] == "conflict"
    assert (tmp_path / "store" / KEY).read_bytes() == DATA
    assert (tmp_path / "store" / KEY).stat().st_mtime_ns == mtime
    assert files(tmp_path / "store") == [KEY, KEY + ".sha256"]


def test_a_missing_sha256_beside_a_stored_bundle_is_rewritten_on_resend(tmp_path: Path) -> None:
    async def go() -> dict:
        async with running(local_settings(tmp_path)) as (url, _col):
            await post(url, body(HELLO, DATA))
            (tmp_path / "store" / (KEY + ".sha256")).unlink()
            _s, doc, _h = await post(url, body(HELLO, DATA))
            return doc

    assert run(go())["duplicate"] is True
    assert (tmp_path / "store" / (KEY + ".sha256")).read_text().split()[0] == hashlib.sha256(DATA).hexdigest()


def test_two_uploads_of_one_bundle_at_once_store_it_once(tmp_path: Path) -> None:
    async def go() -> list[tuple[int, dict, dict]]:
        # Four at once from one node: its per-node cap (2 by default) lifted for the race.
        async with running(local_settings(tmp_path, max_inflight_per_node=4)) as (url, _col):
            return await asyncio.gather(*(post(url, body(HELLO, DATA, chunk=4096)) for _ in range(4)))

    answers = run(go())
    assert all(s == 200 for s, _d, _h in answers)
    assert sorted(d["duplicate"] for _s, d, _h in answers) == [False, True, True, True]
    assert files(tmp_path / "store") == [KEY, KEY + ".sha256"]


@pytest.mark.parametrize(("field", "value"), [
    ("cluster", "../etc"), ("cluster", "Prod"), ("incident", "a/b"), ("incident", ".."), ("bundle", "b\x00x"),
    ("bundle", "x" * 64), ("cluster", "é"), ("incident", ""), ("bundle", "-rf"),
])
def test_hostile_key_parts_are_refused_and_nothing_is_written(tmp_path: Path, field: str, value: str) -> None:
    hello = replace(HELLO, **{field: value})

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            status, doc, _h = await post(url, body(hello, DATA))
            return status, doc

    status, doc = run(go())
    assert status == 400 and doc["error"] == "bad_key"
    assert files(tmp_path / "store") == []


def test_odd_bytes_in_the_node_name_are_refused(tmp_path: Path) -> None:
    # the agent token's node is gpu-node-017; a node of "../gpu-node-017" is refused as a key part first
    hello = replace(HELLO, node="../gpu-node-017")

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            status, doc, _h = await post(url, body(hello, DATA))
            return status, doc

    status, doc = run(go())
    assert status == 400 and doc["error"] == "bad_key"
    assert files(tmp_path / "store") == []


@pytest.mark.parametrize(("token", "status", "code"), [
    (None, 401, "unauthenticated"),
    ("not-a-token-at-all-xxxxxxxx", 401, "unauthenticated"),
    (AGENT_TOKEN_18, 403, "forbidden"),  # an agent uploading as another node
    (OPERATOR_TOKEN, 403, "forbidden"),
    (ALERTING_TOKEN, 403, "forbidden"),
])
def test_upload_tokens(tmp_path: Path, token: str | None, status: int, code: str) -> None:
    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, DATA), token=token)
            return s, doc

    got = run(go())
    assert got[0] == status and got[1]["error"] == code
    assert files(tmp_path / "store") == []


def test_refusals_before_the_body_with_expect_100_continue(tmp_path: Path) -> None:
    sent = []

    async def source():
        sent.append(1)
        yield body(HELLO, DATA)

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, source(), token="wrong-token-xxxxxxxxxxxx", expect100=True)
            return s, doc

    s, doc = run(go())
    assert s == 401 and doc["error"] == "unauthenticated"
    assert sent == []


def _corrupt_digest(data: bytes) -> bytes:
    return body(HELLO, data, end=End(len(data), hashlib.sha256(data + b"!").hexdigest()))


@pytest.mark.parametrize(("name", "raw", "code"), [
    ("wrong digest", _corrupt_digest(DATA), "digest_mismatch"),
    ("wrong length", body(HELLO, DATA, end=End(len(DATA) + 1, hashlib.sha256(DATA).hexdigest())), "length_mismatch"),
    ("truncated", body(HELLO, DATA)[:-200], "truncated"),
    ("no end", body(HELLO, DATA)[: -len(encode(End(len(DATA), "0" * 64)))], "truncated"),
    ("garbage", b"\xc1" * 100, "malformed"),
    ("array frame", msgpack.packb([1, 2, 3]), "malformed"),
    ("wrong frame type", encode(HELLO) + msgpack.packb({"t": "ping", "v": 1}), "unknown_frame"),
    ("unknown major", msgpack.packb({"t": "hello", "v": 2, **HELLO.to_json()}), "unsupported_version"),
    ("chunk first", body(HELLO, DATA)[len(encode(HELLO)):], "order"),
    ("empty body", b"", "truncated"),
])
def test_bad_streams_are_refused_and_nothing_is_left(tmp_path: Path, name: str, raw: bytes, code: str) -> None:
    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, col):
            s, doc, _h = await post(url, raw)
            assert col.in_flight == 0
            return s, doc

    s, doc = run(go())
    assert s == 400 and doc["error"] == code, (name, doc)
    assert files(tmp_path / "store") == [], name  # no object, no .sha256, no temporary file


def test_a_corrupted_chunk_fails_the_digest(tmp_path: Path) -> None:
    raw = bytearray(body(HELLO, DATA))
    raw[len(encode(HELLO)) + 5000] ^= 0xFF  # flip a byte inside the first chunk's data

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, bytes(raw))
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (400, "digest_mismatch")
    assert files(tmp_path / "store") == []


def test_an_oversize_bundle_is_refused_with_413(tmp_path: Path) -> None:
    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path, max_bundle_bytes=100_000)) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, DATA))
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (413, "too_large")
    assert files(tmp_path / "store") == []


def test_a_client_that_stalls_is_ended_with_408(tmp_path: Path) -> None:
    async def stalled():
        raw = body(HELLO, DATA)
        yield raw[:1000]
        await asyncio.sleep(5)
        yield raw[1000:]

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path, stall_timeout_s=0.5)) as (url, _col):
            s, doc, _h = await post(url, stalled())
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (408, "too_slow")
    assert files(tmp_path / "store") == []


def test_a_client_below_the_rate_floor_is_ended_with_408(tmp_path: Path) -> None:
    async def trickle():
        raw = body(HELLO, DATA)
        for i in range(0, len(raw), 100):
            yield raw[i:i + 100]
            await asyncio.sleep(0.05)  # 2 kB/s, under the 64 KiB/s floor

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path, min_rate_grace_s=0.5)) as (url, _col):
            s, doc, _h = await post(url, trickle())
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (408, "too_slow")
    assert files(tmp_path / "store") == []


def test_beyond_the_in_flight_cap_the_answer_is_429_with_retry_after(tmp_path: Path) -> None:
    async def slow():
        raw = body(HELLO, DATA)
        yield raw[:1000]
        await asyncio.sleep(1.0)
        yield raw[1000:]

    async def go() -> tuple[tuple, tuple]:
        async with running(local_settings(tmp_path, max_inflight=1, retry_after_s=7)) as (url, col):
            first = asyncio.create_task(post(url, slow()))
            while col.in_flight == 0:
                await asyncio.sleep(0.01)
            second = await post(url, body(replace(HELLO, bundle="b2"), DATA), expect100=True)
            return await first, second

    first, second = run(go())
    assert first[0] == 200
    assert second[0] == 429 and second[1]["error"] == "busy" and second[2]["Retry-After"] == "7"


def test_oversize_headers_are_refused(tmp_path: Path) -> None:
    async def go() -> int:
        import aiohttp

        async with running(local_settings(tmp_path)) as (url, _col), aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/bundles", data=b"", headers={"X-Big": "a" * 20000}) as r:
                return r.status

    assert run(go()) in (400, 431)
    assert files(tmp_path / "store") == []


def test_every_golden_vector_through_the_collector(tmp_path: Path) -> None:
    vectors = json.loads((Path(__file__).resolve().parents[3] / "proto" / "vectors" / "v1.json").read_text())

    async def go() -> list[tuple[str, int, dict]]:
        out = []
        for vec in vectors["vectors"]:
            # a store per vector: two vectors share a hello with other bundle bytes (a 409 otherwise)
            hello = next((f for f in vec.get("frames", []) if f["t"] == "hello"), None)
            # the agent token is bound to the vector's cluster (where it is one a collector can name)
            if hello is None:  # a vector cut short: its hello is in its bytes only
                try:
                    first = next(iter(msgpack.Unpacker(io.BytesIO(bytes.fromhex(vec["hex"])))))
                except Exception:
                    first = None
                hello = first if isinstance(first, dict) and first.get("t") == "hello" else None
            named = hello.get("cluster") if isinstance(hello, dict) else None
            cluster = named if isinstance(named, str) and PART.fullmatch(named) else HELLO.cluster
            async with running(local_settings(tmp_path / vec["name"], cluster=cluster)) as (url, _col):
                token = AGENT_TOKEN_N1 if (hello is None or hello["node"] == "n1") else AGENT_TOKEN
                s, doc, _h = await post(url, bytes.fromhex(vec["hex"]), token=token)
                out.append((vec["name"], s, doc))
        return out

    by_name = {v["name"]: v for v in vectors["vectors"]}
    for name, s, doc in run(go()):
        vec = by_name[name]
        kinds = [f["t"] for f in vec.get("frames", [])]
        if "error" in vec:
            assert (s, doc["error"]) == (400, vec["error"]), name
        elif kinds and kinds[-1] == "end":
            assert s == 200 and doc["status"] in ("stored", "duplicate"), (name, doc)
        else:
            assert (s, doc["error"]) == (400, "truncated"), name


def test_metrics_count_stored_refused_and_bytes(tmp_path: Path) -> None:
    async def go() -> str:
        async with running(local_settings(tmp_path)) as (url, _col):
            await post(url, body(HELLO, DATA))
            await post(url, body(HELLO, DATA))
            await post(url, b"\xc1")
            await post(url, body(HELLO, DATA), token=None)
            _s, text, _h = await get(url, "/metrics", token=None)
            return text.decode()

    text = run(go())
    assert "railscope_collector_bundles_stored_total 1.0" in text
    assert "railscope_collector_bundles_duplicate_total 1.0" in text
    assert 'railscope_collector_bundles_refused_total{reason="malformed"} 1.0' in text
    assert 'railscope_collector_bundles_refused_total{reason="unauthenticated"} 1.0' in text
    assert f"railscope_collector_received_bytes_total {2 * len(DATA)}.0" in text
    assert "railscope_collector_ingests_in_flight 0.0" in text
    assert "railscope_collector_ingest_duration_seconds_count 3.0" in text


def test_healthz_and_readyz_follow_the_store(tmp_path: Path) -> None:
    async def go() -> list[int]:
        async with running(local_settings(tmp_path)) as (url, col):
            out = [(await get(url, "/healthz", token=None))[0], (await get(url, "/readyz", token=None))[0]]
            (tmp_path / "store").rename(tmp_path / "gone")
            col.readiness._at = float("-inf")  # the last answer stands a few seconds (test_collector_readyz)
            out.append((await get(url, "/readyz", token=None))[0])
            return out

    assert run(go()) == [200, 200, 503]


def test_the_slot_is_released_when_the_client_goes_away(tmp_path: Path) -> None:
    async def go() -> tuple[int, list[str]]:
        async with running(local_settings(tmp_path, max_inflight=1)) as (url, col):
            host, port = url.removeprefix("http://").split(":")
            _reader, writer = await asyncio.open_connection(host, int(port))
            raw = body(HELLO, DATA)
            head = (f"POST /v1/bundles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AGENT_TOKEN}\r\n"
                    f"Content-Length: {len(raw)}\r\n\r\n").encode()
            writer.write(head + raw[:150_000])
            await writer.drain()
            while col.in_flight == 0:
                await asyncio.sleep(0.01)
            writer.transport.abort()  # the agent dies mid-stream
            for _ in range(200):
                if col.in_flight == 0:
                    break
                await asyncio.sleep(0.02)
            left = files(tmp_path / "store")
            s, _doc, _h = await post(url, body(HELLO, DATA))
            return s, left

    s, left = run(go())
    assert left == []  # no partial object, no temporary file
    assert s == 200


def test_a_stale_temporary_file_is_removed_at_start(tmp_path: Path) -> None:
    d = tmp_path / "store" / "prod-east" / "2026-12-01" / "inc-1"
    d.mkdir(parents=True)
    (d / ".x.tar.gz.abc.part").write_bytes(b"partial")

    async def go() -> None:
        async with running(local_settings(tmp_path, stale_part_s=0)):
            pass

    run(go())
    assert files(tmp_path / "store") == []


def test_a_hello_with_unknown_keys_is_accepted(tmp_path: Path) -> None:
    raw = msgpack.packb({"t": "hello", "v": 1, **HELLO.to_json(), "x-future": "ignored"}, use_bin_type=True)
    raw += body(HELLO, DATA)[len(encode(HELLO)):]

    async def go() -> int:
        async with running(local_settings(tmp_path)) as (url, _col):
            return (await post(url, raw))[0]

    assert run(go()) == 200


def test_hello_typed_fields_refused(tmp_path: Path) -> None:
    raw = msgpack.packb({"t": "hello", "v": 1, **HELLO.to_json(), "created": 0}, use_bin_type=True)

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, raw)
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (400, "bad_key")
    assert isinstance(Hello, type)


def test_frames_without_bytes_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    empty = hashlib.sha256(b"").hexdigest()
    flood = encode(HELLO) + b"".join(encode(Chunk(i, b"")) for i in range(1000)) + encode(End(0, empty))

    async def go() -> list[tuple[int, str]]:
        async with running(local_settings(tmp_path, max_bundle_bytes=3 << 20)) as (url, _col):
            out = []
            for raw in (flood, encode(HELLO) + encode(End(0, empty))):
                s, doc, _h = await post(url, raw)
                out.append((s, doc["error"]))
            return out

    assert run(go()) == [(400, "empty_chunk"), (400, "empty_bundle")]
    assert files(tmp_path / "store") == []


def test_the_size_cap_counts_framing_on_the_wire(tmp_path: Path) -> None:
    # Chunks of 4096 bytes, each padded with an unknown key (ignored by the decoder): the data
    # stays under the cap, the body passes it by a fifth.
    data = os.urandom(4096 * 234)
    raw = encode(HELLO) + b"".join(
        msgpack.packb({"t": "chunk", "v": 1, "seq": i, "data": data[off:off + 4096], "pad": "x" * 1000})
        for i, off in enumerate(range(0, len(data), 4096))) + encode(End(len(data), hashlib.sha256(data).hexdigest()))

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path, max_bundle_bytes=1_000_000)) as (url, _col):
            s, doc, _h = await post(url, raw)
            return s, doc

    s, doc = run(go())
    assert (s, doc["error"]) == (413, "too_large")
    assert files(tmp_path / "store") == []


def test_small_chunks_hashed_in_batches_give_the_digest(tmp_path: Path) -> None:
    data = os.urandom(4096 * 200 + 17)

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, data, chunk=4096))
            return s, doc

    s, doc = run(go())
    assert s == 200 and doc["sha256"] == hashlib.sha256(data).hexdigest()
    stored = [p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]
    assert len(stored) == 1 and (tmp_path / "store" / stored[0]).read_bytes() == data


def test_a_bundle_id_is_stored_once_whatever_created_says(tmp_path: Path) -> None:
    later = replace(HELLO, created=HELLO.created + 86400)

    async def go() -> list[tuple[int, object]]:
        async with running(local_settings(tmp_path)) as (url, _col):
            out = []
            for hello, data in ((HELLO, DATA), (later, DATA), (later, DATA + b"!")):
                s, doc, _h = await post(url, body(hello, data))
                out.append((s, doc.get("key") if s == 200 else doc["error"]))
            return out

    assert run(go()) == [(200, KEY), (200, KEY), (409, "conflict")]
    root = tmp_path / "store"
    assert files(root) == [KEY, KEY + ".sha256"]
    assert claims(root) == ["prod-east/.ids/gpu-node-017+b0123456789abcdef01234567"]
    assert (root / claims(root)[0]).read_text() == KEY + "\n"


def test_a_stale_claim_without_its_object_is_taken_over(tmp_path: Path) -> None:
    # A replica that died between claiming the id and linking the object.
    marker = tmp_path / "store" / "prod-east" / ".ids" / "gpu-node-017+b0123456789abcdef01234567"
    marker.parent.mkdir(parents=True)
    marker.write_text(KEY + "\n")
    os.utime(marker, (1, 1))

    async def go() -> tuple[int, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, DATA))
            return s, doc

    s, doc = run(go())
    assert s == 200 and doc["status"] == "stored"
    assert files(tmp_path / "store") == [KEY, KEY + ".sha256"]


def test_the_store_is_readable_by_owner_and_group_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        async def go() -> int:
            async with running(local_settings(tmp_path)) as (url, _col):
                s, _doc, _h = await post(url, body(HELLO, DATA))
                return s

        assert run(go()) == 200
    finally:
        os.umask(old)
    root = tmp_path / "store"
    modes = {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}
    assert len(modes) > 6
    for rel, mode in modes.items():
        want = 0o750 if (root / rel).is_dir() else 0o640
        assert mode == want, (rel, oct(mode))


def test_a_failed_upload_leaves_no_directory(tmp_path: Path) -> None:
    big = os.urandom(5 << 20)  # past the writer's 4 MiB buffer: the temporary file is on disk

    async def go() -> int:
        async with running(local_settings(tmp_path)) as (url, _col):
            s, _doc, _h = await post(url, _corrupt_digest(big))
            return s

    assert run(go()) == 400
    root = tmp_path / "store"
    assert [str(p.relative_to(root)) for p in root.rglob("*") if p.name != ".tmp"] == []


def test_capture_requests_are_readable_by_owner_and_group_only(tmp_path: Path) -> None:
    from collector.storage.local import LocalStore

    old = os.umask(0o022)
    try:
        store = LocalStore(local_settings(tmp_path))
        assert run(store.put_small("_requests/gpu-node-017/b0123.json", b"{}"))
    finally:
        os.umask(old)
    root = tmp_path / "store"
    for p in [root, *root.rglob("*")]:
        assert p.stat().st_mode & 0o777 == (0o750 if p.is_dir() else 0o640), p


def test_an_agent_token_stores_bundles_only_in_its_own_cluster(tmp_path: Path) -> None:
    """One agent token must not store bundles under three clusters' names: a token line may name its
    cluster, and a token without one is bound to the collector's --cluster."""
    s = local_settings(tmp_path, cluster="prod-east")
    (tmp_path / "tokens" / "agent").write_text(f"gpu-node-017 {AGENT_TOKEN} prod-west\ngpu-node-018 {AGENT_TOKEN_18}\n")

    async def go() -> list[tuple[int, str]]:
        out = []
        async with running(s) as (url, _col):
            for token, node, cluster in ((AGENT_TOKEN, "gpu-node-017", "prod-east"),
                                         (AGENT_TOKEN, "gpu-node-017", "prod-west"),
                                         (AGENT_TOKEN_18, "gpu-node-018", "staging"),
                                         (AGENT_TOKEN_18, "gpu-node-018", "prod-east")):
                hello = replace(HELLO, node=node, cluster=cluster, bundle=f"b{len(out):024x}")
                status, doc, _h = await post(url, body(hello, b"bundle bytes"), token=token)
                out.append((status, doc.get("error", doc.get("code", ""))))
        return out

    got = run(go())
    assert [st for st, _ in got] == [403, 200, 403, 200], got
    assert sorted(p.split("/")[0] for p in files(tmp_path / "store") if p.endswith(".tar.gz")) == [
        "prod-east", "prod-west"]


def test_one_node_uploads_at_most_its_hourly_rate(tmp_path: Path) -> None:
    """One token storing hundreds of bundles a second: past --max-uploads-per-node-hour a node is
    answered 429 with a Retry-After, nothing read or stored; another node still uploads."""
    s = local_settings(tmp_path, max_uploads_per_node_hour=3)

    async def go() -> list[tuple[int, str | None]]:
        out = []
        async with running(s) as (url, _col):
            for i, (token, node) in enumerate([(AGENT_TOKEN, "gpu-node-017")] * 4 + [(AGENT_TOKEN_18, "gpu-node-018")]):
                hello = replace(HELLO, node=node, bundle=f"b{i:024x}")
                status, _doc, headers = await post(url, body(hello, b"bundle bytes"), token=token)
                out.append((status, headers.get("Retry-After")))
        return out

    got = run(go())
    assert [st for st, _ in got] == [200, 200, 200, 429, 200], got
    assert 3000 <= int(got[3][1] or 0) <= 3600
    assert len([p for p in files(tmp_path / "store") if p.endswith(".tar.gz")]) == 4


def test_one_node_never_holds_every_slot_of_a_small_replica(tmp_path: Path) -> None:
    # --max-inflight 2 with the default --max-inflight-per-node 2: a node trickling one upload may
    # not start a second, so another node always finds a slot.
    hello18 = replace(HELLO, node="gpu-node-018", bundle="b0123456789abcdef01234518")

    async def go() -> tuple[int, str, int]:
        async with running(local_settings(tmp_path, max_inflight=2, max_inflight_per_node=2)) as (url, col):
            host, port = url.removeprefix("http://").split(":")
            _reader, writer = await asyncio.open_connection(host, int(port))
            raw = body(HELLO, DATA)
            head = (f"POST /v1/bundles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AGENT_TOKEN}\r\n"
                    f"Content-Length: {len(raw)}\r\n\r\n").encode()
            writer.write(head + raw[:150_000])  # held open: one slot taken by node 017
            await writer.drain()
            while col.in_flight == 0:
                await asyncio.sleep(0.01)
            second, doc, _h = await post(url, body(replace(HELLO, bundle="b0123456789abcdef01234599"), DATA))
            other, _doc, _h = await post(url, body(hello18, DATA), token=AGENT_TOKEN_18)
            writer.transport.abort()
            return second, doc.get("message", ""), other

    second, message, other = run(go())
    assert second == 429 and "node gpu-node-017 has 1 uploads" in message, (second, message)
    assert other == 200
    assert CollectorSettings(max_inflight=2, max_inflight_per_node=2).node_inflight_cap == 1
    assert CollectorSettings(max_inflight=1).node_inflight_cap == 1
    assert CollectorSettings(max_inflight=8, max_inflight_per_node=2).node_inflight_cap == 2
