"""The TokenReview budget cannot be emptied by minted tokens: a JWT for the collector's audience that
the cluster's ServiceAccount issuer did not sign is refused without a review; where the issuer's keys
cannot be read, one client address's reviews come from a budget of its own; a positive review is kept
until the token expires (bounded). The issuer's discovery document and keys are served by a stand-in
on loopback, with an RSA key made here (``cryptography``, a test dependency)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from collector.auth import NODE_CLAIM, POSITIVE_MAX_S, _digest
from collector.issuer import IssuerKeys, Verdict, parse_jwks, rs256_verify
from tests.support.collector_helpers import HELLO, run, running
from tests.support.tokenreview import COLLECTOR_SA_TOKEN, SA, TokenReviewStandIn
from tests.support.tokenreview import review_settings as _review_settings

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUD = "railscope-collector"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _int(n: int) -> str:
    return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def signed(key: rsa.RSAPrivateKey = KEY, kid: str = "k1", exp_in: float = 3600, iss: str = ISSUER) -> str:
    """A ServiceAccount token as kube-apiserver signs one (RS256), with a unique jti."""
    head = _b64(json.dumps({"alg": "RS256", "kid": kid}).encode())
    body = _b64(json.dumps({"aud": [AUD], "iss": iss, "sub": SA, "exp": int(time.time() + exp_in),
                            "jti": secrets.token_hex(8)}).encode())
    sig = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{_b64(sig)}"


def minted() -> str:
    """What anyone can make: the shape and the audience, and a signature of nobody's."""
    head = _b64(json.dumps({"alg": "RS256", "kid": "k1"}).encode())
    body = _b64(json.dumps({"aud": [AUD], "iss": ISSUER, "sub": SA, "exp": int(time.time() + 3600),
                            "jti": secrets.token_hex(8)}).encode())
    return f"{head}.{body}.{_b64(secrets.token_bytes(256))}"


def jwks(key: rsa.RSAPrivateKey = KEY, kid: str = "k1") -> dict:
    pub = key.public_key().public_numbers()
    return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": _int(pub.n), "e": _int(pub.e)}]}


async def _apiserver(tokens: dict[str, dict], keys: dict | None) -> tuple[web.AppRunner, str, TokenReviewStandIn]:
    """The TokenReview stand-in, and with ``keys`` the issuer discovery URLs kube-apiserver serves."""
    standin = TokenReviewStandIn(tokens)
    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", standin.review)
    if keys is not None:
        async def discovery(request: web.Request) -> web.Response:
            if request.headers.get("Authorization") != f"Bearer {COLLECTOR_SA_TOKEN}":
                return web.json_response({}, status=401)
            return web.json_response({"issuer": ISSUER, "jwks_uri": f"{ISSUER}/openid/v1/jwks"})

        async def keyset(request: web.Request) -> web.Response:
            return web.json_response(keys)

        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_get("/openid/v1/jwks", keyset)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", standin


async def _poll(url: str, token: str, source: str = "127.0.0.1") -> int:
    conn = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=conn) as s, s.get(
            url + f"/v1/requests?node={HELLO.node}&wait=0", headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status


AGENT = {"username": SA, "aud": AUD, "extra": {NODE_CLAIM: [HELLO.node]}}


def test_tokens_the_issuer_did_not_sign_cost_no_review(tmp_path: Path) -> None:
    good = signed()
    forged = [minted() for _ in range(150)] + [signed(OTHER) for _ in range(20)] + [signed(exp_in=-60)]

    async def go() -> tuple[list[int], int, int]:
        runner, api, standin = await _apiserver({good: AGENT}, jwks())
        try:
            settings = replace(_review_settings(tmp_path, api), tokenreview_rate=0.001, tokenreview_burst=5)
            async with running(settings) as (url, _col):
                flood = await asyncio.gather(*(_poll(url, t) for t in forged))
                real = await _poll(url, good)
        finally:
            await runner.cleanup()
        return flood, real, standin.reviews

    flood, real, reviews = run(go())
    assert set(flood) == {401}
    assert real == 200, f"a real agent's token answered {real} after a flood of minted tokens"
    assert reviews == 1


def test_without_the_issuer_keys_one_address_cannot_starve_another(tmp_path: Path) -> None:
    good = signed()

    async def go() -> tuple[list[int], int, int]:
        runner, api, standin = await _apiserver({good: AGENT}, None)
        try:
            settings = replace(_review_settings(tmp_path, api), tokenreview_rate=0.001, tokenreview_burst=20,
                               tokenreview_peer_rate=0.001)
            async with running(settings) as (url, _col):
                flood = [await _poll(url, minted()) for _ in range(40)]
                real = await _poll(url, good, source="127.0.0.2")
        finally:
            await runner.cleanup()
        return flood, real, standin.reviews

    flood, real, reviews = run(go())
    assert flood.count(401) == 5 and flood.count(503) == 35  # the flooding address's own budget
    assert real == 200, f"an agent on another address answered {real} while one address flooded"
    assert reviews == 6


def test_a_positive_review_is_kept_until_the_token_expires_bounded(tmp_path: Path) -> None:
    long_lived, short_lived = signed(exp_in=3600), signed(exp_in=30)

    async def go() -> dict[str, float]:
        runner, api, _standin = await _apiserver({long_lived: AGENT, short_lived: AGENT}, jwks())
        try:
            async with running(_review_settings(tmp_path, api)) as (url, col):
                assert await _poll(url, long_lived) == 200 and await _poll(url, short_lived) == 200
                now = time.monotonic()
                cache = col.auth._cache
                return {name: cache[_digest(t)][0] - now for name, t in
                        (("long", long_lived), ("short", short_lived))}
        finally:
            await runner.cleanup()

    left = run(go())
    assert POSITIVE_MAX_S - 5 < left["long"] <= POSITIVE_MAX_S, left
    assert 20 < left["short"] <= 30, left


def test_rs256_verification_on_its_own() -> None:
    keys = parse_jwks(jwks())
    token = signed()
    head, body, sig = token.split(".")
    raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    assert rs256_verify(keys["k1"], f"{head}.{body}".encode(), raw)
    assert not rs256_verify(keys["k1"], f"{head}.{body}x".encode(), raw)
    assert not rs256_verify(keys["k1"], f"{head}.{body}".encode(), raw[:-1] + bytes([raw[-1] ^ 1]))
    # keys too short, of another kind, or malformed are not taken
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_numbers()
    assert parse_jwks({"keys": [{"kty": "RSA", "kid": "s", "n": _int(small.n), "e": _int(small.e)},
                                {"kty": "RSA", "kid": "bad", "n": "!!", "e": "AQAB"}]}) == {}

    async def judge() -> list[Verdict]:
        async def fetch(path: str) -> object:
            return {"issuer": ISSUER} if path.startswith("/.well-known") else jwks()
        issuer = IssuerKeys(fetch)
        return [await issuer.verdict(t) for t in (token, minted(), signed(OTHER), signed(kid="k2"),
                                                   signed(exp_in=-1), signed(iss="https://elsewhere"))]

    assert run(judge()) == [Verdict.VALID] + [Verdict.FORGED] * 5
