"""The bundle API: list, fetch, verify, each for operators only; paths checked before the store sees them."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.collector_helpers import (
    AGENT_TOKEN,
    ALERTING_TOKEN,
    HELLO,
    body,
    get,
    local_settings,
    post,
    run,
    running,
)

DATA = os.urandom(50_000)
OTHER = replace(HELLO, bundle="b2", incident="inc-2", created=HELLO.created + 86400)


def _store_two(url: str):
    async def go() -> None:
        assert (await post(url, body(HELLO, DATA)))[0] == 200
        assert (await post(url, body(OTHER, DATA[::-1])))[0] == 200

    return go()


def test_list_filters_and_fetch_with_sha256(tmp_path: Path) -> None:
    async def go() -> dict:
        out = {}
        async with running(local_settings(tmp_path)) as (url, _col):
            await _store_two(url)
            for name, q in (("all", ""), ("inc", "?incident=inc-2"), ("date", "?date=2026-12-01"),
                            ("node", "?cluster=prod-east&node=gpu-node-017"), ("none", "?node=gpu-node-999")):
                s, raw, _h = await get(url, "/v1/bundles" + q)
                assert s == 200
                out[name] = [b["key"] for b in json.loads(raw)["bundles"]]
            key = json.loads((await get(url, "/v1/bundles?incident=inc-1"))[1])["bundles"][0]
            out["entry"] = key
            out["blob"] = await get(url, "/v1/bundles/" + key["key"])
            out["sha"] = await get(url, "/v1/bundles/" + key["key"] + ".sha256")
        return out

    out = run(go())
    assert len(out["all"]) == 2 and out["none"] == []
    assert out["inc"] == [k for k in out["all"] if "/inc-2/" in k]
    assert out["date"] == [k for k in out["all"] if "/2026-12-01/" in k] and len(out["date"]) == 1
    assert len(out["node"]) == 2
    entry = out["entry"]
    assert entry["sha256"] == hashlib.sha256(DATA).hexdigest() and entry["bytes"] == len(DATA)
    assert (entry["node"], entry["incident"], entry["bundle"]) == ("gpu-node-017", "inc-1", HELLO.bundle)
    s, blob, headers = out["blob"]
    assert s == 200 and blob == DATA and headers["X-Railscope-Sha256"] == entry["sha256"]
    s, sha, _h = out["sha"]
    assert sha.decode() == f"{entry['sha256']}  {entry['name']}\n"


def test_verify_rehashes_the_stored_object(tmp_path: Path) -> None:
    async def go() -> tuple[dict, dict]:
        async with running(local_settings(tmp_path)) as (url, _col):
            await _store_two(url)
            key = json.loads((await get(url, "/v1/bundles?incident=inc-1"))[1])["bundles"][0]["key"]
            good = json.loads((await get(url, f"/v1/bundles/{key}/verify", method="POST"))[1])
            path = tmp_path / "store" / key
            raw = bytearray(path.read_bytes())
            raw[100] ^= 1  # bit rot on the disk
            path.write_bytes(bytes(raw))
            bad = json.loads((await get(url, f"/v1/bundles/{key}/verify", method="POST"))[1])
            return good, bad

    good, bad = run(go())
    assert good["ok"] is True and good["sha256"] == good["recorded"]
    assert bad["ok"] is False and bad["sha256"] != bad["recorded"]


@pytest.mark.parametrize("path", [
    "/v1/bundles/prod-east/2026-12-01/inc-1/..%2F..%2Fetc%2Fpasswd",
    "/v1/bundles/prod-east/2026-12-01/../x.tar.gz",
    "/v1/bundles/PROD/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-b1.tar.gz",
    "/v1/bundles/prod-east/2026-13-01/inc-1/gpu-node-017-20261301T093823Z-b1.tar.gz",
    "/v1/bundles/prod-east/2026-12-01/inc-1/gpu-node-017-20261202T093823Z-b1.tar.gz",
    "/v1/bundles/prod-east/2026-12-01/inc-1/passwd",
    "/v1/bundles?cluster=../x",
    "/v1/bundles?date=yesterday",
    "/v1/bundles?owner=root",
])
def test_hostile_paths_and_filters_are_refused(tmp_path: Path, path: str) -> None:
    async def go() -> int:
        async with running(local_settings(tmp_path)) as (url, _col):
            return (await get(url, path))[0]

    assert run(go()) in (400, 404)


def test_missing_bundle_is_404(tmp_path: Path) -> None:
    async def go() -> int:
        async with running(local_settings(tmp_path)) as (url, _col):
            return (await get(url, "/v1/bundles/" + "prod-east/2026-12-01/inc-1/n-20261201T000000Z-b9.tar.gz"))[0]

    assert run(go()) == 404


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("bogus-token-xxxxxxxxxxxxxx", 401),
                                               (AGENT_TOKEN, 403), (ALERTING_TOKEN, 403)])
def test_reads_need_the_operator_role(tmp_path: Path, token: str | None, status: int) -> None:
    async def go() -> list[int]:
        async with running(local_settings(tmp_path)) as (url, _col):
            await _store_two(url)
            key = json.loads((await get(url, "/v1/bundles?incident=inc-1"))[1])["bundles"][0]["key"]
            return [(await get(url, "/v1/bundles", token=token))[0],
                    (await get(url, f"/v1/bundles/{key}", token=token))[0],
                    (await get(url, f"/v1/bundles/{key}/verify", token=token, method="POST"))[0]]

    assert run(go()) == [status] * 3
