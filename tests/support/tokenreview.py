"""A stand-in for kube-apiserver's TokenReview endpoint and ServiceAccount tokens of the shape the
collector reviews (its own token, the agents' JWTs)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from aiohttp import web

from collector.config import CollectorSettings, StoreURL

SA = "system:serviceaccount:railscope:railscope-agent"
COLLECTOR_SA_TOKEN = "collector-own-token-000000000000"


class TokenReviewStandIn:
    """A stand-in for kube-apiserver's TokenReview endpoint (not an API server)."""

    def __init__(self, tokens: dict[str, dict]) -> None:
        self.tokens = tokens
        self.reviews = 0

    async def review(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {COLLECTOR_SA_TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        self.reviews += 1
        doc = await request.json()
        spec = doc["spec"]
        user = self.tokens.get(spec["token"])
        status: dict = {"authenticated": False}
        if user is not None and user.get("aud") in spec.get("audiences", []):
            status = {"authenticated": True, "audiences": [user["aud"]],
                      "user": {"username": user["username"], "uid": "u1", "groups": ["system:serviceaccounts"],
                               "extra": user.get("extra", {})}}
        return web.json_response({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": spec, "status": status}, status=201)


async def start_standin(tokens: dict[str, dict]) -> tuple[web.AppRunner, str, TokenReviewStandIn]:
    standin = TokenReviewStandIn(tokens)
    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", standin.review)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", standin


def review_settings(tmp_path: Path, api: str) -> CollectorSettings:
    own = tmp_path / "own-token"
    own.write_text(COLLECTOR_SA_TOKEN)
    # The stand-in publishes no issuer keys, and every client here is 127.0.0.1: the budget per
    # address (test_collector_tokenreview) is opened wide so these tests see the review alone.
    return CollectorSettings(store=StoreURL(kind="local", path=str(tmp_path / "store")), tokenreview_url=api,
                             tokenreview_token_file=str(own), tokenreview_peer_rate=1e6,
                             cluster="prod-east")  # HELLO's: a reviewed agent is bound to the collector's


def sa(name: str) -> str:
    """A ServiceAccount token's shape (a JWT for the collector's audience) named ``name``; the
    stand-in knows which are valid, as the API server would."""
    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part({'aud': ['railscope-collector'], 'sub': name})}.c2lnbmF0dXJl"
