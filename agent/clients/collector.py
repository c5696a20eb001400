"""The collector's API (proto/SPEC.md), from the agent and the CLI: one client with one retry policy.

- uploads (``POST /v1/bundles``): a bundle from a file (the spool: it can be sent again, so every
  retryable failure is retried; ``agent.capture.upload.drain_spool`` sends the spool through this
  client) or from an iterator of ``tar.gz`` chunks (a capture streaming while it is produced: retried
  only while none of it was consumed, which ``Expect: 100-continue`` makes the common case for 401 /
  429 / 503);
- capture requests: the long poll, ``done``, queueing one (operator), showing one;
- bundles: list, get (checked against the stored ``.sha256``), verify.

Retries back off exponentially with full jitter and wait at least the collector's ``Retry-After``
(:class:`RetryPolicy`); a 4xx other than 408 and 429 is final. The token file is read before every
request (:func:`proto.tokens.read_token`): a projected ServiceAccount token rotates in place.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import random
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from agent.safejson import loads_bounded
from proto.frames import MAX_CHUNK_BYTES, Chunk, End, Hello, chunk_head, encode
from proto.keys import KeyPartError, parse_rel
from proto.requests import DEFAULT_PLAN, MAX_REQUEST_BYTES, MAX_SERVED_PER_POLL, POLL_WAIT_S
from proto.tokens import TokenFileError, read_token

__all__ = [
    "CALL_RETRY",
    "CONTENT_TYPE",
    "CallOutcomes",
    "CollectorClient",
    "CollectorError",
    "RetryPolicy",
    "UploadResult",
    "frame_stream",
]

log = logging.getLogger("railscope.agent.collector_client")

CONTENT_TYPE = "application/vnd.railscope.frames+msgpack"
_READ = MAX_CHUNK_BYTES
#: Statuses worth sending again (SPEC.md "Answers"); every other 4xx is final.
_RETRYABLE = {408, 429, 500, 502, 503, 504}
#: A JSON answer larger than this is not the collector's (a listing of every bundle of a big cluster fits).
MAX_ANSWER_BYTES = 64 << 20
#: A poll's answer: at most MAX_SERVED_PER_POLL requests, each at most MAX_REQUEST_BYTES, and room
#: for the answer's own keys. Bounded so that decoding it builds few objects: 4 MiB of ``{},`` were
#: 1.4 M dicts, the agent's loop held seconds and its pod past its memory limit.
MAX_POLL_BYTES = MAX_SERVED_PER_POLL * MAX_REQUEST_BYTES + 4096
#: The answer to an upload or to a call about one request: one small document. The agent's memory
#: limit (192Mi in the chart) must hold whatever a collector, or something answering as one, sends.
MAX_SMALL_ANSWER_BYTES = 64 << 10
#: A Retry-After beyond this is taken as this (999999999 would park an agent for 45 years).
MAX_RETRY_AFTER_S = 600.0
#: Nesting deeper than this in a collector's answer is no answer of the collector's.
_MAX_ANSWER_DEPTH = 32
_DOWNLOAD_CHUNK = 1 << 20

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
            retry_after = min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
            # Spread the agents that were all told the same Retry-After over half as long again.
            return retry_after + rng.uniform(0, max(retry_after / 2, self.base_s))
        return jittered


#: The policy of the small calls (requests, listings, downloads): a person or a loop is waiting.
CALL_RETRY = RetryPolicy(attempts=3, base_s=0.5, cap_s=5.0)


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


class CollectorError(Exception):
    """The collector refused or could not be reached; the message is one line for a person."""

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
                    raise CollectorError(f"{self.hello.bundle}: the spooled file shrank while it was sent",
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


async def _judge_mismatch(hello: Hello, source: Path, expected: str, exc: CollectorError) -> CollectorError:
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
        return CollectorError(f"{hello.bundle}: the spooled file cannot be read: {err}", code="corrupt_spool")
    if actual != expected:
        return CollectorError(f"{hello.bundle}: bytes do not match their .sha256 (spool corrupt)",
                              code="corrupt_spool")
    return CollectorError(f"{exc} (the spooled file matches its .sha256: damaged in transit, sent again)",
                          status=exc.status, code=exc.code, retryable=True)


async def _read(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The answer's body up to ``limit`` bytes and one more, whatever pieces it arrives in (a
    ``StreamReader.read(n)`` returns what is there, not ``n`` bytes)."""
    buf = bytearray()
    while len(buf) <= limit:
        piece = await resp.content.read(min(1 << 16, limit + 1 - len(buf)))
        if not piece:
            break
        buf += piece
    return bytes(buf)


async def _refusal(resp: aiohttp.ClientResponse) -> CollectorError:
    """A non-2xx answer as an error: the SPEC's ``{"error", "message"}``, or the start of whatever came."""
    raw = await _read(resp, 64 * 1024)
    try:
        doc = loads_bounded(raw.decode("utf-8"), "the collector's answer", _MAX_ANSWER_DEPTH)
        if not isinstance(doc, dict):
            raise ValueError
        code, message = str(doc.get("error", "")), str(doc.get("message", ""))
    except (ValueError, RecursionError):  # RecursionError: '[' nested past the interpreter's limit
        code, message = "bad_answer", raw[:200].decode("utf-8", "replace").strip() or (resp.reason or "")
    ra = resp.headers.get("Retry-After")
    # The answer is shown to a person and logged: no terminal escape of the collector's reaches either.
    code, message = _printable(code)[:80], _printable(message)[:300]
    return CollectorError(f"collector answered {resp.status} {code}: {message}".replace(" :", ":"),
                          status=resp.status, code=code, retryable=resp.status in _RETRYABLE,
                          retry_after=float(ra) if ra and ra.isdigit() else None)


async def _json_answer(resp: aiohttp.ClientResponse, limit: int = MAX_ANSWER_BYTES) -> dict[str, Any]:
    raw = await _read(resp, limit)
    if len(raw) > limit:
        raise CollectorError(f"collector answer larger than {limit} bytes", status=resp.status, code="bad_answer")
    try:
        doc = loads_bounded(raw.decode("utf-8"), "the collector's answer", _MAX_ANSWER_DEPTH)
    except (ValueError, RecursionError):  # RecursionError: '[' nested past the interpreter's limit
        raise CollectorError(f"collector answered {resp.status} with no JSON: {raw[:200]!r}", status=resp.status,
                             code="bad_answer") from None
    if not isinstance(doc, dict):
        raise CollectorError(f"collector answered {resp.status} with no JSON object", status=resp.status,
                             code="bad_answer")
    return doc


def _printable(text: str) -> str:
    """``text`` with control characters (a terminal's escapes among them) shown as ``\\xNN``."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _unreachable(url: str, exc: BaseException, *, fail_fast: bool = False, ca_file: str | None = None,
                 ) -> CollectorError:
    """Why ``url`` could not be reached, with what to check where the cause says it.

    A certificate that does not verify, TLS spoken to a plain-HTTP port (or plain HTTP to a TLS-only one),
    a refused connection and a name that does not resolve do not mend in seconds: with ``fail_fast`` (a
    person at a terminal) they are final at once. The agent's uploads keep retrying them: a collector
    that restarts refuses connections for a while.
    """
    hint, permanent = "", False
    plain = url.startswith("http://")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError) or isinstance(exc, ssl.SSLCertVerificationError):
        permanent = True
        hint = (f"the collector's certificate does not verify against --collector-ca-file {ca_file}: is it the CA "
                f"that issued the collector's certificate (its ca.crt)?" if ca_file else
                "the collector's certificate is not signed by a CA this machine trusts: give its CA with "
                "--collector-ca-file FILE (or RAILSCOPE_COLLECTOR_CA_FILE)")
    elif isinstance(exc, aiohttp.ClientConnectorSSLError | ssl.SSLError):
        permanent = True
        hint = "no TLS answered there: is the collector plain HTTP (http://)? or the port another program's?"
    elif isinstance(exc, aiohttp.ClientConnectorDNSError):
        permanent = True
        hint = "the collector's host name does not resolve: is the URL right?"
    elif isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError):
        permanent = True
        hint = "nothing listens there: is the collector running, and the port right?"
    elif plain and isinstance(exc, aiohttp.ServerDisconnectedError):
        # A TLS-only collector drops a plain-HTTP request unanswered.
        permanent = True
        hint = "the collector closed the connection unanswered: does it serve https:// only?"
    text = f"collector unreachable: cannot reach {url}: {type(exc).__name__}: {exc}"
    if hint:
        text += f" ({hint})"
    return CollectorError(text, code="unreachable", retryable=not (permanent and fail_fast))


class CallOutcomes:
    """How each call to the collector ended, counted per attempt: ``(call, outcome)`` -> count.

    ``call`` is ``upload``, ``poll``, ``done``, ``queue``...; ``outcome`` is ``ok`` (an upload: ``stored``
    or ``duplicate``), the HTTP status of a refusal (``403``: a token bound to another node),
    ``unreachable``, ``token_file`` (the token file cannot be used) or ``bad_answer``. A bounded set: a
    few calls times a few statuses. The agent exports it (``railscope_agent_collector_calls_total``), so
    a refusal is a series an alert can see, not only a log line. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, call: str, outcome: str) -> None:
        with self._lock:
            self._counts[(call, outcome)] = self._counts.get((call, outcome), 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


def outcome_of(exc: CollectorError) -> str:
    """The outcome word of a failed call (see :class:`CallOutcomes`)."""
    if exc.status is not None and exc.status != 200:
        return str(exc.status)
    if exc.code in ("token_file", "bad_answer", "digest_mismatch", "short"):
        return exc.code
    return "unreachable" if exc.status is None else "bad_answer"


class CollectorClient:
    """One collector, one token file, one session: every call of the collector's API.

    Use it as ``async with CollectorClient(url, token_file=...) as c``; given a ``session``, it uses that
    one and leaves it open.
    """

    def __init__(self, url: str, *, token_file: str | None = None, token: str | None = None,
                 retry: RetryPolicy | None = None, call_retry: RetryPolicy = CALL_RETRY,
                 session: aiohttp.ClientSession | None = None, rng: random.Random | None = None,
                 timeout: aiohttp.ClientTimeout | None = None, token_flag: str = "token file",
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 outcomes: CallOutcomes | None = None, ca_file: str | None = None, fail_fast: bool = False,
                 deadline_s: float | None = None, on_retry: Callable[[str], None] | None = None,
                 ca_optional: bool = False) -> None:
        if "://" not in url:
            url = "http://" + url
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.token = token
        self.token_flag = token_flag
        self.retry = retry or RetryPolicy()
        self.call_retry = call_retry
        self.rng = rng or random.Random()
        self.timeout = timeout or aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
        self._session = session
        self._own = session is None
        self._sleep = sleep
        # The CA that issued the collector's certificate (--collector-ca-file, RAILSCOPE_COLLECTOR_CA_FILE);
        # without one an https collector is verified against the system's CAs.
        self.ca_file = ca_file or os.environ.get("RAILSCOPE_COLLECTOR_CA_FILE") or None
        #: the agent daemon's CA file may be absent: the chart mounts the ca.crt of the collector's TLS
        #: Secret optional, and a Secret of `kubectl create secret tls` or an ACME issuer has none; then
        #: the system's CAs verify the collector (a file that exists is still the only CA trusted)
        self.ca_optional = ca_optional
        #: where every attempt's outcome is counted (the agent's; None: not counted)
        self.outcomes = outcomes
        # A person at a terminal (the CLI): an error that waiting cannot mend (a certificate, a refused
        # connection, a name that does not resolve) ends the command at once; transient ones are retried
        # until ``deadline_s`` (every retry said to ``on_retry``, one line each), not a fixed count.
        self.fail_fast = fail_fast
        self.deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.on_retry = on_retry

    def _unreachable(self, exc: BaseException) -> CollectorError:
        return _unreachable(self.url, exc, fail_fast=self.fail_fast, ca_file=self.ca_file)

    def _hinted(self, err: CollectorError) -> CollectorError:
        """A final refusal with what to check: the token for 401 / 403, the URL or key for 404."""
        hint = {401: f"is {self.token_flag} a token this collector knows?",
                403: (f"is {self.token_flag} the agent token of this node, in the collector's cluster?"
                      if self.token_flag == "--collector-token-file" else
                      f"may the token of {self.token_flag} do this (an operator token for bundles, reports "
                      f"and capture requests)?"),
                404: "is the URL the collector's (scheme, host and port, no path) and the key as "
                     "`railscope bundles ls` prints it?"}.get(err.status or 0)
        if not hint or not self.fail_fast:
            return err
        return CollectorError(f"{err} ({hint})", status=err.status, code=err.code, retryable=err.retryable,
                              retry_after=err.retry_after)

    def _backoff(self, attempt: int, err: CollectorError, retry: RetryPolicy) -> float | None:
        """How long to wait before attempt ``attempt + 2`` after ``err``, or None: give up.

        Without a deadline, ``retry.attempts`` bounds the attempts; with one, the deadline does (a retry
        whose wait ends past it is not made), and each retry is said to ``on_retry``.
        """
        if not err.retryable:
            return None
        wait = retry.delay(attempt, err.retry_after, self.rng)
        if self.deadline is None:
            return None if attempt + 1 >= retry.attempts else wait
        left = self.deadline - time.monotonic()
        if wait >= left:
            return None
        if self.on_retry is not None:
            until = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
            self.on_retry(f"{err}; attempt {attempt + 1} failed, next in {wait:.1f} s, until {until}")
        return wait

    def _given_up(self, attempt: int, err: CollectorError) -> CollectorError:
        """The error that ends the retries: hinted when final, with the deadline when that ended them."""
        if not err.retryable:
            return self._hinted(err)
        if self.deadline is None:
            return err
        return CollectorError(f"{err} (gave up after {attempt + 1} attempt(s): --deadline {self.deadline_s:g} s)",
                              status=err.status, code=err.code, retryable=True, retry_after=err.retry_after)

    def _attempt_timeout(self, timeout: aiohttp.ClientTimeout | None) -> aiohttp.ClientTimeout:
        """``timeout`` (the client's by default), its connect and read bounded by the deadline's time left."""
        timeout = timeout or self.timeout
        if self.deadline is None:
            return timeout
        left = max(self.deadline - time.monotonic(), 0.5)
        return aiohttp.ClientTimeout(total=timeout.total, sock_connect=min(timeout.sock_connect or left, left),
                                     sock_read=min(timeout.sock_read or left, left))

    def _count(self, call: str, outcome: str) -> None:
        if self.outcomes is not None:
            self.outcomes.add(call, outcome)

    async def __aenter__(self) -> CollectorClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    def _attempts(self, retry: RetryPolicy) -> Iterator[int]:
        """The attempt numbers: the policy's count, or without end where a deadline bounds them."""
        if self.deadline is None:
            yield from range(retry.attempts)
        else:
            yield from itertools.count()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            ssl_ctx: ssl.SSLContext | bool = True
            if self.ca_file and self.ca_optional and not os.path.exists(self.ca_file):
                log.warning("collector CA file %s is absent: verifying %s against the system's CAs",
                            self.ca_file, self.url)
                ssl_ctx = ssl.create_default_context()
            elif self.ca_file:
                try:
                    ssl_ctx = ssl.create_default_context(cafile=self.ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise CollectorError(f"--collector-ca-file {self.ca_file}: {exc}", code="ca_file") from None
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx))
        return self._session

    def headers(self) -> dict[str, str]:
        """The Authorization header, the token file read now; a bad token file is a final error."""
        token = self.token
        if self.token_file:
            try:
                token = read_token(self.token_file, self.token_flag)
            except TokenFileError as exc:
                raise CollectorError(str(exc), code="token_file") from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    # -- small calls --------------------------------------------------------------------------

    async def _call(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
                    ok: tuple[int, ...] = (200,), limit: int = MAX_ANSWER_BYTES,
                    timeout: aiohttp.ClientTimeout | None = None, retry: RetryPolicy | None = None,
                    call: str = "call") -> dict[str, Any]:
        """One JSON call, retried per ``retry`` (the call policy by default) on a retryable failure;
        each attempt's outcome counted under ``call``."""
        retry = retry or self.call_retry
        for attempt in self._attempts(retry):
            try:
                async with self.session.request(method, self.url + path, json=body, headers=self.headers(),
                                                timeout=self._attempt_timeout(timeout)) as resp:
                    if resp.status not in ok:
                        raise await _refusal(resp)
                    doc = await _json_answer(resp, limit)
                    self._count(call, "ok")
                    return doc
            except CollectorError as exc:
                err = exc
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                err = self._unreachable(exc)
            self._count(call, outcome_of(err))
            wait = self._backoff(attempt, err, retry)
            if wait is None:
                raise self._given_up(attempt, err)
            await self._sleep(wait)
        raise AssertionError("unreachable")

    async def poll(self, node: str, wait_s: float = POLL_WAIT_S) -> list[Any]:
        """``GET /v1/requests``: the node's pending request documents, held up to ``wait_s`` by the collector.

        Not retried here: the poll loop backs off between polls.
        """
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=wait_s + 30)
        doc = await self._call("GET", f"/v1/requests?{urlencode({'node': node, 'wait': f'{wait_s:g}'})}",
                               limit=MAX_POLL_BYTES, timeout=timeout, retry=RetryPolicy(attempts=1), call="poll")
        got = doc.get("requests")
        if not isinstance(got, list):
            return []
        if len(got) > MAX_SERVED_PER_POLL:
            # Refused whole, before a request is built: the poll loop says so in one line.
            raise CollectorError(f"{self.url}: a poll answered {len(got)} requests, more than a collector "
                                 f"serves ({MAX_SERVED_PER_POLL}): refused", code="bad_answer")
        return got

    async def done(self, node: str, rid: str, bundle: str | None = None, *, reused: bool = False) -> dict[str, Any]:
        """``POST /v1/requests/<node>/<id>/done``: the request's bundle is stored; the request, done."""
        body: dict[str, Any] = {"bundle": bundle} if bundle else {}
        if reused:
            body["reused"] = True
        return _request_of(await self._call("POST", f"/v1/requests/{quote(node)}/{quote(rid)}/done", body=body,
                                            limit=MAX_SMALL_ANSWER_BYTES, call="done"))

    async def queue(self, node: str, incident: str, *, plan: str = DEFAULT_PLAN,
                    params: Mapping[str, Any] | None = None, cluster: str | None = None) -> dict[str, Any]:
        """``POST /v1/requests`` (operator): a capture of ``node`` of ``cluster`` (None: the collector's
        default) for ``incident``; the request document."""
        body = {"node": node, "incident": incident, "plan": plan, "params": dict(params or {}),
                **({"cluster": cluster} if cluster else {})}
        return _request_of(await self._call("POST", "/v1/requests", body=body, ok=(200, 201),
                                            limit=MAX_SMALL_ANSWER_BYTES, call="queue"))

    async def show(self, node: str, rid: str, cluster: str | None = None) -> dict[str, Any]:
        """``GET /v1/requests/<node>/<id>``: the request document (of ``cluster``; None: the default)."""
        query = f"?{urlencode({'cluster': cluster})}" if cluster else ""
        return _request_of(await self._call("GET", f"/v1/requests/{quote(node)}/{quote(rid)}{query}",
                                            limit=MAX_SMALL_ANSWER_BYTES))

    async def wait_done(self, node: str, rid: str, timeout_s: float, poll_s: float = 2.0,
                        cluster: str | None = None) -> dict[str, Any]:
        """The request once done (its ``bundle`` the stored key), or :class:`CollectorError` after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (req := await self.show(node, rid, cluster)).get("state") != "done":
            if loop.time() > deadline:
                raise CollectorError(f"request {rid} not done after {timeout_s:.0f} s (is the agent of {node} "
                                     f"running with --collector?)", code="timeout")
            await self._sleep(poll_s)
        return req

    async def list(self, **filters: str | None) -> dict[str, Any]:
        """``GET /v1/bundles``: the stored bundles, filtered by cluster, date, incident or node."""
        q = {k: v for k, v in filters.items() if v}
        return await self._call("GET", "/v1/bundles" + ("?" + urlencode(q) if q else ""))

    async def verify(self, key: str) -> dict[str, Any]:
        """``POST /v1/bundles/<key>/verify``: the collector re-hashes the stored object."""
        return await self._call("POST", f"/v1/bundles/{_key_path(key)}/verify")

    async def get(self, key: str, into: str | Path, *, progress: Progress | None = None) -> tuple[Path, str]:
        """Download the bundle ``key`` and its ``.sha256`` into the directory ``into``; (the bundle's path,
        its sha256). The bundle appears under its name only once its bytes hash to the recorded sha256."""
        url_path = _key_path(key)
        into = Path(into)
        into.mkdir(parents=True, exist_ok=True)
        name = key.rsplit("/", 1)[-1]
        sha_line = (await self._bytes(f"/v1/bundles/{url_path}.sha256", 4096)).decode("ascii", "replace")
        words = sha_line.split()
        recorded = words[0] if words else ""
        tmp = into / f".{name}.part"
        for attempt in self._attempts(self.call_retry):
            try:
                digest, n, total = await self._download(f"/v1/bundles/{url_path}", tmp, progress)
                break
            except CollectorError as exc:
                tmp.unlink(missing_ok=True)
                wait = self._backoff(attempt, exc, self.call_retry)
                if wait is None:
                    raise self._given_up(attempt, exc) from None
                await self._sleep(wait)
            except BaseException:  # a full disk, a cancelled command: no half file left behind
                tmp.unlink(missing_ok=True)
                raise
        if total is not None and n != total:
            tmp.unlink(missing_ok=True)
            raise CollectorError(f"{name}: short download ({n} of {total} bytes)", code="short")
        if digest != recorded:
            tmp.unlink(missing_ok=True)
            raise CollectorError(f"{name}: sha256 {digest} is not the recorded {recorded or 'one'}",
                                 code="digest_mismatch")
        os.replace(tmp, into / name)
        # 0600 like a capture's bundle: it holds topology, pod names and kernel logs.
        fd = os.open(into / (name + ".sha256"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(sha_line)
        return into / name, recorded

    async def _bytes(self, path: str, limit: int) -> bytes:
        for attempt in self._attempts(self.call_retry):
            try:
                async with self.session.get(self.url + path, headers=self.headers(),
                                            timeout=self._attempt_timeout(None)) as resp:
                    if resp.status != 200:
                        raise await _refusal(resp)
                    return (await _read(resp, limit))[:limit]
            except CollectorError as exc:
                err = exc
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                err = self._unreachable(exc)
            wait = self._backoff(attempt, err, self.call_retry)
            if wait is None:
                raise self._given_up(attempt, err)
            await self._sleep(wait)
        raise AssertionError("unreachable")

    async def _download(self, path: str, dest: Path, progress: Progress | None) -> tuple[str, int, int | None]:
        loop = asyncio.get_running_loop()
        h, n = hashlib.sha256(), 0
        try:
            async with self.session.get(self.url + path, headers=self.headers(),
                                        timeout=self._attempt_timeout(None)) as resp:
                if resp.status != 200:
                    raise await _refusal(resp)
                total = resp.content_length
                def create() -> Any:
                    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.fchmod(fd, 0o600)  # a .part left by an earlier run keeps no wider mode
                    return os.fdopen(fd, "wb")

                fh = await loop.run_in_executor(None, create)
                try:
                    async for data in resp.content.iter_chunked(_DOWNLOAD_CHUNK):
                        await loop.run_in_executor(None, fh.write, data)
                        h.update(data)
                        n += len(data)
                        if progress:
                            progress(n, total)
                    await loop.run_in_executor(None, lambda: (fh.flush(), os.fsync(fh.fileno())))
                finally:
                    fh.close()
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            raise self._unreachable(exc) from None
        return h.hexdigest(), n, total

    # -- uploads ------------------------------------------------------------------------------

    async def _attempt(self, body: _Body) -> dict[str, Any]:
        headers = {"Content-Type": CONTENT_TYPE, **self.headers()}
        if body.length is not None:
            headers["Content-Length"] = str(body.length)
        try:
            async with self.session.post(self.url + "/v1/bundles", data=body.frames(), headers=headers,
                                         expect100=True, timeout=self.timeout) as resp:
                if resp.status != 200:
                    raise await _refusal(resp)
                try:
                    return await _json_answer(resp, MAX_SMALL_ANSWER_BYTES)
                except CollectorError as exc:
                    raise CollectorError(str(exc), status=200, code="bad_answer", retryable=True) from None
        except CollectorError:
            raise
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, CollectorError):
                raise cause from None
            raise self._unreachable(exc) from None

    async def upload(self, hello: Hello, source: str | Path | Iterable[bytes] | AsyncIterator[bytes], *,
                     expected_sha256: str | None = None, progress: Progress | None = None,
                     retry: RetryPolicy | None = None) -> UploadResult:
        """Send one bundle; retried per the upload policy; :class:`CollectorError` when it cannot be stored."""
        retry = retry or self.retry
        if isinstance(source, str):
            source = Path(source)
        total = source.stat().st_size if isinstance(source, Path) else None
        for attempt in self._attempts(retry):
            body = _Body(hello, source, expected_sha256, progress, total)
            try:
                doc = await self._attempt(body)
                res = UploadResult(status=str(doc.get("status")), key=str(doc.get("key")),
                                   bytes=int(doc.get("bytes", 0)), sha256=str(doc.get("sha256")),
                                   attempts=attempt + 1)
                self._count("upload", "duplicate" if res.duplicate else "ok")
                return res
            except CollectorError as exc:
                self._count("upload", outcome_of(exc))
                if exc.code == "digest_mismatch" and expected_sha256 is not None and isinstance(source, Path):
                    exc = await _judge_mismatch(hello, source, expected_sha256, exc)
                resendable = isinstance(source, Path) or not body.started
                wait = self._backoff(attempt, exc, retry) if resendable else None
                if wait is None:
                    raise (self._given_up(attempt, exc) if resendable else self._hinted(exc)) from None
                log.info("upload of %s: %s; again in %.1f s", hello.bundle, exc, wait)
                await self._sleep(wait)
        raise AssertionError("unreachable")

    async def upload_while_producing(self, hello: Hello, produce: Callable[[Callable[[bytes], None]], object],
                                     ) -> tuple[object, UploadResult | CollectorError]:
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
            # request body's last read waiting here: it must return, or asyncio.run() waits for it
            # forever.
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
            res: UploadResult | CollectorError = await self.upload(hello, chunks())
        except CollectorError as exc:
            abandoned.set()
            res = exc
        return await produced, res


_END = object()


def _key_path(key: str) -> str:
    """A bundle key (``<cluster>/<yyyy-mm-dd>/<incident>/<name>.tar.gz``, checked: its name becomes a
    file here) in a URL path."""
    try:
        parse_rel(key)
    except KeyPartError as exc:
        raise CollectorError(f"{str(key)[:200]!r}: {exc}", code="bad_key") from None
    return "/".join(quote(part, safe="") for part in key.split("/"))


def _request_of(doc: dict[str, Any]) -> dict[str, Any]:
    req = doc.get("request")
    if not isinstance(req, dict):
        raise CollectorError("collector answer without a request", code="bad_answer")
    return req
