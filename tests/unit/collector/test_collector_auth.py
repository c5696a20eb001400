"""Tokens: static per role, constant-time, failing closed; ServiceAccount tokens through TokenReview.

No API server runs here: ``TokenReviewStandIn`` is a stand-in that speaks the TokenReview API
(authentication.k8s.io/v1) on loopback, answering like kube-apiserver for the tokens it was given.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from collector.auth import NODE_CLAIM, Authenticator, load_tokens
from collector.config import CollectorSettings, SettingsError, StoreURL
from tests.support.collector_helpers import HELLO, body, local_settings, post, run, running
from tests.support.tokenreview import (
    SA,
    review_settings,
    sa,
    start_standin,
)

DATA = os.urandom(10_000)
SA_NAMES = {
    "sa-017": {"username": SA, "aud": "railscope-collector", "extra": {NODE_CLAIM: ["gpu-node-017"]}},
    "sa-018": {"username": SA, "aud": "railscope-collector", "extra": {NODE_CLAIM: ["gpu-node-018"]}},
    "sa-nonode": {"username": SA, "aud": "railscope-collector"},
    "sa-otheraud": {"username": SA, "aud": "kubernetes", "extra": {NODE_CLAIM: ["gpu-node-017"]}},
    "sa-othersa": {"username": "system:serviceaccount:default:default", "aud": "railscope-collector",
                   "extra": {NODE_CLAIM: ["gpu-node-017"]}},
}
SA_TOKENS = {sa(name): user for name, user in SA_NAMES.items()}


def test_serviceaccount_tokens_are_bound_to_their_node(tmp_path: Path) -> None:
    async def go() -> tuple[dict[str, int], int]:
        runner, api, standin = await start_standin(SA_TOKENS)
        out = {}
        try:
            async with running(review_settings(tmp_path, api)) as (url, _col):
                for name in ("sa-017", "sa-018", "sa-nonode", "sa-otheraud", "sa-othersa", "unknown"):
                    out[name] = (await post(url, body(HELLO, DATA), token=sa(name)))[0]
                out["random"] = (await post(url, body(HELLO, DATA), token="not-a-jwt-0123456789abcdef"))[0]
                out["again"] = (await post(url, body(HELLO, DATA), token=sa("sa-017")))[0]
        finally:
            await runner.cleanup()
        return out, standin.reviews

    out, reviews = run(go())
    assert out == {"sa-017": 200, "sa-018": 403, "sa-nonode": 401, "sa-otheraud": 401, "sa-othersa": 401,
                   "unknown": 401, "random": 401, "again": 200}
    # the second sa-017 upload was answered from the cache; a token that is no JWT is never reviewed
    assert reviews == 6


def test_an_unreachable_tokenreview_is_503_not_an_open_door(tmp_path: Path) -> None:
    async def go() -> tuple[int, dict]:
        async with running(review_settings(tmp_path, "http://127.0.0.1:9")) as (url, _col):
            s, doc, _h = await post(url, body(HELLO, DATA), token=sa("sa-017"))
            return s, doc

    s, doc = run(go())
    assert s == 503 and doc["error"] == "auth_unavailable"
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.tar.gz"))


def test_fail_closed_without_a_token_source(tmp_path: Path) -> None:
    s = CollectorSettings(store=StoreURL(kind="local", path=str(tmp_path / "store")))
    with pytest.raises(SettingsError, match="insecure-dev"):
        Authenticator(s)
    Authenticator(replace(s, insecure_dev=True))


def test_insecure_dev_accepts_uploads_without_a_token(tmp_path: Path) -> None:
    s = CollectorSettings(store=StoreURL(kind="local", path=str(tmp_path / "store")), insecure_dev=True)

    async def go() -> int:
        async with running(s) as (url, _col):
            return (await post(url, body(HELLO, DATA), token=None))[0]

    assert run(go()) == 200


@pytest.mark.parametrize(("text", "role", "why"), [
    ("", "operator", "no token"),
    ("short\n", "operator", "at least 16"),
    ("a b\n", "operator", "one token per line"),
    ("tok-without-node-0000000\n", "agent", "<node> <token>"),
    ("../n tok-0000000000000000\n", "agent", "valid key part"),
])
def test_bad_token_files_are_refused_at_start(tmp_path: Path, text: str, role: str, why: str) -> None:
    f = tmp_path / "t"
    f.write_text(text)
    f.chmod(0o600)
    with pytest.raises(SettingsError, match=why):
        load_tokens(str(f), role)


@pytest.mark.parametrize("role", ["agent", "operator", "alerting"])
@pytest.mark.parametrize(("mode", "why"), [(0o644, "readable by others"), (0o604, "readable by others")])
def test_token_files_others_may_read_are_refused_at_start(tmp_path: Path, role: str, mode: int, why: str) -> None:
    # The collector's token files go through the one token-file reader (proto.tokens), as the agent's do.
    f = tmp_path / "t"
    f.write_text("gpu-node-017 tok-0000000000000000\n" if role == "agent" else "tok-0000000000000000\n")
    f.chmod(mode)
    with pytest.raises(SettingsError, match=why):
        load_tokens(str(f), role)
    f.chmod(0o600)
    assert len(load_tokens(str(f), role)) == 1


def test_a_token_file_is_bounded_in_size_and_its_own_group_may_read_it(tmp_path: Path) -> None:
    from proto.tokens import MAX_TOKEN_LIST_BYTES

    f = tmp_path / "t"
    f.write_text("tok-0000000000000000\n" * (MAX_TOKEN_LIST_BYTES // 20))
    f.chmod(0o600)
    with pytest.raises(SettingsError, match="larger than"):
        load_tokens(str(f), "operator")
    # The chart's Secret volume: 0440, group the pod's fsGroup, the collector running in that group.
    f.write_text("tok-0000000000000000\n")
    f.chmod(0o440)
    if f.stat().st_gid == os.getegid():
        assert len(load_tokens(str(f), "operator")) == 1


def test_a_missing_token_file_is_a_setting_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="token file"):
        local_settings(tmp_path)  # writes valid files; now point at a missing one
        Authenticator(replace(local_settings(tmp_path), operator_token_file=str(tmp_path / "nope")))


def test_token_comparison_is_over_every_token(tmp_path: Path) -> None:
    async def go() -> list[str]:
        auth = Authenticator(local_settings(tmp_path))
        names = []
        for token in ("agent-token-gpu-node-018-0123456789", "operator-token-0123456789abcdef"):
            p = await auth.authenticate(f"Bearer {token}")
            names.append(p.name)
        return names

    assert run(go()) == ["agent gpu-node-018", "operator"]
