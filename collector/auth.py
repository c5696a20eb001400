"""Who is calling: static per-role tokens and Kubernetes TokenReview, compared in constant time.

Roles (docs/design.md §9): ``agent`` uploads (and polls) as its own node only; ``alerting`` posts alerts;
``operator`` lists, fetches, verifies. A ServiceAccount token is sent to the API server's TokenReview
with the collector's audience; the node it is bound to comes from the token's pod-node claim
(``authentication.kubernetes.io/node-name`` in ``user.extra``, Kubernetes ≥ 1.30). Without a node
claim an agent token is refused: it could upload as any node.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from proto.keys import KeyPartError, check_part
from proto.requests import DEFAULT_CLUSTER
from proto.tokens import TokenFileError, read_token_list

from .config import CollectorSettings, SettingsError
from .errors import Refused
from .issuer import IssuerKeys, Verdict, expiry
from .limits import TokenBucket, jwt_for

__all__ = ["ROLES", "AuthError", "Authenticator", "Principal", "load_tokens"]

log = logging.getLogger("railscope.collector.auth")

ROLES = ("agent", "alerting", "operator")
NODE_CLAIM = "authentication.kubernetes.io/node-name"
TOKENREVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
_MAX_TOKEN = 16 * 1024
#: a positive review is kept until the token expires, at most this long: a deleted pod's token is
#: refused within that bound (the API server alone knows the pod is gone)
POSITIVE_MAX_S = 600.0
NEGATIVE_S = 10.0
#: a token the issuer's keys cannot judge is reviewed within a budget of its peer address's own:
#: this many at once, then ``tokenreview_peer_rate`` a second
PEER_BURST = 5
_PEERS = 4096
_CACHED = 4096


class AuthError(Refused):
    """No token, an unknown one (401), the wrong role or node (403), no way to ask (503)."""


@dataclass(frozen=True, slots=True)
class Principal:
    roles: frozenset[str]
    node: str | None = None  # an agent's node; None: any node (operators, --insecure-dev)
    name: str = ""
    #: the only cluster an agent stores bundles for, polls and closes requests of (every agent token
    #: is bound to one: its line's, else --cluster's, else ``default``), or that an alerting token
    #: queues captures for; None: any (operators, unbound alerting tokens, --insecure-dev)
    cluster: str | None = None

    def require_cluster(self, cluster: str) -> None:
        """A token bound to a cluster acts for that cluster only."""
        if self.cluster is not None and cluster != self.cluster:
            raise AuthError(403, "forbidden", f"{self.name or 'this token'} is bound to cluster {self.cluster}, "
                                              f"not {cluster} (the collector's --cluster, or the cluster at the end "
                                              "of the token's line)")

    def require(self, role: str, node: str | None = None) -> None:
        if role not in self.roles:
            raise AuthError(403, "forbidden", f"{self.name or 'this token'} may not do this (needs role {role})")
        if role == "agent" and node is not None and self.node is not None and node != self.node:
            raise AuthError(403, "forbidden", f"an agent token of node {self.node} may not act as node {node}")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def load_tokens(path: str, role: str, cluster: str | None = None) -> list[tuple[bytes, Principal]]:
    """A token file: one token per line (``#`` comments); agent files name the node first and may name
    the token's cluster last: ``<node> <token> [<cluster>]`` (without one, ``cluster``, else
    ``default``: an agent token is always bound to one cluster); alerting files may bind a token to a
    cluster, ``<token> [<cluster>]`` (without one, ``cluster``; without that either, the alerts'
    ``cluster`` label decides)."""
    # The one token-file reader (proto.tokens): owner-only (or the pod's own group: the chart mounts
    # the Secret 0440 with the pod's fsGroup, since the collector runs as nobody), bounded in size.
    try:
        text = read_token_list(path, f"{role} token file", own_group=True)
    except TokenFileError as exc:
        raise SettingsError(str(exc)) from None
    out: list[tuple[bytes, Principal]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if role == "agent":
            if len(words) not in (2, 3):
                raise SettingsError(f"{path}:{n}: an agent token line is '<node> <token> [<cluster>]'")
            try:
                node = check_part("node", words[0])
                bound = check_part("cluster", words[2]) if len(words) == 3 else cluster or DEFAULT_CLUSTER
            except KeyPartError as exc:
                raise SettingsError(f"{path}:{n}: {exc}") from None
            token, principal = words[1], Principal(frozenset({"agent"}), node=node, name=f"agent {node}",
                                                   cluster=bound)
        elif role == "alerting":
            if len(words) not in (1, 2):
                raise SettingsError(f"{path}:{n}: an alerting token line is '<token> [<cluster>]'")
            try:
                bound = check_part("cluster", words[1]) if len(words) == 2 else cluster
            except KeyPartError as exc:
                raise SettingsError(f"{path}:{n}: {exc}") from None
            token, principal = words[0], Principal(frozenset({role}), name=role, cluster=bound)
        else:
            if len(words) != 1:
                raise SettingsError(f"{path}:{n}: one token per line")
            token, principal = words[0], Principal(frozenset({role}), name=role)
        if len(token) < 16:
            raise SettingsError(f"{path}:{n}: a token must be at least 16 characters")
        out.append((_digest(token), principal))
    if not out:
        raise SettingsError(f"{role} token file {path}: no token in it")
    return out


class Authenticator:
    """Bearer token -> :class:`Principal`, or :class:`AuthError` (401 unknown, 403 wrong role or node)."""

    def __init__(self, settings: CollectorSettings) -> None:
        self.settings = settings
        self._static: list[tuple[bytes, Principal]] = []
        for role, path in (("agent", settings.agent_token_file), ("alerting", settings.alerting_token_file),
                           ("operator", settings.operator_token_file)):
            if path:
                self._static += load_tokens(path, role, settings.cluster)
        self._review = bool(settings.tokenreview_url)
        if settings.cluster is None and (self._review or any(
                "agent" in p.roles and p.cluster == DEFAULT_CLUSTER for _d, p in self._static)):
            # Agent tokens used to upload for any cluster without --cluster; now each is bound to one,
            # so an agent started with --cluster <other> is refused 403 until this is set.
            log.warning("--cluster is not set: agent tokens that name no cluster are bound to cluster %r "
                        "(their bundles, polls and capture requests); set --cluster (chart: "
                        "collector.flags.cluster, else agent.cluster) to the agents' --cluster, or name the "
                        "cluster at the end of each agent token line", DEFAULT_CLUSTER)
        if not self._static and not self._review and not settings.insecure_dev:
            raise SettingsError("no token source (--agent-token-file, --operator-token-file, "
                                "--alerting-token-file, --tokenreview-url): refusing to serve without "
                                "authentication unless --insecure-dev")
        self._session: aiohttp.ClientSession | None = None
        self._cache: OrderedDict[bytes, tuple[float, Principal | None]] = OrderedDict()
        self._refused: OrderedDict[bytes, tuple[float, Principal | None]] = OrderedDict()
        self._lock = asyncio.Lock()
        # Reviews asked for and not answered yet: concurrent requests with one token share one.
        self._asking: dict[bytes, asyncio.Future[Principal | None]] = {}
        self._reviews = TokenBucket(settings.tokenreview_rate, settings.tokenreview_burst)
        self._peers: OrderedDict[str, TokenBucket] = OrderedDict()
        self.issuer = IssuerKeys(self._get_json)
        #: tokens refused because no key of the issuer signed them (no review asked for)
        self.forged = 0

    async def start(self) -> None:
        if self._review:
            ctx: ssl.SSLContext | bool = True
            if self.settings.tokenreview_ca_file:
                ctx = ssl.create_default_context(cafile=self.settings.tokenreview_ca_file)
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx),
                                                  timeout=aiohttp.ClientTimeout(total=10))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get_json(self, path: str) -> object:
        """A GET of the API server with the collector's own token (the issuer's discovery document
        and keys)."""
        assert self._session is not None
        url = self.settings.tokenreview_url.rstrip("/") + path  # type: ignore[union-attr]
        async with self._session.get(url, headers={"Authorization": f"Bearer {self._own_token()}"}) as resp:
            if resp.status != 200:
                raise OSError(f"{path} answered {resp.status}")
            return await resp.json(content_type=None)

    def _own_token(self) -> str:
        if not self.settings.tokenreview_token_file:
            return ""
        try:
            return Path(self.settings.tokenreview_token_file).read_text().strip()
        except OSError as exc:
            raise AuthError(503, "auth_unavailable", f"the collector's own token: {exc.strerror}") from None

    def _peer_budget(self, peer: str) -> bool:
        bucket = self._peers.get(peer)
        if bucket is None:
            bucket = self._peers[peer] = TokenBucket(self.settings.tokenreview_peer_rate, PEER_BURST)
            while len(self._peers) > _PEERS:
                self._peers.popitem(last=False)
        self._peers.move_to_end(peer)
        return bucket.take()

    async def authenticate(self, header: str | None, peer: str = "?") -> Principal:
        token = None
        if header and header[:7].lower() == "bearer ":
            token = header[7:].strip()
        if not token:
            if self.settings.insecure_dev:
                return Principal(frozenset(ROLES), name="insecure-dev")
            raise AuthError(401, "unauthenticated", "no bearer token")
        if len(token) > _MAX_TOKEN:
            raise AuthError(401, "unauthenticated", "token too long")
        digest = _digest(token)
        found: Principal | None = None
        # Every static token is compared, each in constant time over fixed-length digests: neither
        # the position of a match nor a token's length shows in the time taken.
        for known, principal in self._static:
            if hmac.compare_digest(known, digest) and found is None:
                found = principal
        if found is not None:
            return found
        # Only what could be a ServiceAccount token for our audience is sent for review: a random
        # bearer token must not cost the API server a review with the collector's credentials.
        if self._review and jwt_for(token, self.settings.agent_audience):
            reviewed = await self._tokenreview(token, digest, peer)
            if reviewed is not None:
                return reviewed
        if self.settings.insecure_dev:
            return Principal(frozenset(ROLES), name="insecure-dev")
        raise AuthError(401, "unauthenticated", "unknown token")

    async def _tokenreview(self, token: str, digest: bytes, peer: str) -> Principal | None:
        now = time.monotonic()
        for cache in (self._cache, self._refused):
            hit = cache.get(digest)
            if hit is not None and hit[0] > now:
                return hit[1]
        pending = self._asking.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Principal | None] = asyncio.get_running_loop().create_future()
        self._asking[digest] = fut
        try:
            principal = await self._judge(token, digest, peer)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: a review nobody else waited on is not "never retrieved"
            raise
        else:
            fut.set_result(principal)
        finally:
            self._asking.pop(digest, None)
        return principal

    async def _judge(self, token: str, digest: bytes, peer: str) -> Principal | None:
        # Before any review: a token no key of the cluster's issuer signed costs nothing but this
        # check (and is not cached: a flood of them must not push reviewed agents out); one that
        # cannot be judged here costs its own address's budget first, so a flood of minted tokens
        # from one client never empties the replica's budget for the fleet.
        verdict = await self.issuer.verdict(token)
        if verdict is Verdict.FORGED:
            self.forged += 1
            return None
        # Behind a proxy (--plain-http) every peer is the proxy, unless it names its clients (PROXY
        # protocol): no budget per address then.
        if verdict is Verdict.UNKNOWN and self.settings.peers_named and not self._peer_budget(peer):
            raise AuthError(503, "auth_unavailable", "too many token reviews from this address: try again shortly")
        if not self._reviews.take():
            raise AuthError(503, "auth_unavailable", "too many token reviews at once: try again shortly")
        principal = await self._ask(token)
        # A positive answer is kept until the token expires (bounded), a negative one 10 s, each in
        # a map of its own: a burst of uploads after an incident costs the API server one review per
        # agent, not one per request, and refused tokens never push a reviewed agent out.
        now = time.monotonic()
        if principal is not None:
            exp = expiry(token)
            ttl = POSITIVE_MAX_S if exp is None else max(0.0, min(POSITIVE_MAX_S, exp - time.time()))
            cache = self._cache
        else:
            ttl, cache = NEGATIVE_S, self._refused
        cache[digest] = (now + ttl, principal)
        cache.move_to_end(digest)
        while len(cache) > _CACHED:
            cache.popitem(last=False)
        return principal

    async def _ask(self, token: str) -> Principal | None:
        assert self._session is not None
        own = self._own_token()
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [self.settings.agent_audience]}}
        url = self.settings.tokenreview_url.rstrip("/") + TOKENREVIEW_PATH  # type: ignore[union-attr]
        try:
            async with self._session.post(url, json=body, headers={"Authorization": f"Bearer {own}"}) as resp:
                if resp.status != 201 and resp.status != 200:
                    log.warning("tokenreview answered %s", resp.status)
                    raise AuthError(503, "auth_unavailable", f"TokenReview answered {resp.status}")
                doc = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise AuthError(503, "auth_unavailable", f"TokenReview failed: {type(exc).__name__}") from None
        status = doc.get("status") or {} if isinstance(doc, dict) else {}
        if not status.get("authenticated"):
            return None
        if self.settings.agent_audience not in (status.get("audiences") or []):
            return None
        user = status.get("user") or {}
        username = user.get("username", "")
        if username not in self.settings.agent_service_accounts:
            return None
        nodes = (user.get("extra") or {}).get(NODE_CLAIM) or []
        if not isinstance(nodes, list) or len(nodes) != 1:
            log.warning("agent token of %s has no node claim: refused", username)
            return None
        try:
            node = check_part("node", nodes[0])
        except KeyPartError:
            return None
        return Principal(frozenset({"agent"}), node=node, name=f"agent {node}",
                         cluster=self.settings.cluster or DEFAULT_CLUSTER)
