"""TokenReview is not an amplifier: a bearer token that is no JWT for the collector's audience is
refused without a review, one token is reviewed once however many requests carry it at once, and
reviews past a rate are refused (503, tried again) instead of passed on to the API server.

``TokenReviewStandIn`` (tests.support.tokenreview) stands in for kube-apiserver's TokenReview endpoint."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from dataclasses import replace
from pathlib import Path

from collector.auth import NODE_CLAIM
from tests.support.collector_helpers import HELLO, get, post, run, running
from tests.support.tokenreview import SA, review_settings, start_standin


def jwt(aud: str = "railscope-collector", sub: str = SA) -> str:
    """A JWT-shaped token (a stand-in's: its signature is no signature)."""
    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return ".".join([part({"alg": "RS256", "kid": "k1"}), part({"aud": [aud], "sub": sub, "jti": secrets.token_hex(8)}),
                     base64.urlsafe_b64encode(secrets.token_bytes(64)).decode().rstrip("=")])


def test_random_bearer_tokens_cost_no_review(tmp_path: Path) -> None:
    async def go() -> tuple[list[int], int]:
        runner, api, standin = await start_standin({})
        try:
            async with running(review_settings(tmp_path, api)) as (url, _col):
                got = await asyncio.gather(*(post(url, b"", token=secrets.token_urlsafe(32)) for _ in range(400)))
                other_aud = await post(url, b"", token=jwt(aud="kubernetes"))
        finally:
            await runner.cleanup()
        return [g[0] for g in got] + [other_aud[0]], standin.reviews

    statuses, reviews = run(go())
    assert set(statuses) == {401} and reviews == 0


def test_one_token_is_reviewed_once_and_reviews_are_rate_bound(tmp_path: Path) -> None:
    good = jwt()

    async def go() -> tuple[list[int], int, list[int], int]:
        runner, api, standin = await start_standin({good: {"username": SA, "aud": "railscope-collector",
                                                      "extra": {NODE_CLAIM: [HELLO.node]}}})
        try:
            settings = replace(review_settings(tmp_path, api), tokenreview_rate=0.001, tokenreview_burst=5)
            async with running(settings) as (url, _col):
                same = await asyncio.gather(*(get(url, f"/v1/requests?node={HELLO.node}&wait=0", token=good)
                                              for _ in range(30)))
                after_one = standin.reviews
                many = await asyncio.gather(*(post(url, b"", token=jwt()) for _ in range(50)))
        finally:
            await runner.cleanup()
        return [s[0] for s in same], after_one, [m[0] for m in many], standin.reviews

    same, after_one, many, reviews = run(go())
    assert set(same) == {200} and after_one == 1
    assert reviews == 5  # the burst, then nothing more reaches the API server
    assert many.count(401) == 4 and many.count(503) == 46  # 503: the agent's client tries again later


def test_a_reviewed_agent_uploads_for_the_collectors_cluster_only(tmp_path: Path) -> None:
    from tests.support.collector_helpers import body

    good = jwt()

    async def go() -> list[int]:
        runner, api, standin = await start_standin({good: {"username": SA, "aud": "railscope-collector",
                                                        "extra": {NODE_CLAIM: [HELLO.node]}}})
        try:
            settings = replace(review_settings(tmp_path, api), cluster=HELLO.cluster)
            async with running(settings) as (url, _col):
                other = await post(url, body(replace(HELLO, cluster="other-cluster"), b"x"), token=good)
                own = await post(url, body(HELLO, b"x"), token=good)
        finally:
            await runner.cleanup()
        return [other[0], own[0], standin.reviews]

    assert run(go()) == [403, 200, 1]  # one review: the principal is cached with its cluster
