"""The S3 store against a real SeaweedFS on loopback: PutObject for small bundles, multipart for large,
and every failed ingest leaves no object and no incomplete multipart upload (listed after each test)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from collector.config import CollectorSettings, StoreURL
from proto.frames import End
from tests.support.collector_env import AWS_ENV, BUCKET, Weed, running_weed

from tests.support.collector_helpers import HELLO, body, get, post, run, running, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20
SMALL = os.urandom(300_000)
LARGE = os.urandom(12 * MiB + 12345)  # three parts of 5 MiB: two full, one short


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Weed]:
    with running_weed(tmp_path_factory.mktemp("weed")) as w:
        yield w


@pytest.fixture
def s3(weed: Weed, tmp_path: Path) -> Iterator[CollectorSettings]:
    weed.clear()
    yield CollectorSettings(store=StoreURL(kind="s3", bucket=BUCKET, prefix="railscope"),
                            s3_endpoint_url=weed.endpoint, part_bytes=5 * MiB, part_concurrency=3,
                            parts_in_flight=4, cluster=HELLO.cluster,  # the agent token's cluster
                            **write_tokens(tmp_path / "tokens"))  # type: ignore[arg-type]
    # whatever the test did, nothing half-written may remain
    assert weed.uploads() == []


def _key(hello=HELLO) -> str:  # type: ignore[no-untyped-def]
    return ("railscope/prod-east/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-"
            f"{hello.bundle}.tar.gz")


@pytest.mark.parametrize(("data", "multipart"), [(SMALL, False), (LARGE, True)], ids=["small", "large"])
def test_a_bundle_lands_in_s3_with_its_sha256(weed: Weed, s3: CollectorSettings, data: bytes,
                                              multipart: bool) -> None:
    async def go() -> tuple[int, dict]:
        async with running(s3) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, data, chunk=MiB))
            return s, doc

    s, doc = run(go())
    assert s == 200 and doc["status"] == "stored", doc
    key = _key()
    assert weed.objects() == [key, key + ".sha256"]
    c = weed.client()
    got = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert got == data
    sha_line = c.get_object(Bucket=BUCKET, Key=key + ".sha256")["Body"].read().decode()
    assert sha_line == f"{hashlib.sha256(data).hexdigest()}  {Path(key).name}\n"
    head = c.head_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
    if multipart:
        assert head["ETag"].endswith('-3"')  # three parts
        # Each part went with its CRC-32, which the store checked and combined (the S3 composite:
        # the CRC-32 of the parts' CRC-32s, then -<parts>).
        crcs = b"".join(zlib.crc32(data[i:i + 5 * MiB]).to_bytes(4, "big") for i in range(0, len(data), 5 * MiB))
        assert head.get("ChecksumCRC32") == base64.b64encode(zlib.crc32(crcs).to_bytes(4, "big")).decode() + "-3"
    else:
        assert head.get("ChecksumSHA256") == base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_duplicate_and_conflict_on_s3(weed: Weed, s3: CollectorSettings) -> None:
    async def go() -> list[tuple[int, dict]]:
        async with running(s3) as (url, _col):
            out = []
            for data in (LARGE, LARGE, LARGE[:-1] + b"!"):
                s, doc, _h = await post(url, body(HELLO, data, chunk=MiB))
                out.append((s, doc))
            return out

    first, again, other = run(go())
    assert first[0] == 200 and again == (200, again[1]) and again[1]["duplicate"] is True
    assert other[0] == 409 and other[1]["error"] == "conflict"
    assert weed.objects() == [_key(), _key() + ".sha256"]


def _flip(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0xFF
    return bytes(b)


def _stalled(raw: bytes, after: int):  # type: ignore[no-untyped-def]
    async def gen():  # type: ignore[no-untyped-def]
        yield raw[:after]
        await asyncio.sleep(30)
        yield raw[after:]

    return gen()


FAULTS = {
    "corrupted chunk": (lambda: _flip(body(HELLO, LARGE, chunk=MiB), 8 * MiB), {}, 400, "digest_mismatch"),
    "wrong end digest": (lambda: body(HELLO, LARGE, chunk=MiB, end=End(len(LARGE), "0" * 64)), {}, 400,
                         "digest_mismatch"),
    "truncated body": (lambda: body(HELLO, LARGE, chunk=MiB)[: 11 * MiB], {}, 400, "truncated"),
    "oversize body": (lambda: body(HELLO, LARGE, chunk=MiB), {"max_bundle_bytes": 11 * MiB}, 413, "too_large"),
    "stalled client": (lambda: _stalled(body(HELLO, LARGE, chunk=MiB), 11 * MiB), {"stall_timeout_s": 1.0}, 408,
                       "too_slow"),
}


def test_part_buffers_are_reused_while_busy_and_given_back_when_idle(weed: Weed, s3: CollectorSettings) -> None:
    # Eight 5 MiB parts through the replica's few part slots with the same buffers (no fresh,
    # zeroed, page-faulted 5 MiB per part); once no ingest runs, the store keeps none of them.
    data = os.urandom(8 * 5 * MiB)
    made: list[int] = []

    async def go() -> tuple[int, int]:
        async with running(s3) as (url, col):
            store = col.store
            fresh = store.buffer  # type: ignore[attr-defined]

            def counting() -> bytearray:
                if not store._free:  # type: ignore[attr-defined]
                    made.append(1)
                return fresh()

            store.buffer = counting  # type: ignore[attr-defined]
            s, _doc, _h = await post(url, body(HELLO, data, chunk=MiB))
            return s, len(store._free)  # type: ignore[attr-defined]

    status, kept = run(go())
    assert status == 200
    assert 0 < len(made) <= s3.parts_in_flight < 8
    assert kept == 0
    got = weed.client().get_object(Bucket=BUCKET, Key=_key())["Body"].read()
    assert got == data  # reused buffers never mixed one part's bytes into another


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failed_large_ingest_leaves_no_object_and_no_multipart_upload(weed: Weed, s3: CollectorSettings,
                                                                       fault: str) -> None:
    make, overrides, status, code = FAULTS[fault]

    async def go() -> tuple[int, dict, list[str]]:
        async with running(replace(s3, **overrides)) as (url, col):
            s, doc, _h = await post(url, make())
            # parts were sent before the fault: the multipart upload existed and was aborted
            return s, doc, sorted(col.store.orphans)  # type: ignore[attr-defined]

    s, doc, orphans = run(go())
    assert (s, doc["error"]) == (status, code), doc
    assert weed.objects() == []
    assert weed.uploads() == [] and orphans == []


def test_list_fetch_verify_through_s3(weed: Weed, s3: CollectorSettings) -> None:
    async def go() -> tuple[list[dict], bytes, dict]:
        async with running(s3) as (url, _col):
            await post(url, body(HELLO, LARGE, chunk=MiB))
            await post(url, body(replace(HELLO, bundle="b2", incident="inc-2"), SMALL))
            listed = json.loads((await get(url, "/v1/bundles?incident=inc-1"))[1])["bundles"]
            blob = (await get(url, "/v1/bundles/" + listed[0]["key"]))[1]
            ver = json.loads((await get(url, f"/v1/bundles/{listed[0]['key']}/verify", method="POST"))[1])
            return listed, blob, ver

    listed, blob, ver = run(go())
    assert [b["bundle"] for b in listed] == [HELLO.bundle]
    assert listed[0]["sha256"] == hashlib.sha256(LARGE).hexdigest() and listed[0]["bytes"] == len(LARGE)
    assert blob == LARGE
    assert ver["ok"] is True


def test_readyz_reports_an_unreachable_bucket(weed: Weed, s3: CollectorSettings) -> None:
    async def go() -> int:
        async with running(replace(s3, store=StoreURL(kind="s3", bucket="no-such-bucket", prefix=""))) as (url, _c):
            return (await get(url, "/readyz", token=None))[0]

    assert run(go()) == 503


def test_seaweedfs_stopped_mid_upload(tmp_path: Path) -> None:
    """The store dies after the first parts: the agent gets 503, the abort is retried until the store is
    back, nothing is left, and the bundle sent again lands once."""
    old = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    w = Weed(tmp_path / "weed")
    w.start()
    try:
        settings = CollectorSettings(store=StoreURL(kind="s3", bucket=BUCKET, prefix="railscope"),
                                     s3_endpoint_url=w.endpoint, part_bytes=5 * MiB, cluster=HELLO.cluster,
                                     **write_tokens(tmp_path / "tokens"))  # type: ignore[arg-type]
        raw = body(HELLO, LARGE, chunk=MiB)

        async def dying():  # type: ignore[no-untyped-def]
            yield raw[: 6 * MiB]
            await asyncio.sleep(0.5)  # the first part is uploading or done
            w.stop(hard=True)
            yield raw[6 * MiB:]

        async def go() -> tuple[tuple[int, dict], int, list[str], tuple[int, dict]]:
            async with running(settings) as (url, col):
                first = await post(url, dying())
                orphans_while_down = len(col.store.orphans)  # type: ignore[attr-defined]
                w.start()
                for _ in range(100):
                    if not col.store.orphans:  # type: ignore[attr-defined]
                        break
                    await asyncio.sleep(0.2)
                left = w.uploads() + w.objects()
                s, doc, _h = await post(url, raw)
                return (first[0], first[1]), orphans_while_down, left, (s, doc)

        (s1, d1), orphans, left, (s2, d2) = run(go())
        assert (s1, d1["error"]) == (503, "store_unavailable")
        assert orphans == 1  # the abort could not reach the store: kept and retried
        assert left == []  # ... and done once it was back: no object, no incomplete upload
        assert s2 == 200 and d2["status"] == "stored"
        assert w.objects() == [_key(), _key() + ".sha256"] and w.uploads() == []
    finally:
        w.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_seaweedfs_refuses_a_second_conditional_put(weed: Weed, s3: CollectorSettings) -> None:
    # The bundle-id claim rests on it: PutObject with If-None-Match: * fails when the key exists.
    c = weed.client()
    c.put_object(Bucket=BUCKET, Key="railscope/probe", Body=b"1", IfNoneMatch="*")
    with pytest.raises(Exception) as info:
        c.put_object(Bucket=BUCKET, Key="railscope/probe", Body=b"2", IfNoneMatch="*")
    assert info.value.response["Error"]["Code"] in ("PreconditionFailed", "412")  # type: ignore[attr-defined]
    assert c.get_object(Bucket=BUCKET, Key="railscope/probe")["Body"].read() == b"1"
    c.delete_object(Bucket=BUCKET, Key="railscope/probe")


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
def test_a_bundle_id_is_stored_once_on_s3_whatever_created_says(weed: Weed, s3: CollectorSettings,
                                                                 data: bytes) -> None:
    later = replace(HELLO, created=HELLO.created + 86400)

    async def go() -> list[tuple[int, object]]:
        async with running(s3) as (url, _col):
            out = []
            for hello, d in ((HELLO, data), (later, data), (later, data[:-1] + b"!")):
                s, doc, _h = await post(url, body(hello, d, chunk=MiB))
                out.append((s, doc.get("key") if s == 200 else doc["error"]))
            return out

    rel = _key()[len("railscope/"):]
    assert run(go()) == [(200, rel), (200, rel), (409, "conflict")]
    assert weed.objects() == [_key(), _key() + ".sha256"]
    claim = f"railscope/{HELLO.cluster}/.ids/{HELLO.node}+{HELLO.bundle}"
    assert weed.objects(claims=True) == sorted([_key(), _key() + ".sha256", claim])
    assert weed.uploads() == []


def test_two_uploads_of_one_id_under_two_dates_at_once_store_it_once(weed: Weed, s3: CollectorSettings) -> None:
    later = replace(HELLO, created=HELLO.created + 86400)

    async def go() -> list[int]:
        async with running(replace(s3, max_inflight=4)) as (url, _col):
            res = await asyncio.gather(post(url, body(HELLO, SMALL)), post(url, body(later, SMALL)))
            return sorted(r[0] for r in res)

    assert run(go())[0] in (200, 503)
    assert len([k for k in weed.objects() if k.endswith(".tar.gz")]) == 1


def put_bundles(weed: Weed, n: int, prefix: str = "railscope") -> list[str]:
    """``n`` stored bundles (object + ``.sha256``) written straight into the bucket, as the collector
    lays them out: listing costs do not depend on how they got there."""
    from concurrent.futures import ThreadPoolExecutor

    from proto.keys import BundleKey

    client = weed.client()
    keys = [BundleKey.build("prod-east", f"inc-{i // 10:03d}", f"gpu-node-{i % 10:03d}", f"b{i:024x}",
                            1796117903 + i) for i in range(n)]

    def put(k: BundleKey) -> None:
        client.put_object(Bucket=BUCKET, Key=k.key(prefix), Body=b"x" * 100)
        client.put_object(Bucket=BUCKET, Key=k.sha_key(prefix), Body=f"{'0' * 64}  {k.name}\n".encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))
    return [k.rel for k in keys]


def test_the_incident_list_page_reads_no_object_per_bundle(weed: Weed, s3: CollectorSettings) -> None:
    """``/ui/`` lists from ListObjectsV2 alone (key, size); a ``.sha256`` is read only where it is shown."""
    put_bundles(weed, 30)

    async def go() -> tuple[int, bytes, dict[str, int]]:
        calls: dict[str, int] = {}
        async with running(s3) as (url, col):
            def count(model, **_kw) -> None:  # type: ignore[no-untyped-def]
                calls[model.name] = calls.get(model.name, 0) + 1
            col.store.client.meta.events.register("before-call.s3.*", count)  # type: ignore[attr-defined]
            status, page, _h = await get(url, "/ui/")
            return status, page, calls

    status, page, calls = run(go())
    assert status == 200 and b"inc-002" in page
    assert calls.get("GetObject", 0) == 0, calls
    assert calls.get("ListObjectsV2", 0) >= 1


def _claim_key(hello=HELLO) -> str:  # type: ignore[no-untyped-def]
    return f"railscope/{hello.cluster}/.ids/{hello.node}+{hello.bundle}"


def test_a_claim_left_by_a_replica_killed_before_completing_is_stale_at_once(weed: Weed, s3: CollectorSettings) -> None:
    # What a replica killed between the claim and CompleteMultipartUpload leaves: the claim, naming
    # an upload that no longer exists (aborted by a sweep, or never created), and no object.
    rel = _key()[len("railscope/"):]
    weed.client().put_object(Bucket=BUCKET, Key=_claim_key(), Body=f"{rel}\nupload gone-0001\n".encode())

    async def go() -> tuple[int, dict]:
        async with running(s3) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, LARGE, chunk=MiB))
            return s, doc

    s, doc = run(go())
    assert s == 200 and doc["status"] == "stored", f"a resend after a killed replica's claim answered {s} {doc}"
    assert weed.objects() == [_key(), _key() + ".sha256"]


def test_a_claim_whose_upload_is_in_progress_still_holds(weed: Weed, s3: CollectorSettings) -> None:
    c = weed.client()
    upload = c.create_multipart_upload(Bucket=BUCKET, Key=_key())["UploadId"]
    rel = _key()[len("railscope/"):]
    c.put_object(Bucket=BUCKET, Key=_claim_key(), Body=f"{rel}\nupload {upload}\n".encode())
    try:
        async def go() -> int:
            async with running(s3) as (url, _col):
                return (await post(url, body(HELLO, LARGE, chunk=MiB)))[0]

        assert run(go()) == 503  # being completed elsewhere: tried again later
        assert weed.objects() == []
    finally:
        c.abort_multipart_upload(Bucket=BUCKET, Key=_key(), UploadId=upload)


def _failing(store, op: str, when) -> None:  # type: ignore[no-untyped-def]
    """Make the store's S3 client fail ``op`` for the calls ``when(kwargs)`` picks."""
    real = getattr(store.client, op)

    def fake(**kw):  # type: ignore[no-untyped-def]
        if when(kw):
            raise OSError(f"injected: {op} failed")
        return real(**kw)

    setattr(store.client, op, fake)


@pytest.mark.parametrize("fault", ["last part", ".sha256 claim", "complete", "small put"])
def test_a_store_failing_at_the_end_of_an_upload_leaves_no_claim(weed: Weed, s3: CollectorSettings,
                                                                 fault: str) -> None:
    data = SMALL if fault == "small put" else LARGE
    picks = {
        "last part": ("upload_part", lambda kw: kw["PartNumber"] == 3),
        ".sha256 claim": ("put_object", lambda kw: kw["Key"].endswith(".sha256")),
        "complete": ("complete_multipart_upload", lambda kw: True),
        "small put": ("put_object", lambda kw: kw["Key"].endswith(".tar.gz")),
    }

    async def go() -> tuple[int, list[str], int]:
        async with running(s3) as (url, col):
            _failing(col.store, *picks[fault])
            s, _doc, _h = await post(url, body(HELLO, data, chunk=MiB))
            left = weed.objects(claims=True)
            del col.store.client.__dict__[picks[fault][0]]  # the store answers again
            again = (await post(url, body(HELLO, data, chunk=MiB)))[0]
            return s, left, again

    s, left, again = run(go())
    assert s >= 500
    assert left == [], f"after a failed {fault}: {left}"
    assert again == 200, f"the resend after a failed {fault} answered {again}"


def test_a_replica_ahead_of_the_store_measures_the_skew_by_the_listings_date(s3: CollectorSettings) -> None:
    # A poll marker's LastModified is the store's clock; the listing's Date header measures this
    # replica's against it, and the marker is judged on this replica's clock moved by the skew.
    import time

    from collector.requests import DEFAULT_CLUSTER, RequestBoard
    from collector.storage import StoreClock
    from collector.storage.s3 import S3Store

    def ahead() -> float:
        return time.time() + 600.0

    async def go() -> tuple[float, float | None]:
        on_time = S3Store(s3)
        await RequestBoard(on_time).mark_polled("gpu-node-001")
        store = S3Store(s3)
        store.clock = StoreClock(ahead)
        board = RequestBoard(store, clock=ahead)
        try:
            seen = await board.agents_seen()
            return board.clock() - seen[(DEFAULT_CLUSTER, "gpu-node-001")], store.clock.skew_s
        finally:
            await on_time.close()
            await store.close()

    age, skew = asyncio.run(go())
    assert age < 5, f"a poll of a moment ago judged {age:.0f} s old"
    assert skew is not None and abs(skew - 600.0) < 3


def test_a_replica_ahead_of_the_store_leaves_another_replicas_fresh_claim_alone(s3: CollectorSettings) -> None:
    # A claim for a single PutObject is another replica's upload on its way for PUT_CLAIM_S (5 min),
    # aged on the store's clock: a replica ten minutes ahead took it for stale and claimed the id too.
    import time

    from collector.storage import StoreClock
    from collector.storage.s3 import S3Store
    from proto.keys import BundleKey

    key = BundleKey.build("prod", "inc-clock", "gpu-node-001", "b-clock-0001", int(time.time()))

    async def go() -> tuple[bool, bool]:
        on_time, ahead = S3Store(s3), S3Store(s3)
        ahead.clock = StoreClock(lambda: time.time() + 600.0)
        try:
            first = await on_time.claim_id(key)
            return first, await ahead.claim_id(key)
        finally:
            await on_time.release_id(key)
            await on_time.close()
            await ahead.close()

    assert asyncio.run(go()) == (True, False)
