"""ServiceAccount tokens checked against the cluster's issuer keys before any TokenReview.

The shape of a token and its audience are public: anyone can mint a JWT that names the collector's
audience, and each such token would cost a TokenReview of the replica's budget. The API server
publishes the keys its ServiceAccount tokens are signed with (service account issuer discovery,
https://kubernetes.io/docs/tasks/configure-pod-container/configure-service-account/#service-account-issuer-discovery):
``/.well-known/openid-configuration`` names the issuer, ``/openid/v1/jwks`` holds the keys. A token
whose RS256 signature none of them verifies, or that has expired, is refused here without a review;
one that verifies still goes to TokenReview, which alone knows whether its pod still exists.

Where the keys cannot be had (no RBAC for the discovery URLs, an issuer that signs with another
algorithm) a token cannot be judged here: the caller reviews it within a budget of its peer's own.
Only RS256 is verified (RSASSA-PKCS1-v1_5 with SHA-256, RFC 8017 §8.2.2), the algorithm of
kube-apiserver's default RSA signing key; it needs a public-key operation only, no library.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

__all__ = ["IssuerKeys", "Verdict", "expiry", "parse_jwks", "rs256_verify"]

log = logging.getLogger("railscope.collector.auth")

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
#: keys are fetched again this often, and at most this often when a token names an unknown key id
REFRESH_S = 300.0
MIN_REFRESH_S = 30.0
#: a key shorter than this is no ServiceAccount signing key (kube-apiserver refuses < 2048 bits)
_MIN_RSA_BITS = 2048
_MAX_KEYS = 64
#: DER of DigestInfo for SHA-256 (RFC 8017 §9.2 note 1), followed by the 32-byte hash
#: the marker ``parse_jwks`` leaves for keys it cannot use
_OTHER = "\x00other"
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


class Verdict(Enum):
    VALID = "valid"  # signed by a key of the cluster's issuer, not expired: worth a review
    FORGED = "forged"  # no key of the issuer signed it, or it has expired: refused without a review
    UNKNOWN = "unknown"  # cannot be judged here (no keys, another algorithm)


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _uint(part: Any) -> int:
    if not isinstance(part, str) or not part:
        raise ValueError("not a base64url integer")
    return int.from_bytes(_b64(part), "big")


def parse_jwks(doc: Any) -> dict[str | None, tuple[int, int]]:
    """The RSA signing keys of a JWK Set (RFC 7517), ``kid -> (n, e)``; other keys are left out
    (``other_keys`` says whether there were any)."""
    keys: dict[str | None, tuple[int, int]] = {}
    rows = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ValueError("no keys in the JWK set")
    for row in rows[:_MAX_KEYS]:
        if not isinstance(row, dict) or row.get("use", "sig") != "sig":
            continue
        if row.get("kty") != "RSA" or row.get("alg", "RS256") != "RS256":
            keys[_OTHER] = (0, 0)  # a key of another kind: a token of another algorithm may be the issuer's
            continue
        try:
            n, e = _uint(row.get("n")), _uint(row.get("e"))
        except (ValueError, binascii.Error):
            continue
        if n.bit_length() < _MIN_RSA_BITS or e < 3 or e % 2 == 0:
            continue
        kid = row.get("kid")
        keys[kid if isinstance(kid, str) else None] = (n, e)
    return keys


def rs256_verify(key: tuple[int, int], signing_input: bytes, signature: bytes) -> bool:
    """RSASSA-PKCS1-v1_5 verification with SHA-256 (RFC 8017 §8.2.2): the signature raised to the
    public exponent must be exactly the encoding of the input's hash."""
    n, e = key
    k = (n.bit_length() + 7) // 8
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    em = pow(s, e, n).to_bytes(k, "big")
    t = _SHA256_DIGEST_INFO + hashlib.sha256(signing_input).digest()
    if k < len(t) + 11:
        return False
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return hmac.compare_digest(em, expected)


Fetch = Callable[[str], Awaitable[Any]]


class IssuerKeys:
    """The issuer's signing keys, fetched with ``fetch(path)`` (a GET of the API server answering
    the parsed JSON, raising on any failure) and kept ``REFRESH_S``."""

    def __init__(self, fetch: Fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch, self._clock = fetch, clock
        self.keys: dict[str | None, tuple[int, int]] | None = None
        self.issuer: str | None = None
        self._at = float("-inf")
        self._warned = False
        self._lock = asyncio.Lock()

    async def _refresh(self, force: bool = False) -> None:
        if self._lock.locked():
            async with self._lock:  # one fetch at a time: the others wait for its keys
                return
        async with self._lock:
            await self._fetch_keys(force)

    async def _fetch_keys(self, force: bool) -> None:
        now = self._clock()
        age = now - self._at
        if age < MIN_REFRESH_S or (not force and age < REFRESH_S):
            return
        self._at = now
        try:
            disc = await self._fetch(DISCOVERY_PATH)
            issuer = disc.get("issuer") if isinstance(disc, dict) else None
            keys = parse_jwks(await self._fetch(JWKS_PATH))
        except Exception as exc:  # any failure (refused, unreachable, not JSON): judge nothing here, say so once
            if not self._warned:
                log.warning("the cluster's ServiceAccount issuer keys cannot be read (%s): tokens are "
                            "reviewed within a budget per client address instead", exc)
                self._warned = True
            return
        self.keys = keys or None
        self.issuer = issuer if isinstance(issuer, str) else None
        self._warned = False

    async def verdict(self, token: str) -> Verdict:
        """Whether ``token`` is one the issuer signed and that has not expired."""
        parts = token.split(".")
        if len(parts) != 3:
            return Verdict.FORGED
        try:
            header, payload = json.loads(_b64(parts[0])), json.loads(_b64(parts[1]))
            signature = _b64(parts[2])
        except (ValueError, binascii.Error, RecursionError):
            return Verdict.FORGED
        if not isinstance(header, dict) or not isinstance(payload, dict):
            return Verdict.FORGED
        await self._refresh()
        if self.keys is None:
            return Verdict.UNKNOWN
        if header.get("alg") != "RS256":
            # ES256 and the like are not verified here: the issuer's if it publishes such keys
            return Verdict.UNKNOWN if _OTHER in self.keys else Verdict.FORGED
        kid = header.get("kid")
        if kid is not None and kid not in self.keys:
            await self._refresh(force=True)  # a key rotated in since the last fetch
            if self.keys is None:
                return Verdict.UNKNOWN
        rsa = {k: v for k, v in self.keys.items() if k != _OTHER}
        candidates = [rsa[kid]] if kid in rsa else (list(rsa.values()) if kid is None else [])
        signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", "replace")
        if not any(rs256_verify(k, signing_input, signature) for k in candidates):
            return Verdict.FORGED
        exp = payload.get("exp")
        if not isinstance(exp, int | float) or exp <= time.time():
            return Verdict.FORGED
        if self.issuer is not None and payload.get("iss") != self.issuer:
            return Verdict.FORGED
        return Verdict.VALID


def expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), unverified: read only for a token the
    API server has just accepted."""
    try:
        payload = json.loads(_b64(token.split(".")[1]))
    except (ValueError, binascii.Error, IndexError, RecursionError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
