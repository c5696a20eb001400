"""``POST /v1/bundles``: stream a bundle's frames into the store, verified (proto/SPEC.md).

The body is read as it arrives (never buffered whole: ``client_max_size`` does not bound
``request.content``, so this handler enforces its own cap), hashed while received, and written to
the store as parts fill. The object becomes visible only when the end frame's length and sha256
match; every other outcome aborts the write.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import aiohttp
from aiohttp import web

from proto.frames import Chunk, End, FrameError, Hello, UploadReader
from proto.keys import BundleKey, KeyPartError

from .auth import Principal
from .errors import Refused
from .guard import authorize, refusal, route_of
from .state import PRINCIPAL, STATE, Collector
from .storage import Stored, StoreError, Writer

__all__ = ["expect_upload", "upload"]

log = logging.getLogger("railscope.collector.ingest")

#: sha256 of the received bytes runs here, off the event loop (hashlib releases the GIL), so one
#: core hashes while another receives and the store's threads send parts.
_HASH_POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="railscope-hash")
#: Chunk data is hashed in batches of at least this much: below it a thread hop costs more than
#: the hashing it moves off the loop.
_HASH_BATCH = 256 << 10
#: Framing allowed beyond --max-bundle-size on the wire: one chunk's framing is about 30 bytes and
#: senders put at least 4096 bytes in every chunk but the last (SPEC.md 1.1), so under 1/128 of the
#: data, plus the hello and end frames. Tiny chunks run into the cap instead of costing CPU per frame.
_FRAMING_SHARE = 64
_FRAMING_FIXED = 64 << 10


def wire_cap(max_bundle_bytes: int) -> int:
    """The most body bytes an upload of at most ``max_bundle_bytes`` of data may take."""
    return max_bundle_bytes + max_bundle_bytes // _FRAMING_SHARE + _FRAMING_FIXED


async def _admit(request: web.Request, take: bool = True) -> Principal:
    """Token, role and capacity: checked before ``100 Continue``, so a refusal costs no body."""
    col = request.app[STATE]
    route = route_of(request)
    if route is not None:
        await authorize(request, route)  # the expect handler runs before the guard middleware
    if col.in_flight >= col.settings.max_inflight:
        raise Refused(429, "busy", f"{col.in_flight} uploads in flight on this replica; retry later",
                      headers={"Retry-After": str(col.settings.retry_after_s)})
    principal = request[PRINCIPAL]
    cap = col.settings.node_inflight_cap
    # per (cluster, node): node names repeat across clusters, and one cluster's n1 must not spend another's
    who = (principal.cluster or "", principal.node or "")
    if principal.node is not None and col.in_flight_by_node.get(who, 0) >= cap:
        # One node trickling uploads must not hold the slots every other node needs.
        raise Refused(429, "busy", f"node {principal.node} has {cap} uploads in "
                                   "flight on this replica; retry later",
                      headers={"Retry-After": str(col.settings.retry_after_s)})
    if principal.node is not None and col.settings.max_uploads_per_node_hour > 0:
        _count_upload(col, who, take)
    if principal.node is not None:
        _check_bytes(col, who)
    return principal


def _bytes_window(col: Collector, who: tuple[str, str], now: float) -> deque[tuple[float, int]]:
    seen = col.bytes_by_node.setdefault(who, deque())
    while seen and now - seen[0][0] >= 3600:
        seen.popleft()
    return seen


def _check_bytes(col: Collector, who: tuple[str, str]) -> None:
    """429 while the bundle bytes ``who`` sent this hour reach ``--max-upload-bytes-per-node-hour``:
    the upload count alone lets one token fill the store with a few bundles of the largest size."""
    now = time.monotonic()
    seen = _bytes_window(col, who, now)
    cap = col.settings.max_upload_bytes_per_node_hour
    total = sum(n for _t, n in seen)
    if total >= cap:
        # until enough of the hour's oldest bytes leave the window to bring the node under its cap
        drop, wait = total - cap, 1
        for t, n in seen:
            drop -= n
            wait = max(1, int(3600 - (now - t)) + 1)
            if drop < 0:
                break
        raise Refused(429, "busy", f"node {who[1]} sent {total} bundle bytes in the last hour on this replica "
                                   "(--max-upload-bytes-per-node-hour); retry later", headers={"Retry-After": str(wait)})


def charge_bytes(col: Collector, who: tuple[str, str], n: int) -> None:
    """``n`` more bundle bytes received from ``who`` (chunk data as it arrives: concurrent uploads count)."""
    now = time.monotonic()
    seen = _bytes_window(col, who, now)
    if seen and now - seen[-1][0] < 1.0:  # one entry per second: the window stays small
        t, m = seen.pop()
        seen.append((t, m + n))
    else:
        seen.append((now, n))
    if len(col.bytes_by_node) > 10_000:  # nodes gone quiet: forget them
        for quiet in [k for k, q in col.bytes_by_node.items() if not q or now - q[-1][0] >= 3600]:
            del col.bytes_by_node[quiet]


def _count_upload(col: Collector, who: tuple[str, str], take: bool) -> None:
    """One more upload of ``node`` this hour (``take``; else only the check of ``Expect: 100-continue``,
    the upload itself counts), or 429 until its oldest leaves the window: one token must not fill the
    store with hundreds of bundles a second."""
    now = time.monotonic()
    cap = col.settings.max_uploads_per_node_hour
    node = who[1]
    seen = col.uploads_by_node.setdefault(who, deque())
    while seen and now - seen[0] >= 3600:
        seen.popleft()
    if len(seen) >= cap:
        wait = max(1, int(3600 - (now - seen[0])) + 1)
        raise Refused(429, "busy", f"node {node} started {cap} uploads in the last hour on this replica "
                                   "(--max-uploads-per-node-hour); retry later", headers={"Retry-After": str(wait)})
    if take:
        seen.append(now)
    if len(col.uploads_by_node) > 10_000:  # nodes gone quiet: forget them
        for quiet in [n for n, q in col.uploads_by_node.items() if not q or now - q[-1] >= 3600]:
            del col.uploads_by_node[quiet]


async def expect_upload(request: web.Request) -> web.StreamResponse | None:
    try:
        await _admit(request, take=False)
    except Refused as r:
        r.close = True
        return refusal(request, route_of(request), r)
    if request.headers.get("Expect", "").lower() != "100-continue":
        return refusal(request, route_of(request), Refused(417, "malformed", "only Expect: 100-continue is understood",
                                                           close=True))
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0
    return None


async def upload(request: web.Request) -> web.Response:
    col = request.app[STATE]
    try:
        principal = await _admit(request)
    except Refused as r:
        r.close = True  # the body is unread
        raise
    col.in_flight += 1
    node = (principal.cluster or "", principal.node) if principal.node is not None else None
    if node is not None:
        col.in_flight_by_node[node] = col.in_flight_by_node.get(node, 0) + 1
    col.metrics.in_flight.inc()
    started = time.monotonic()
    try:
        doc = await _Ingest(col, principal, request).run()
    except Refused as r:
        log.info("upload refused: %s %s", r.code, r.message)
        r.close = True
        raise
    finally:
        col.in_flight -= 1
        if node is not None:
            left = col.in_flight_by_node.get(node, 1) - 1
            if left > 0:
                col.in_flight_by_node[node] = left
            else:
                col.in_flight_by_node.pop(node, None)
        col.metrics.in_flight.dec()
        col.metrics.duration.observe(time.monotonic() - started)
    return web.json_response(doc)


class _Ingest:
    def __init__(self, col: Collector, principal: Principal, request: web.Request) -> None:
        self.col, self.principal, self.request = col, principal, request
        self.s = col.settings
        self.reader = UploadReader()
        self.hasher = hashlib.sha256()
        self.total = 0
        self.wire_cap = wire_cap(self.s.max_bundle_bytes)
        self._unhashed: list[bytes] = []
        self._unhashed_bytes = 0
        self.key: BundleKey | None = None
        self.existing: Stored | None = None
        self.writer: Writer | None = None
        self._hashing: asyncio.Future[None] | None = None

    async def _hash(self, data: bytes, flush: bool = False) -> None:
        """Queue ``data`` for the digest; hand a batch to the pool once it is worth a thread hop."""
        if data:
            self._unhashed.append(data)
            self._unhashed_bytes += len(data)
        if self._unhashed_bytes < _HASH_BATCH and not (flush and self._unhashed):
            return
        batch = self._unhashed[0] if len(self._unhashed) == 1 else b"".join(self._unhashed)
        self._unhashed, self._unhashed_bytes = [], 0
        # One update in flight per ingest, awaited before the next: the digest sees the bytes in order.
        if self._hashing is not None:
            await self._hashing
        self._hashing = asyncio.get_running_loop().run_in_executor(_HASH_POOL, self.hasher.update, batch)

    async def run(self) -> dict[str, object]:
        committed = False
        try:
            await self._receive()
            doc = await self._finish()
            committed = True
            return doc
        except StoreError as exc:
            self.col.metrics.storage_errors.labels("write").inc()
            log.error("store failed during an upload: %s", exc)
            raise Refused(503, "store_unavailable", "the store failed; retry later",
                          headers={"Retry-After": str(self.s.retry_after_s)}) from None
        finally:
            if not committed and self.writer is not None:
                # Shielded: a cancelled handler (client gone) must still abort its parts.
                await asyncio.shield(self.writer.abort())

    async def _read(self, started: float, received: int) -> bytes:
        left = self.s.max_upload_s - (time.monotonic() - started)
        try:
            data = await asyncio.wait_for(self.request.content.readany(), max(0.0, min(self.s.stall_timeout_s, left)))
        except TimeoutError:
            if left <= self.s.stall_timeout_s:
                raise Refused(408, "too_slow", f"not done after --max-upload-duration "
                                               f"({self.s.max_upload_s:g} s)") from None
            raise Refused(408, "too_slow", f"no data for {self.s.stall_timeout_s:g} s") from None
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError):
            raise Refused(400, "truncated", "the body ended before the end frame") from None
        elapsed = time.monotonic() - started
        if elapsed > self.s.max_upload_s:
            # Just above --min-rate a 4 GiB bundle would hold its slot for 18 h: a deadline too.
            raise Refused(408, "too_slow", f"not done after --max-upload-duration ({self.s.max_upload_s:g} s)")
        if elapsed > self.s.min_rate_grace_s and (received + len(data)) / elapsed < self.s.min_rate_bps:
            raise Refused(408, "too_slow", f"below {self.s.min_rate_bps} bytes/s after "
                                           f"{self.s.min_rate_grace_s:g} s")
        return data

    async def _receive(self) -> None:
        started = time.monotonic()
        received = 0
        while True:
            data = await self._read(started, received)
            if not data:
                break
            received += len(data)
            if received > self.wire_cap:
                # The framing counts too: a flood of tiny frames is bytes to receive and parse.
                raise Refused(413, "too_large", f"the body passes {self.wire_cap} bytes (--max-bundle-size "
                                                f"{self.s.max_bundle_bytes} plus framing)")
            try:
                frames = self.reader.feed(data)
            except FrameError as exc:
                raise Refused(400, exc.code, str(exc)) from None
            for frame in frames:
                if isinstance(frame, Chunk):
                    await self._chunk(frame.data)
                elif isinstance(frame, Hello):
                    await self._hello(frame)
                elif isinstance(frame, End):
                    await self._hash(b"", flush=True)
                    if self._hashing is not None:
                        await self._hashing
                    self._end(frame)
        if not self.reader.finished:
            raise Refused(400, "truncated", "the body ended before the end frame")

    async def _hello(self, hello: Hello) -> None:
        try:
            key = BundleKey.build(hello.cluster, hello.incident, hello.node, hello.bundle, hello.created)
        except KeyPartError as exc:
            raise Refused(400, "bad_key", str(exc)) from None
        self.principal.require("agent", node=key.node)  # an AuthError is a refusal: it ends the upload
        self.principal.require_cluster(key.cluster)
        self.key = key
        self.existing = await self.col.store.find(key)
        if self.existing is None:
            self.writer = await self.col.store.begin(key)

    async def _chunk(self, data: bytes) -> None:
        self.total += len(data)
        if self.total > self.s.max_bundle_bytes:
            raise Refused(413, "too_large", f"the bundle passes --max-bundle-size ({self.s.max_bundle_bytes} bytes)")
        self.col.metrics.bytes_in.inc(len(data))
        if self.principal.node is not None:
            charge_bytes(self.col, (self.principal.cluster or "", self.principal.node), len(data))
        await self._hash(data)
        if self.writer is not None:
            await self.writer.write(data)

    def _end(self, end: End) -> None:
        if end.bytes != self.total:
            raise Refused(400, "length_mismatch", f"end says {end.bytes} bytes, {self.total} arrived")
        if end.sha256 != self.hasher.hexdigest():
            raise Refused(400, "digest_mismatch", "the end frame's sha256 is not the data's")

    async def _finish(self) -> dict[str, object]:
        assert self.key is not None and self.reader.end is not None
        digest = self.reader.end.sha256
        if self.writer is not None:
            if await self.writer.commit(digest):
                self.writer = None
                self.col.metrics.stored.inc()
                log.info("stored %s (%d bytes)", self.key.rel, self.total)
                return self._answer("stored", self.key, False)
            self.writer = None
            # Another upload of the same bundle id finished first (or is finishing, on another
            # replica): judge against it once it is visible.
            for _ in range(20):
                self.existing = await self.col.store.find(self.key)
                if self.existing is not None:
                    break
                await asyncio.sleep(0.25)
        existing = self.existing
        if existing is None:
            raise StoreError("the bundle vanished while it was being stored")
        recorded = existing.sha256
        if recorded is None:
            # Stored, but the replica died before writing .sha256: hash what is there, then write it.
            h = hashlib.sha256()
            async for piece in self.col.store.read(existing.key):
                h.update(piece)
            if h.hexdigest() == digest:
                await self.col.store.write_sha256(existing.key, digest)
            recorded = h.hexdigest()
        if recorded != digest:
            raise Refused(409, "conflict", f"bundle {self.key.bundle} is stored with another sha256")
        self.col.metrics.duplicates.inc()
        return self._answer("duplicate", existing.key, True)

    def _answer(self, status: str, key: BundleKey, duplicate: bool) -> dict[str, object]:
        assert self.reader.end is not None
        return {"status": status, "duplicate": duplicate, "key": key.rel, "bytes": self.reader.end.bytes,
                "sha256": self.reader.end.sha256}
