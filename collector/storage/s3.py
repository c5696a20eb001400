"""The S3 store through boto3: one PutObject for a small bundle, a multipart upload for a large one.

Every boto3 call runs in this store's thread pool, never on the event loop. A small bundle (below
one part) is held in memory and sent with ``ChecksumSHA256`` (the bundle's digest, computed once
while receiving) and ``If-None-Match: *`` once the end frame matched. A large one starts a multipart
upload at its first full part; parts upload concurrently (``part_concurrency`` per ingest,
``parts_in_flight`` for the whole replica, which bounds memory), each with its own ``ChecksumCRC32``
(the store refuses a part that does not match it); ``CompleteMultipartUpload`` runs only after the
end frame matched, and ``AbortMultipartUpload`` on any error, so a failed ingest leaves no orphaned
parts.

A bundle id is stored once per cluster whatever ``created`` the agent sends (the date is part of the
key): before the object becomes visible, ``<prefix>/<cluster>/.ids/<node>+<bundle>`` (holding the
object's key) is written with a conditional PutObject (``If-None-Match: *``), which every replica
sees and which SeaweedFS, MinIO and AWS refuse with 412 when it exists.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import logging
import time
import zlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from proto.keys import SUFFIX, BundleKey, KeyPartError, check_part, parse_name, parse_rel, sha256_line

from ..config import CollectorSettings
from . import StoreClock, Stored, StoreError, check_small_rel, sweep_interval

__all__ = ["S3Store"]

log = logging.getLogger("railscope.collector.s3")

_READ = 1 << 20
#: A bundle id's claim for a single PutObject (no multipart upload to look for) is stale after this:
#: the PutObject it precedes takes at most botocore's three tries of the 60 s read timeout.
PUT_CLAIM_S = 300.0


def _b64sha(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _b64crc32(data: bytes | bytearray | memoryview) -> str:
    # S3's ChecksumCRC32: the big-endian CRC-32 (the zlib polynomial), base64.
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _code(exc: BaseException) -> str:
    resp = getattr(exc, "response", None)
    return str((resp or {}).get("Error", {}).get("Code", "")) if isinstance(resp, dict) else ""


class S3Writer:
    def __init__(self, store: S3Store, key: BundleKey) -> None:
        self.store, self.key = store, key
        self.obj = key.key(store.prefix)
        # The part being filled; it holds one of the replica's part slots from its first byte.
        self._buf: bytearray | None = None
        self._fill = 0
        self._upload_id: str | None = None
        self._parts: dict[int, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._mine = asyncio.Semaphore(store.settings.part_concurrency)
        self._next = 1
        self._failed: BaseException | None = None
        self._closed = False

    async def write(self, data: bytes) -> None:
        if self._failed is not None:
            raise StoreError(f"s3 upload_part failed: {self._failed}")
        size = self.store.settings.part_bytes
        view = memoryview(data)
        while view:
            if self._buf is None:
                # Back-pressure: a new part waits for a slot, which holds the ingest (and so the
                # client's TCP stream); every part buffer of the replica, filling or uploading,
                # holds a slot, so ingest memory stays parts_in_flight x part_bytes.
                await self.store.parts.acquire()
                self._buf, self._fill = self.store.buffer(), 0
            k = min(size - self._fill, len(view))
            self._buf[self._fill:self._fill + k] = view[:k]
            self._fill += k
            view = view[k:]
            if self._fill == size:
                part, self._buf = self._buf, None
                await self._send_part(part)

    def _take(self) -> bytearray:
        """The part being filled, cut to its length (in place: no copy); its slot goes with it."""
        part, self._buf = self._buf, None
        assert part is not None
        del part[self._fill:]
        return part

    async def _send_part(self, part: bytearray) -> None:
        st = self.store
        try:
            if self._upload_id is None:
                resp = await st.call("create_multipart_upload", Bucket=st.bucket, Key=self.obj,
                                     ChecksumAlgorithm="CRC32", ContentType="application/gzip")
                self._upload_id = resp["UploadId"]
            await self._mine.acquire()
        except BaseException:
            st.parts.release()
            raise
        number, self._next = self._next, self._next + 1
        task = asyncio.create_task(self._upload(number, part))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _upload(self, number: int, part: bytearray) -> None:
        st = self.store
        upload_id = self._upload_id

        def put() -> tuple[str, dict[str, Any]]:
            # Summed in the worker thread (zlib releases the GIL): the event loop keeps receiving.
            # CRC-32, not SHA-256: the part checksum guards this one hop to the store, which
            # refuses a part whose bytes do not match it (BadDigest); the bundle's own sha256,
            # computed once while receiving, is what the .sha256 and the end frame vouch for.
            # A second SHA-256 pass over every byte cost more CPU than the upload it protects.
            checksum = _b64crc32(part)
            return checksum, st.client.upload_part(Bucket=st.bucket, Key=self.obj, UploadId=upload_id,
                                                   PartNumber=number, Body=part, ChecksumCRC32=checksum)

        returned = False
        try:
            checksum, resp = await st.run(put)
            returned = True
            self._parts[number] = {"PartNumber": number, "ETag": resp["ETag"], "ChecksumCRC32": checksum}
        except Exception as exc:  # any failure fails the ingest at its next step
            returned = True
            self._failed = exc
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            if returned:
                # Only once the thread is done with it: a cancelled wait leaves the thread sending.
                st.give_back(part)
            st.parts.release()
            self._mine.release()

    async def _drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def commit(self, sha256: str) -> bool:
        try:
            return await self._commit(sha256)
        finally:
            self._close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.store._writer_done()

    async def _commit(self, sha256: str) -> bool:
        # The bundle id is claimed only once every byte is in the store, just before the object is
        # made whole: a replica killed before that leaves no claim, and one killed between the claim
        # and the completion leaves a claim whose upload is gone or never existed (stale at once,
        # ``claim_id``). Every failure after the claim releases it (and the .sha256 claim).
        try:
            if self._upload_id is None:
                return await self._put_whole(sha256)
            if self._buf is not None:
                await self._send_part(self._take())
            await self._drain()
            if self._failed is not None:
                raise StoreError(f"s3 upload_part failed: {self._failed}")
            return await self._complete(sha256)
        except StoreError:
            await self.abort()
            raise
        except Exception as exc:
            await self.abort()
            raise StoreError(f"s3: {type(exc).__name__}: {exc}") from None

    async def _put_whole(self, sha256: str) -> bool:
        """A bundle smaller than a part: one conditional PutObject."""
        st = self.store
        held = self._buf is not None
        data = self._take() if held else bytearray()
        try:
            if not await st.claim_id(self.key):
                return False
            # The bundle's sha256 is the object's: the digest the ingest computed while
            # receiving (and the end frame matched) is sent as is, not computed again.
            checksum = base64.b64encode(bytes.fromhex(sha256)).decode()

            def put() -> None:
                st.client.put_object(Bucket=st.bucket, Key=self.obj, Body=data, ChecksumSHA256=checksum,
                                     ContentType="application/gzip", IfNoneMatch="*")

            try:
                await st.run(put)
            except Exception as exc:
                if _code(exc) in ("PreconditionFailed", "412"):
                    return False  # stored before ids were claimed: the claim names it, which is right
                await st.release_id(self.key)
                raise
            except BaseException:
                await st.release_id(self.key)
                raise
        finally:
            if held:
                st.parts.release()
        # The object is stored and the claim names it: a failing .sha256 leaves both.
        await st.write_sha256(self.key, sha256)
        return True

    async def _complete(self, sha256: str) -> bool:
        """Every part sent: claim the id and the .sha256, then complete the multipart upload."""
        st = self.store
        upload_id = self._upload_id
        assert upload_id is not None
        if not await st.claim_id(self.key, upload_id):
            await self.abort()
            return False
        try:
            # Two replicas finishing one bundle id at once must store it once. Not every S3
            # server honours If-None-Match on CompleteMultipartUpload (SeaweedFS ignores it),
            # so the .sha256 is claimed first with a conditional PutObject, which they do.
            if not await st.claim_sha256(self.key, sha256, upload_id):
                # Held by another upload of this very key, whose claim names the same key: kept.
                await self.abort()
                return False
        except BaseException:
            await st.release_id(self.key)
            raise
        parts = [self._parts[n] for n in sorted(self._parts)]
        try:
            await st.call("complete_multipart_upload", Bucket=st.bucket, Key=self.obj,
                          UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except BaseException:
            await st.release_sha256(self.key)
            await st.release_id(self.key)
            raise
        self._upload_id = None
        return True

    async def abort(self) -> None:
        if self._buf is not None:
            self.store.give_back(self._buf)
            self._buf = None
            self.store.parts.release()
        await self._drain()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            try:
                await self.store.call("abort_multipart_upload", Bucket=self.store.bucket, Key=self.obj,
                                      UploadId=upload_id)
            except Exception as exc:
                # The store is down: retried in the background until it answers.
                log.warning("abort_multipart_upload %s failed (%s): retried later", self.obj, exc)
                self.store.orphans.add((self.obj, upload_id))
        self._close()


class S3Store:
    def __init__(self, settings: CollectorSettings) -> None:
        import boto3
        from botocore.config import Config

        self.settings = settings
        self.bucket = settings.store.bucket
        self.prefix = settings.store.prefix
        workers = settings.parts_in_flight + 8
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="railscope-s3")
        # /readyz's HeadBucket has a thread of its own: a probe never waits behind parts, and a hung
        # store holds one thread, not one of the upload pool's per probe.
        self._ready_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="railscope-s3-ready")
        # Checksums are sent where we give them (ChecksumSHA256), not computed again by botocore.
        # Payload signing off: over plain HTTP botocore would hash every part once more for SigV4;
        # the signed x-amz-checksum-sha256 header already binds the body, and the server checks it.
        cfg = Config(max_pool_connections=workers, retries={"max_attempts": 3, "mode": "standard"},
                     request_checksum_calculation="when_required", response_checksum_validation="when_required",
                     connect_timeout=5, read_timeout=60, s3={"payload_signing_enabled": False})
        self.client = boto3.session.Session().client("s3", endpoint_url=settings.s3_endpoint_url, config=cfg)
        self.parts = asyncio.Semaphore(settings.parts_in_flight)
        #: Part buffers, reused: a fresh 8 MiB bytearray is zeroed and page-faulted in on every part,
        #: a pass over the memory as costly as the copy into it. At most parts_in_flight are kept,
        #: which is the memory the part slots allow anyway.
        self._free: list[bytearray] = []
        self._writers = 0
        #: (key, upload id) of aborts that failed: retried every few seconds
        self.orphans: set[tuple[str, str]] = set()
        self._retry_task: asyncio.Task[None] | None = None
        self.description = f"s3://{self.bucket}/{self.prefix}"
        self.clock = StoreClock()

    def buffer(self) -> bytearray:
        """A part buffer of ``part_bytes``; the caller holds a part slot."""
        return self._free.pop() if self._free else bytearray(self.settings.part_bytes)

    def give_back(self, buf: bytearray) -> None:
        # A buffer cut to a last part's length is not a part buffer any more: dropped.
        if len(buf) == self.settings.part_bytes and len(self._free) < self.settings.parts_in_flight:
            self._free.append(buf)

    async def run(self, fn: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def call(self, op: str, **kwargs: Any) -> Any:
        fn = getattr(self.client, op)
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(**kwargs))

    async def start(self) -> None:
        try:
            await self._sweep()
        except Exception as exc:
            log.warning("could not list incomplete multipart uploads at start: %s", exc)
        self._retry_task = asyncio.create_task(self._retry_aborts())

    async def _sweep(self) -> None:
        """Abort the incomplete multipart uploads under the prefix older than ``stale_part_s``.

        A replica killed mid-ingest leaves its upload open; no other replica knows its id. The age
        keeps a sweep from aborting what a live replica is still sending.
        """
        def run() -> list[tuple[str, str]]:
            out = []
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket,
                                                                                   Prefix=self._base())
            for page in pages:
                for u in page.get("Uploads", []):
                    # aged on the store's clock (Initiated is its stamp), not this replica's
                    if self._age(page, u["Initiated"]) >= self.settings.stale_part_s:
                        out.append((u["Key"], u["UploadId"]))
            return out

        for key, upload_id in await asyncio.get_running_loop().run_in_executor(self._pool, run):
            log.info("aborting a stale multipart upload of %s", key)
            self.orphans.add((key, upload_id))
        await self._abort_orphans()

    async def _abort_orphans(self) -> None:
        for key, upload_id in sorted(self.orphans):
            try:
                await self.call("abort_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception as exc:
                if _code(exc) not in ("NoSuchUpload", "404"):
                    continue
            self.orphans.discard((key, upload_id))

    async def _retry_aborts(self) -> None:
        # The sweep runs again while the replica runs, not only at its start: an upload another
        # replica left when it was killed is aborted within about stale_part_s, restart or not.
        every = sweep_interval(self.settings.stale_part_s)
        swept = time.monotonic()
        while True:
            await asyncio.sleep(min(3.0, every))
            if time.monotonic() - swept >= every:
                swept = time.monotonic()
                try:
                    await self._sweep()
                except Exception as exc:
                    log.warning("could not list incomplete multipart uploads: %s", exc)
            if self.orphans:
                await self._abort_orphans()

    async def close(self) -> None:
        if self._retry_task is not None:
            self._retry_task.cancel()
        if self.orphans:
            await self._abort_orphans()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ready_pool.shutdown(wait=False, cancel_futures=True)

    async def ready(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._ready_pool, lambda: self.client.head_bucket(Bucket=self.bucket))
        except Exception as exc:
            raise StoreError(f"s3 bucket {self.bucket}: {type(exc).__name__}: {exc}") from None

    async def begin(self, key: BundleKey) -> S3Writer:
        self._writers += 1
        return S3Writer(self, key)

    def _writer_done(self) -> None:
        self._writers -= 1
        if self._writers == 0:
            # Idle: the kept part buffers go back to the kernel (they are mmap'ed, collector/app.py).
            self._free.clear()

    async def write_sha256(self, key: BundleKey, sha256: str) -> None:
        body = sha256_line(sha256, key.name).encode()
        await self.call("put_object", Bucket=self.bucket, Key=key.sha_key(self.prefix), Body=body,
                        ChecksumSHA256=_b64sha(body), ContentType="text/plain")

    async def claim_sha256(self, key: BundleKey, sha256: str, own_upload: str | None = None) -> bool:
        """Write the .sha256 only if absent; False when another upload holds it.

        A .sha256 without its object is a claim left by an upload that never completed: stale at
        once when no multipart upload of the key is in progress but ``own_upload`` (the one
        claiming), and in any case once older than ``stale_part_s``.
        """

        body = sha256_line(sha256, key.name).encode()
        for _ in range(2):
            try:
                await self.call("put_object", Bucket=self.bucket, Key=key.sha_key(self.prefix), Body=body,
                                ChecksumSHA256=_b64sha(body), ContentType="text/plain", IfNoneMatch="*")
                return True
            except Exception as exc:
                if _code(exc) not in ("PreconditionFailed", "412"):
                    raise
            if await self.stat(key) is not None:
                return False
            try:
                head = await self.call("head_object", Bucket=self.bucket, Key=key.sha_key(self.prefix))
            except Exception:
                continue
            age = self._age(head, head["LastModified"])
            others = await self._uploads_of(key.key(self.prefix), exclude=own_upload)
            if others and age < self.settings.stale_part_s:
                return False
            await self.release_sha256(key)
        return False

    def _id_key(self, key: BundleKey) -> str:
        return f"{self._base()}{key.cluster}/.ids/{key.node}+{key.bundle}"

    async def _uploads_of(self, obj: str, exclude: str | None = None) -> list[str]:
        """The multipart uploads of the object ``obj`` in progress (their ids), ``exclude`` left out."""
        def run() -> list[str]:
            out: list[str] = []
            for page in self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=obj):
                out += [u["UploadId"] for u in page.get("Uploads", []) if u.get("Key") == obj]
            return out

        try:
            ids = await self.run(run)
        except Exception as exc:
            raise StoreError(f"s3 list multipart uploads: {type(exc).__name__}: {exc}") from None
        return [i for i in ids if i != exclude]

    async def _claimed(self, key: BundleKey) -> tuple[BundleKey | None, float | None, str | None]:
        """The key the bundle id's claim names (None if there is none), the claim's age (seconds, on
        the store's clock; None without a claim or its LastModified), and the multipart upload it was
        made for (None: a single PutObject, or an older claim)."""
        try:
            resp = await self.call("get_object", Bucket=self.bucket, Key=self._id_key(key))
            text = await asyncio.get_running_loop().run_in_executor(self._pool, resp["Body"].read, 4096)
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None, None, None
            raise StoreError(f"s3 get the bundle id's claim: {exc}") from None
        modified = resp.get("LastModified")
        age = self._age(resp, modified) if modified is not None else None
        lines = text.decode("ascii", "replace").split("\n")
        upload = None
        for line in lines[1:]:
            word, _, value = line.strip().partition(" ")
            if word == "upload" and value:
                upload = value
        try:
            found = parse_rel(lines[0].strip())
        except KeyPartError:
            return None, age, upload
        if (found.cluster, found.node, found.bundle) != (key.cluster, key.node, key.bundle):
            return None, age, upload
        return found, age, upload

    async def claim_id(self, key: BundleKey, upload_id: str | None = None) -> bool:
        """Claim the bundle id for ``key`` (``upload_id``: the multipart upload about to complete);
        False when it is stored (or being stored) under any date.

        A claim whose object is not there is taken over when it is stale: at once when it names a
        multipart upload that is no longer in progress (its replica died or failed between claim and
        completion); a claim for a single PutObject after ``PUT_CLAIM_S``; any after ``stale_part_s``.
        """

        body = (key.rel + "\n" + (f"upload {upload_id}\n" if upload_id else "")).encode()
        for _ in range(2):
            try:
                await self.call("put_object", Bucket=self.bucket, Key=self._id_key(key), Body=body,
                                ChecksumSHA256=_b64sha(body), ContentType="text/plain", IfNoneMatch="*")
                return True
            except Exception as exc:
                if _code(exc) not in ("PreconditionFailed", "412"):
                    raise
            found, claim_age, upload = await self._claimed(key)
            if found is not None and await self.stat(found) is not None:
                return False
            age = claim_age if claim_age is not None else float("inf")
            if age < self.settings.stale_part_s:
                if upload is not None:
                    claimed_obj = (found or key).key(self.prefix)
                    if upload in await self._uploads_of(claimed_obj):
                        return False  # being completed now
                elif age < PUT_CLAIM_S:
                    return False  # a PutObject may still be on its way
            await self.release_id(key)
        return False

    async def release_id(self, key: BundleKey) -> None:
        try:
            await self.call("delete_object", Bucket=self.bucket, Key=self._id_key(key))
        except Exception as exc:
            log.warning("could not remove the claim %s: %s", self._id_key(key), exc)

    async def release_sha256(self, key: BundleKey) -> None:
        try:
            await self.call("delete_object", Bucket=self.bucket, Key=key.sha_key(self.prefix))
        except Exception as exc:
            log.warning("could not remove the claim %s: %s", key.sha_key(self.prefix), exc)

    def _base(self) -> str:
        return self.prefix + "/" if self.prefix else ""

    @staticmethod
    def _date(resp: dict[str, Any]) -> float | None:
        """The store's clock when it answered: the ``Date`` header (RFC 9110 §6.6.1), to the second,
        which is why its middle is taken."""
        text = (resp.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
        try:
            return email.utils.parsedate_to_datetime(text).timestamp() + 0.5 if text else None
        except (TypeError, ValueError):
            return None

    def _sample_clock(self, resp: dict[str, Any], before: float) -> None:
        """One sample of the skew: an answer's ``Date`` against ``clock()`` around the call."""
        store = self._date(resp)
        if store is not None:
            self.clock.sample((before + self.clock.clock()) / 2 - store)

    def _age(self, resp: dict[str, Any], stamp: Any) -> float:
        """Seconds since the store stamped ``stamp`` (a ``LastModified`` of ``resp``), on the store's
        own clock (its ``Date``): a replica ahead of the store would take a claim of another
        replica's upload in progress for a stale one."""
        now = self._date(resp)
        if now is None:
            return self.clock.clock() - self.clock.to_replica(stamp.timestamp())
        self.clock.sample(self.clock.clock() - now)
        return now - stamp.timestamp()

    async def _objects(self, prefix: str) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            pages = iter(self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix))
            while True:
                before = self.clock.clock()
                page = next(pages, None)
                if page is None:
                    return out
                self._sample_clock(page, before)
                out.extend(page.get("Contents", []))

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, run)
        except Exception as exc:
            raise StoreError(f"s3 list: {type(exc).__name__}: {exc}") from None

    async def _sha(self, key: BundleKey) -> str | None:
        try:
            resp = await self.call("get_object", Bucket=self.bucket, Key=key.sha_key(self.prefix))
            text = await asyncio.get_running_loop().run_in_executor(self._pool, resp["Body"].read, 4096)
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"s3 get .sha256: {exc}") from None
        words = text.decode("ascii", "replace").split()
        return words[0] if words else None

    async def _collect(self, objs: list[dict[str, Any]], keep,  # type: ignore[no-untyped-def]
                       with_sha256: bool = True) -> list[Stored]:
        base = self._base()
        names = {o["Key"] for o in objs}
        out: list[Stored] = []
        for o in objs:
            rel = o["Key"][len(base):]
            parts = rel.split("/")
            if len(parts) != 4 or not parts[3].endswith(SUFFIX):
                continue
            try:
                key = parse_name(*parts)
            except KeyPartError:
                continue
            if not keep(key):
                continue
            # One GET per bundle: only when the caller shows or checks the digest.
            sha = await self._sha(key) if with_sha256 and key.sha_key(self.prefix) in names else None
            out.append(Stored(key=key, bytes=int(o["Size"]), sha256=sha))
        return out

    async def find(self, key: BundleKey) -> Stored | None:
        found, _age, _upload = await self._claimed(key)
        if found is not None:
            st = await self.stat(found)
            if st is not None:
                return st
        # Stored before bundle ids were claimed: look under the date of this ``created``.
        objs = await self._objects(f"{self._base()}{key.dir}/{key.node}-")
        found = await self._collect(objs, lambda k: k.node == key.node and k.bundle == key.bundle)
        return found[0] if found else None

    async def stat(self, key: BundleKey) -> Stored | None:
        try:
            head = await self.call("head_object", Bucket=self.bucket, Key=key.key(self.prefix))
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise StoreError(f"s3 head: {exc}") from None
        return Stored(key=key, bytes=int(head["ContentLength"]), sha256=await self._sha(key))

    async def list(self, cluster: str | None = None, date: str | None = None, incident: str | None = None,
                   node: str | None = None, *, with_sha256: bool = True) -> list[Stored]:
        for kind, val in (("cluster", cluster), ("incident", incident), ("node", node)):
            if val is not None:
                check_part(kind, val)
        # The longest prefix the filters name, the rest filtered here.
        prefix = self._base()
        for val in (cluster, date, incident):
            if val is None:
                break
            prefix += val + "/"
        else:
            if node is not None:
                prefix += node + "-"
        objs = await self._objects(prefix)

        def keep(k: BundleKey) -> bool:
            return ((cluster is None or k.cluster == cluster) and (date is None or k.date == date)
                    and (incident is None or k.incident == incident) and (node is None or k.node == node))

        return sorted(await self._collect(objs, keep, with_sha256), key=lambda s: s.key.rel)

    async def read(self, key: BundleKey) -> AsyncIterator[bytes]:
        try:
            resp = await self.call("get_object", Bucket=self.bucket, Key=key.key(self.prefix))
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                raise FileNotFoundError(key.rel) from None
            raise StoreError(f"s3 get: {exc}") from None
        body = resp["Body"]
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.run_in_executor(self._pool, body.read, _READ)
                if not data:
                    return
                yield data
        finally:
            body.close()

    # -- small objects (requests, cached analyses), through this store's client and pool -----------

    async def put_small(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        key = self._base() + check_small_rel(rel)
        extra = {"IfNoneMatch": "*"} if only_new else {}
        try:
            # If-None-Match: * makes create-only atomic across replicas on SeaweedFS, MinIO and AWS.
            await self.call("put_object", Bucket=self.bucket, Key=key, Body=data, ChecksumSHA256=_b64sha(data),
                            ContentType="application/json", **extra)
        except Exception as exc:
            if only_new and _code(exc) in ("PreconditionFailed", "412"):
                return False
            raise StoreError(f"s3 put {rel[:120]}: {type(exc).__name__}: {exc}") from None
        return True

    async def get_small(self, rel: str, max_bytes: int) -> bytes | None:
        key = self._base() + check_small_rel(rel)
        try:
            resp = await self.call("get_object", Bucket=self.bucket, Key=key)
            body = resp["Body"]
            try:
                return await asyncio.get_running_loop().run_in_executor(self._pool, body.read, max_bytes)
            finally:
                body.close()
        except Exception as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise StoreError(f"s3 get {rel[:120]}: {type(exc).__name__}: {exc}") from None

    async def list_small(self, rel_dir: str) -> list[tuple[str, str]]:
        base = self._base()
        objs = await self._objects(base + check_small_rel(rel_dir).rstrip("/") + "/")
        return sorted((o["Key"][len(base):], f"{o.get('ETag', '')}:{o.get('LastModified', '')}") for o in objs)

    async def list_small_times(self, rel_dir: str) -> list[tuple[str, float]]:
        base = self._base()
        objs = await self._objects(base + check_small_rel(rel_dir).rstrip("/") + "/")
        # LastModified is the store's clock; the listing's own Date has just measured it against ours
        return sorted((o["Key"][len(base):], self.clock.to_replica(o["LastModified"].timestamp()))
                      for o in objs if "LastModified" in o)

    async def delete_small(self, rel: str) -> None:
        key = self._base() + check_small_rel(rel)
        try:
            await self.call("delete_object", Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise StoreError(f"s3 delete {rel[:120]}: {type(exc).__name__}: {exc}") from None
