"""Send a bundle to the collector as proto frames (proto/SPEC.md), with retries; drain the node spool.

A bundle comes from a file (the spool: it can be sent again, so every retryable failure is retried)
or from an iterator of ``tar.gz`` chunks (a capture streaming while it is produced: retried only while
none of it was consumed, which ``Expect: 100-continue`` makes the common case for 401 / 429 / 503).
Retries back off exponentially with full jitter and wait at least the collector's ``Retry-After``.

The spool is ``agent.capture.spool``'s: ``<name>.tar.gz``, the sidecar ``<name>.json`` (the hello's
keys, bytes, sha256) and ``<name>.tar.gz.sha256``, written last. :func:`drain_spool` sends bundles oldest first and deletes one only after the
collector answered stored or duplicate; one the collector refuses for good (409, 400, 413) or whose
bytes no longer match their sha256 moves to ``<spool>/rejected/``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from proto.frames import MAX_CHUNK_BYTES, Chunk, End, FrameError, Hello, chunk_head, encode

__all__ = [
    "CONTENT_TYPE",
    "DrainResult",
    "RetryPolicy",
    "UploadError",
    "UploadResult",
    "drain_spool",
    "frame_stream",
    "hello_from_spool",
    "upload",
    "upload_sync",
    "upload_while_producing",
]

log = logging.getLogger("railscope.agent.upload")

CONTENT_TYPE = "application/vnd.railscope.frames+msgpack"
_READ = MAX_CHUNK_BYTES
#: Statuses worth sending again (SPEC.md "Answers"); every other 4xx is final.
_RETRYABLE = {408, 429, 500, 502, 503, 504}

Progress = Callable[[int, int | None], None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 8
    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"), never below Retry-After."""
        jittered = rng.uniform(0, min(self.cap_s, self.base_s * (2 ** attempt)))
        if retry_after is not None:
            # Spread the agents that were all told the same Retry-After over half as long again.
            return retry_after + rng.uniform(0, max(retry_after / 2, self.base_s))
        return jittered


@dataclass(frozen=True, slots=True)
class UploadResult:
    status: str  # "stored" or "duplicate"
    key: str
    bytes: int
    sha256: str
    attempts: int

    @property
    def duplicate(self) -> bool:
        return self.status == "duplicate"


class UploadError(Exception):
    def __init__(self, message: str, status: int | None = None, code: str = "", retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.retryable, self.retry_after = status, code, retryable, retry_after


def frame_stream(hello: Hello, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The encoded frames of one upload: hello, the chunks (split to the frame bound), end."""
    yield encode(hello)
    h, n, seq = hashlib.sha256(), 0, 0
    for piece in chunks:
        for off in range(0, len(piece), MAX_CHUNK_BYTES):
            data = bytes(piece[off:off + MAX_CHUNK_BYTES])
            h.update(data)
            n += len(data)
            yield encode(Chunk(seq, data))
            seq += 1
    yield encode(End(n, h.hexdigest()))


class _Body:
    """The request body as an async generator of frames; remembers whether the source was touched."""

    def __init__(self, hello: Hello, source: Path | Iterable[bytes] | AsyncIterator[bytes],
                 expected_sha256: str | None, progress: Progress | None, total: int | None) -> None:
        self.hello, self.source, self.expected = hello, source, expected_sha256
        self.progress, self.total = progress, total
        self.started = False
        self.sent = 0
        self.sha256 = ""
        self.length = self._length()

    async def _pieces(self, h: hashlib._Hash | None) -> AsyncIterator[bytes]:
        """The source's bytes, each already added to ``h`` if given (in a worker thread where it is read there)."""
        loop = asyncio.get_running_loop()
        src = self.source
        if isinstance(src, Path):
            fh = await loop.run_in_executor(None, open, src, "rb")
            left = self.total if self.total is not None else 1 << 62

            def read() -> bytes:
                data = fh.read(min(_READ, left))
                if h is not None:
                    h.update(data)
                return data

            try:
                # Exactly the size the request announced (Content-Length): a file that shrank
                # since is a spool that changed under the upload, never sent short.
                while left and (data := await loop.run_in_executor(None, read)):
                    left -= len(data)
                    yield data
                if left and self.total is not None:
                    raise UploadError(f"{self.hello.bundle}: the spooled file shrank while it was sent",
                                      code="corrupt_spool")
            finally:
                fh.close()
        elif hasattr(src, "__aiter__"):
            async for data in src:  # type: ignore[union-attr]
                if h is not None:
                    h.update(data)
                yield data
        else:
            it = iter(src)  # type: ignore[arg-type]
            done = object()

            # The archive compresses as it is iterated: run it in a thread, not on the loop.
            def step() -> object:
                data = next(it, done)
                if data is not done and h is not None:
                    h.update(data)  # type: ignore[arg-type]
                return data

            while (data := await loop.run_in_executor(None, step)) is not done:
                yield data  # type: ignore[misc]

    def _length(self) -> int | None:
        """The body's exact size for a file (its frames follow from its size), else None (chunked)."""
        if not isinstance(self.source, Path) or not self.total:
            return None
        size, seq, n = self.total, 0, len(encode(self.hello))
        for off in range(0, size, MAX_CHUNK_BYTES):
            k = min(MAX_CHUNK_BYTES, size - off)
            n += len(chunk_head(seq, k)) + k
            seq += 1
        return n + len(encode(End(size, "0" * 64)))  # a sha256 is 64 hex digits whatever it is

    async def frames(self) -> AsyncIterator[bytes]:
        self.started = True
        yield encode(self.hello)
        n, seq = 0, 0
        # A spooled file's digest is known (its .sha256, written when the capture hashed the bytes
        # it packed): it goes in the end frame as it is, and the collector, which hashes what it
        # receives, refuses the upload (digest_mismatch) if the file changed since. The file is
        # hashed here only then, to tell a corrupt spool from a corrupted transfer (see upload()).
        h: hashlib._Hash | None = hashlib.sha256() if self.expected is None else None
        sized = self.length is not None
        async for piece in self._pieces(h):
            for off in range(0, len(piece), MAX_CHUNK_BYTES):
                data = piece[off:off + MAX_CHUNK_BYTES]
                n += len(data)
                if sized:
                    # With a Content-Length nothing is re-framed on the way: the head, then the
                    # bytes as read, no packed copy of each chunk and no HTTP chunk around it.
                    yield chunk_head(seq, len(data))
                    yield data
                else:
                    yield encode(Chunk(seq, bytes(data)))
                seq += 1
                self.sent = n
                if self.progress:
                    self.progress(n, self.total)
        self.sha256 = h.hexdigest() if h is not None else str(self.expected)
        yield encode(End(n, self.sha256))


async def _judge_mismatch(hello: Hello, source: Path, expected: str, exc: UploadError) -> UploadError:
    """The collector found the bytes it received do not match the spool's sha256: the file or the wire?

    The file is hashed once, now (rare: a spool that changed on disk, or bytes changed in transit).
    A file that no longer matches its .sha256 must never be stored as the bundle: final, set aside.
    A file that still matches was damaged on the way: sent again.
    """
    def digest() -> str:
        h = hashlib.sha256()
        with open(source, "rb") as fh:
            while data := fh.read(_READ):
                h.update(data)
        return h.hexdigest()

    try:
        actual = await asyncio.get_running_loop().run_in_executor(None, digest)
    except OSError as err:
        return UploadError(f"{hello.bundle}: the spooled file cannot be read: {err}", code="corrupt_spool")
    if actual != expected:
        return UploadError(f"{hello.bundle}: bytes do not match their .sha256 (spool corrupt)", code="corrupt_spool")
    return UploadError(f"{exc} (the spooled file matches its .sha256: damaged in transit, sent again)",
                       status=exc.status, code=exc.code, retryable=True)


def _token(token: str | None, token_file: str | None) -> str | None:
    if token_file:
        # Read on every attempt: a projected ServiceAccount token is rotated in place.
        return Path(token_file).read_text().strip()
    return token


async def _attempt(session: aiohttp.ClientSession, url: str, body: _Body, token: str | None,
                   timeout: aiohttp.ClientTimeout) -> dict:
    headers = {"Content-Type": CONTENT_TYPE}
    length = body.length
    if length is not None:
        headers["Content-Length"] = str(length)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with session.post(url.rstrip("/") + "/v1/bundles", data=body.frames(), headers=headers,
                                expect100=True, timeout=timeout) as resp:
            try:
                doc = await resp.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                doc = {"error": "bad_answer", "message": (await resp.text())[:200]}
            if resp.status == 200:
                return doc
            ra = resp.headers.get("Retry-After")
            retry_after = float(ra) if ra and ra.isdigit() else None
            raise UploadError(f"collector answered {resp.status} {doc.get('error', '')}: {doc.get('message', '')}",
                              status=resp.status, code=str(doc.get("error", "")),
                              retryable=resp.status in _RETRYABLE, retry_after=retry_after)
    except UploadError:
        raise
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, UploadError):
            raise cause from None
        raise UploadError(f"collector unreachable: {type(exc).__name__}: {exc}", retryable=True) from None


async def upload(url: str, hello: Hello, source: str | Path | Iterable[bytes] | AsyncIterator[bytes], *,
                 token: str | None = None, token_file: str | None = None, expected_sha256: str | None = None,
                 retry: RetryPolicy | None = None, progress: Progress | None = None,
                 session: aiohttp.ClientSession | None = None, rng: random.Random | None = None,
                 timeout: aiohttp.ClientTimeout | None = None) -> UploadResult:
    """Send one bundle; retried per ``retry``; :class:`UploadError` when it cannot be stored."""
    retry = retry or RetryPolicy()
    rng = rng or random.Random()
    timeout = timeout or aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
    if isinstance(source, str):
        source = Path(source)
    total = source.stat().st_size if isinstance(source, Path) else None
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        for attempt in range(retry.attempts):
            body = _Body(hello, source, expected_sha256, progress, total)
            try:
                doc = await _attempt(session, url, body, _token(token, token_file), timeout)
                return UploadResult(status=str(doc.get("status")), key=str(doc.get("key")),
                                    bytes=int(doc.get("bytes", 0)), sha256=str(doc.get("sha256")),
                                    attempts=attempt + 1)
            except UploadError as exc:
                if exc.code == "digest_mismatch" and expected_sha256 is not None and isinstance(source, Path):
                    exc = await _judge_mismatch(hello, source, expected_sha256, exc)
                resendable = isinstance(source, Path) or not body.started
                if not exc.retryable or not resendable or attempt + 1 == retry.attempts:
                    raise exc from None
                wait = retry.delay(attempt, exc.retry_after, rng)
                log.info("upload of %s: %s; again in %.1f s", hello.bundle, exc, wait)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")
    finally:
        if own:
            await session.close()


def upload_sync(url: str, hello: Hello, source: str | Path | Iterable[bytes], **kwargs: object) -> UploadResult:
    """:func:`upload` for a caller without an event loop (the CLI)."""
    return asyncio.run(upload(url, hello, source, **kwargs))  # type: ignore[arg-type]


@dataclass
class DrainResult:
    sent: list[UploadResult] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    left: int = 0  # bundles still in the spool (the collector unreachable)
    error: str = ""


#: Key parts for a spooled bundle that names no cluster or incident (a capture outside any incident).
DEFAULT_CLUSTER = "default"
NO_INCIDENT = "unassigned"
#: Bundles kept in ``<spool>/rejected/`` for a person; older ones are removed.
KEEP_REJECTED = 16


def hello_from_spool(meta: dict[str, object]) -> Hello:
    """The hello of a spooled bundle, from its sidecar (``agent.capture.spool``: the keys of
    ``Hello.to_json``); a capture that names no cluster or incident goes under the defaults."""
    doc = dict(meta)
    doc["cluster"] = doc.get("cluster") or DEFAULT_CLUSTER
    doc["incident"] = doc.get("incident") or NO_INCIDENT
    for key in ("reason", "agent", "plan"):
        doc[key] = doc.get(key) or ""
    return Hello.from_json(doc)


def _reject(root: Path, files: list[str], why: str) -> None:
    dest = root / "rejected"
    dest.mkdir(mode=0o700, exist_ok=True)
    for f in files:
        if os.path.exists(f):
            os.replace(f, dest / os.path.basename(f))
    (dest / (os.path.basename(files[0]) + ".why")).write_text(why + "\n")
    log.error("spooled bundle %s set aside in %s: %s", os.path.basename(files[0]), dest, why)
    kept = sorted(dest.glob("*.tar.gz"), key=lambda p: p.stat().st_mtime)
    for old in kept[:-KEEP_REJECTED]:
        for f in (old, old.with_name(old.name + ".sha256"), old.with_name(old.name + ".why"),
                  old.with_name(old.name[: -len(".tar.gz")] + ".json")):
            f.unlink(missing_ok=True)


async def drain_spool(spool: object, url: str, *, token: str | None = None, token_file: str | None = None,
                      retry: RetryPolicy | None = None, session: aiohttp.ClientSession | None = None,
                      rng: random.Random | None = None) -> DrainResult:
    """Send every complete bundle of the spool (a ``Spool`` or its directory), oldest first.

    A bundle is removed only after the collector answered stored or duplicate; one it refuses for good
    (or whose bytes no longer match their digest) moves to ``rejected/``; the first bundle that
    cannot reach the collector ends the drain, leaving it and the rest for the next one.
    """
    from agent.capture.spool import Spool

    if not isinstance(spool, Spool):
        # Listing only: the cap is the capture's business.
        spool = Spool(str(spool), max_bytes=1 << 62)
    root = Path(spool.root)
    result = DrainResult()
    entries = spool.entries()
    for i, entry in enumerate(entries):
        files = [entry.bundle, entry.sha256_file, entry.sidecar]
        name = os.path.basename(entry.bundle)
        try:
            hello = hello_from_spool(entry.meta)
            expected = str(entry.meta.get("sha256") or "") or Path(entry.sha256_file).read_text().split()[0]
        except (OSError, IndexError, FrameError) as exc:
            _reject(root, files, f"unreadable sidecar or .sha256: {exc}")
            result.rejected.append(name)
            continue
        try:
            res = await upload(url, hello, Path(entry.bundle), token=token, token_file=token_file,
                               expected_sha256=expected, retry=retry, session=session, rng=rng)
        except UploadError as exc:
            if exc.retryable:
                result.left = len(entries) - i
                result.error = str(exc)
                return result
            _reject(root, files, str(exc))
            result.rejected.append(name)
            continue
        spool.remove(entry)
        result.sent.append(res)
    return result


_END = object()


async def upload_while_producing(url: str, hello: Hello, produce: Callable[[Callable[[bytes], None]], object],
                                 **kwargs: object) -> tuple[object, UploadResult | UploadError]:
    """Run ``produce(on_chunk)`` (a capture writing its file and handing each compressed chunk to
    ``on_chunk``) in a thread and stream the chunks to the collector as they come.

    The queue between them is bounded: a slow collector slows the archive, never fills memory. If
    the upload fails, the capture still finishes (its file is the bundle to send again); the error
    is returned, not raised, next to what ``produce`` returned.
    """
    import queue
    import threading

    q: queue.Queue[object] = queue.Queue(maxsize=16)
    # Set once the upload failed: the chunks go nowhere from then on, and every thread waiting on
    # the queue (the producer to put, a read of the aborted request body to get) stops waiting.
    abandoned = threading.Event()

    def on_chunk(data: bytes) -> None:
        while not abandoned.is_set():
            try:
                q.put(bytes(data), timeout=0.1)
                return
            except queue.Full:
                continue

    def run() -> object:
        try:
            return produce(on_chunk)
        finally:
            while not abandoned.is_set():
                try:
                    q.put(_END, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def chunks() -> Iterator[bytes]:
        # A refusal after the body started (a 403 is answered once the hello is read) leaves the
        # request body's last read waiting here: it must return, or asyncio.run() waits for it forever.
        while True:
            try:
                item = q.get(timeout=0.1)
            except queue.Empty:
                if abandoned.is_set():
                    return
                continue
            if item is _END:
                return
            yield item  # type: ignore[misc]

    loop = asyncio.get_running_loop()
    produced = loop.run_in_executor(None, run)
    try:
        res: UploadResult | UploadError = await upload(url, hello, chunks(), **kwargs)  # type: ignore[arg-type]
    except UploadError as exc:
        abandoned.set()
        res = exc
    return await produced, res
