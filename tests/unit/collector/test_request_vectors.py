"""The collector reads the request vectors of ``proto/vectors/requests.json`` byte for byte.

Each vector is written where the collector keeps requests (the local store's ``_requests/``), read back
by the request board, and served by the real app: the pending ones to the node's agent poll, every one
to ``GET /v1/requests/<node>/<id>``; the bad ones are never served.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from collector.requests import BOARD, CaptureRequest, RequestBoard
from collector.storage.local import LocalStore
from tests.support.collector_helpers import AGENT_TOKEN, OPERATOR_TOKEN, local_settings, running

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "proto" / "vectors" / "requests.json").read_text())
OK = [v for v in VECTORS["vectors"] if "request" in v]
BAD = [v for v in VECTORS["vectors"] if "error" in v]
NODE = "gpu-node-017"


def _store(root: Path) -> None:
    for vec in OK:
        path = root / vec["key"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(vec["json"].encode())
    for i, vec in enumerate(BAD):
        path = root / "_requests" / NODE / f"bbad{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(vec["json"].encode())


def test_the_board_reads_every_vector_and_rewrites_it_canonically(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)
    _store(tmp_path / "store")

    async def go() -> tuple[list[CaptureRequest], int]:
        board = RequestBoard(LocalStore(settings), clock=lambda: 1796117903.0)
        await board.refresh()
        return board.all(), board.bad_objects

    got, bad = asyncio.run(go())
    assert bad == len(BAD)
    by_key = {r.object_key(): r for r in got}
    assert sorted(by_key) == sorted(v["key"] for v in OK)
    for vec in OK:
        req = by_key[vec["key"]]
        assert req.to_json() == vec["request"], vec["name"]
        assert req.dumps() == vec.get("canonical_json", vec["json"]).encode(), vec["name"]


def test_the_app_serves_the_vectors_to_the_agent_and_the_operator(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)
    _store(tmp_path / "store")

    async def go() -> tuple[dict, dict[str, dict]]:
        async with running(settings) as (url, col), aiohttp.ClientSession() as s:
            del col
            shown = {}
            for vec in OK:
                *cluster, node, rid = vec["key"].removeprefix("_requests/").removesuffix(".json").split("/")
                query = f"?cluster={cluster[0]}" if cluster else ""
                async with s.get(f"{url}/v1/requests/{node}/{rid}{query}",
                                 headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as r:
                    assert r.status == 200, await r.text()
                    shown[vec["name"]] = (await r.json())["request"]
            # Polled last: a listing removes requests done more than a day ago (the done vector's).
            async with s.get(f"{url}/v1/requests?node={NODE}&wait=0",
                             headers={"Authorization": f"Bearer {AGENT_TOKEN}"}) as r:
                assert r.status == 200
                polled = await r.json()
            return polled, shown

    polled, shown = asyncio.run(go())
    pending = sorted((v["request"] for v in OK if v["request"]["state"] == "pending"
                      and v["request"]["node"] == NODE), key=lambda d: (d["created"], d["id"]))
    # A node is served its oldest pending request, one at a time (the collector's caps at serving).
    assert polled["requests"] == pending[:1]
    assert shown == {v["name"]: v["request"] for v in OK}


def test_the_app_writes_what_the_contract_encodes(tmp_path: Path) -> None:
    """An operator's request is stored as its canonical encoding: the bytes the agent side reads."""
    settings = local_settings(tmp_path)

    async def go() -> dict:
        async with running(settings) as (url, col), aiohttp.ClientSession() as s:
            assert col is not None
            async with s.post(f"{url}/v1/requests", json={"node": NODE, "incident": "inc-7",
                                                          "params": {"pod_netns": True}},
                              headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as r:
                assert r.status == 201, await r.text()
                return (await r.json())["request"]

    doc = asyncio.run(go())
    stored = (tmp_path / "store" / "_requests" / settings.cluster / NODE / f"{doc['id']}.json").read_bytes()
    assert stored == CaptureRequest.from_json(doc).dumps()
    assert CaptureRequest.loads(stored).plan_ref == "node-bundle/v1;pod_netns=true"
    assert BOARD is not None
