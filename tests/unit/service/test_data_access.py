"""The data endpoints' token file goes through the one token-file reader (proto.tokens), and wrong
tokens are bounded: an address past its guesses, or the agent past all guesses, is answered 429."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agent.service.data_access import (
    GUESS_WINDOW_S,
    MAX_FAILED,
    MAX_FAILED_PER_PEER,
    DataAccess,
    Guesses,
    data_access_middleware,
)

TOKEN = "data-token-0123456789abcdef"


def _statuses(access: DataAccess, tokens: list[str]) -> list[int]:
    async def main() -> list[int]:
        app = web.Application(middlewares=[data_access_middleware(access)])

        async def data(_request: web.Request) -> web.Response:
            return web.Response(text="events")

        app.router.add_get("/v1/events", data)
        async with TestClient(TestServer(app)) as client:
            out = []
            for tok in tokens:
                resp = await client.get("/v1/events", headers={"Authorization": f"Bearer {tok}"})
                out.append(resp.status)
            return out

    return asyncio.run(main())


@pytest.mark.parametrize(("mode", "content"), [(0o644, TOKEN), (0o640, TOKEN), (0o600, TOKEN + " two\n"),
                                               (0o600, "x" * 20_000)])
def test_a_token_file_the_reader_refuses_opens_nothing(tmp_path: Path, mode: int, content: str) -> None:
    f = tmp_path / "token"
    f.write_text(content)
    f.chmod(mode)
    assert _statuses(DataAccess(str(f)), [TOKEN]) == [403]
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    assert _statuses(DataAccess(str(f)), [TOKEN]) == [200]


def test_wrong_tokens_lock_the_address_out_for_a_while(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    now = [0.0]
    access = DataAccess(str(f), clock=lambda: now[0])
    wrong = [f"guess-{i:04d}-0000000000000" for i in range(MAX_FAILED_PER_PEER + 3)]
    got = _statuses(access, ["", *wrong, TOKEN])  # no token at all is no guess
    assert got == [401] * (1 + MAX_FAILED_PER_PEER) + [429] * 4, got  # the right token too, while locked
    now[0] = GUESS_WINDOW_S + 1
    assert _statuses(access, [TOKEN]) == [200]


def test_guesses_are_counted_per_address_and_in_all() -> None:
    now = [0.0]
    g = Guesses(lambda: now[0])
    for _ in range(MAX_FAILED_PER_PEER):
        g.failed("10.0.0.1")
    assert g.locked("10.0.0.1") > 0 and g.locked("10.0.0.2") == 0
    for i in range(MAX_FAILED):
        g.failed(f"10.1.{i // 250}.{i % 250}")
    assert g.locked("10.0.0.3") > 0  # every address, once the agent has seen too many in all
    now[0] = GUESS_WINDOW_S + 0.1
    assert g.locked("10.0.0.1") == 0 and g.locked("10.0.0.3") == 0
