"""Who may read the agent's data endpoints (docs/design.md §7): ``/v1/image``, ``/v1/events`` and
``/v1/recorder`` hold topology, addresses and logs, so they are never open to the node network.

They answer on the agent's Unix socket (``--data-socket``, inside the pod: what ``kubectl exec …
railscope capture`` uses), or over TCP with ``Authorization: Bearer <token>`` when a token file is
configured (``--data-token-file``, compared in constant time, re-read when the file changes so a
rotated Secret takes effect). Without a token file a TCP request to a data endpoint is refused.
``/metrics``, ``/healthz`` and ``/readyz`` are not affected.

The token file goes through the one token-file reader (``proto.tokens``): a file others may read, or
longer than a token, opens nothing. Guesses are bounded: an address that sent ``MAX_FAILED_PER_PEER``
wrong tokens within ``GUESS_WINDOW_S``, or the agent after ``MAX_FAILED`` in all, answers 429 to
every TCP request for the data endpoints until the window has passed (the agent listens on the node's
address in the host network, where no NetworkPolicy applies).
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from aiohttp import web

from proto.tokens import TokenFileError, read_token

__all__ = ["DATA_PREFIX", "DataAccess", "Guesses", "data_access_middleware"]

log = logging.getLogger("railscope.agent.http")

DATA_PREFIX = "/v1/"
#: wrong tokens one address may send per window, and all addresses together
MAX_FAILED_PER_PEER = 5
MAX_FAILED = 50
GUESS_WINDOW_S = 60.0
_PEERS = 4096


class Guesses:
    """Failed bearer tokens per peer address and in all, over a sliding window; the clock is an argument."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._peers: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    def _trim(self, q: deque[float], now: float) -> deque[float]:
        while q and now - q[0] >= GUESS_WINDOW_S:
            q.popleft()
        return q

    def locked(self, peer: str) -> float:
        """Seconds until ``peer`` may try again (0: it may now)."""
        now = self.clock()
        mine = self._trim(self._peers.get(peer, deque()), now)
        everyone = self._trim(self._all, now)
        waits = [GUESS_WINDOW_S - (now - q[-limit]) for q, limit in ((mine, MAX_FAILED_PER_PEER), (everyone, MAX_FAILED))
                 if len(q) >= limit]
        return max(waits, default=0.0)

    def failed(self, peer: str) -> bool:
        """Count a wrong token of ``peer``; True when it has just locked ``peer`` (or everyone) out."""
        now = self.clock()
        q = self._peers.pop(peer, None) or deque(maxlen=MAX_FAILED_PER_PEER)
        self._peers[peer] = q  # the most recent last: the oldest peers are forgotten first
        while len(self._peers) > _PEERS:
            self._peers.popitem(last=False)
        self._trim(q, now).append(now)
        self._trim(self._all, now).append(now)
        while len(self._all) > MAX_FAILED:
            self._all.popleft()
        return len(q) == MAX_FAILED_PER_PEER or len(self._all) == MAX_FAILED


class DataAccess:
    def __init__(self, token_file: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.token_file = token_file
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, ...], bytes | None] | None = None
        self.guesses = Guesses(clock)

    def token(self) -> bytes | None:
        """The bearer token, or None when TCP access is off (no file, or one the token-file reader
        refuses: readable by others, too long, empty, not one token)."""
        if not self.token_file:
            return None
        try:
            st = os.stat(self.token_file)
        except OSError:
            return None
        # A chmod changes the mode and ctime, not the mtime: all of them say "look again".
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode)
        with self._lock:
            if self._cached is not None and self._cached[0] == stamp:
                return self._cached[1]
            try:
                tok: bytes | None = read_token(self.token_file, "--data-token-file").encode()
            except TokenFileError as exc:
                log.warning("the data endpoints are closed over TCP", extra={"reason": str(exc)})
                tok = None
            self._cached = (stamp, tok)
            return tok


def _on_unix_socket(request: web.Request) -> bool:
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX


def data_access_middleware(access: DataAccess) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.path.startswith(DATA_PREFIX) and not _on_unix_socket(request):
            peer = request.remote or "?"
            wait = access.guesses.locked(peer)
            if wait > 0:
                raise web.HTTPTooManyRequests(text="too many wrong tokens: try again later\n",
                                              headers={"Retry-After": str(int(wait) + 1)})
            token = access.token()
            if token is None:
                raise web.HTTPForbidden(text="the data endpoints are served on the agent's Unix socket only "
                                             "(--data-socket); --data-token-file allows them over TCP with a "
                                             "bearer token\n")
            got = request.headers.get("Authorization", "")
            scheme, _, value = got.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token):
                if value.strip() and access.guesses.failed(peer):  # no token at all is no guess
                    # One line per lockout, not one per guess.
                    log.warning("data endpoint: too many wrong tokens, refused for a while",
                                extra={"path": request.path, "peer": peer, "window_s": GUESS_WINDOW_S})
                raise web.HTTPUnauthorized(text="a bearer token is required\n",
                                           headers={"WWW-Authenticate": 'Bearer realm="railscope"'})
        return await handler(request)

    return middleware
