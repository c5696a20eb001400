"""Two collector processes on one store: uploads through either, listings through either, agree; the
same bundle finished through both at once is stored once."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.collector_env import BUCKET, Collector, Weed, running_weed

from tests.support.collector_helpers import HELLO, body, get, post, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_two_replicas_agree(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    extra: dict = {}
    if kind == "s3":
        extra["endpoint"] = request.getfixturevalue("weed").endpoint
        store = f"s3://{BUCKET}/railscope"
    else:
        store = str(tmp_path / "store")
    # Every upload here is one node's, four at once per replica: its per-node cap lifted.
    args = ("--part-size", "5M", "--max-inflight-per-node", "8")
    a = Collector(tmp_path, store, *args, tokens=tokens, **extra).start()
    b = Collector(tmp_path, store, *args, tokens=tokens, **extra).start()
    hellos = [replace(HELLO, bundle=f"b{i}", incident=f"inc-{i % 3}") for i in range(8)]
    big = os.urandom(11 * MiB)
    contested = replace(HELLO, bundle="bcontested")

    async def go() -> tuple[list[int], list[dict], list[list[str]], list[tuple[int, dict, dict]]]:
        # half the uploads through each replica, at once
        stored = await asyncio.gather(*(post((a if i % 2 else b).url, body(h, os.urandom(200_000) + bytes([i])))
                                        for i, h in enumerate(hellos)))
        # one bundle id, different bytes, finished through both replicas at the same moment
        race = await asyncio.gather(post(a.url, body(contested, big, chunk=MiB)),
                                    post(b.url, body(contested, big[::-1], chunk=MiB)))
        listings = []
        for col in (a, b):
            for q in ("", "?incident=inc-1", f"?node={HELLO.node}&cluster={HELLO.cluster}"):
                doc = json.loads((await get(col.url, "/v1/bundles" + q))[1])
                listings.append(sorted(f"{x['key']} {x['sha256']}" for x in doc["bundles"]))
        return [s for s, _d, _h in stored], [], listings, race

    try:
        statuses, _x, listings, race = asyncio.run(go())
    finally:
        a.stop()
        b.stop()
    assert statuses == [200] * 8
    every = listings[0]
    assert len(every) == 9  # eight plus the contested one, once
    assert listings[0] == listings[3] and listings[1] == listings[4] and listings[2] == listings[5]
    assert len(listings[1]) == 4  # b1, b4, b7 and the contested one (HELLO is inc-1)
    codes = sorted(s for s, _d, _h in race)
    assert codes == [200, 409], race
    if kind == "s3":
        w = request.getfixturevalue("weed")
        assert len(w.objects()) == 18 and w.uploads() == []
