"""``POST /v1/alerts``, ``GET /v1/requests`` (long poll), operator requests and ``…/done`` on the real app.

A real collector on a loopback port with the local store; two replicas on one store show that a
request queued through one is served by the other (one listing per replica).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from collector.app import make_app
from collector.requests import CaptureRequest
from collector.state import BOARD
from tests.support.alerts import alert, payload
from tests.support.alerts import call as _call
from tests.support.alerts import post_alerts as _alerts
from tests.support.collector_helpers import (
    AGENT_TOKEN,
    AGENT_TOKEN_18,
    HELLO,
    OPERATOR_TOKEN,
    body,
    local_settings,
    post,
    run,
    running,
)


def _requests(tmp_path: Path) -> list[Path]:
    root = tmp_path / "store" / "_requests"
    return sorted(p for p in root.rglob("*.json")) if root.exists() else []


GROUP = payload([alert("gpu-node-017"), alert("gpu-node-018", severity="critical"), alert(None)])


def test_alerts_queue_requests_in_the_store_once_however_often_posted(tmp_path: Path) -> None:
    async def go() -> list:
        answers = []
        async with running(local_settings(tmp_path)) as (url, _col):
            for _ in range(10):
                answers.append(await _alerts(url, GROUP))
        return answers

    answers = run(go())
    assert all(status == 200 for status, _ in answers)
    assert len(answers[0][1]["queued"]) == 2 and answers[0][1]["no_node"] == 1
    assert all(doc["queued"] == [] and doc["skipped"] == {"exists": 2} for _, doc in answers[1:])
    stored = [CaptureRequest.loads(p.read_bytes()) for p in _requests(tmp_path)]
    assert sorted(r.node for r in stored) == ["gpu-node-017", "gpu-node-018"]
    assert {r.id for r in stored} == {q["id"] for q in answers[0][1]["queued"]}


@pytest.mark.slow
def test_hostile_webhooks_are_refused_with_a_clear_status_and_nothing_queued(tmp_path: Path) -> None:
    async def go() -> list:
        out = []
        async with running(local_settings(tmp_path)) as (url, _col):
            out.append(await _alerts(url, GROUP, token=None))
            out.append(await _alerts(url, GROUP, token="not-a-known-token-at-all"))
            out.append(await _alerts(url, GROUP, token=AGENT_TOKEN))
            out.append(await _alerts(url, GROUP, token=OPERATOR_TOKEN))
            out.append(await _alerts(url, b'{"version": "4", "alerts": [}'))
            out.append(await _alerts(url, payload([alert("gpu-node-017", incident="../../../etc/passwd")])))
            out.append(await _alerts(url, payload([alert("gpu-node-017"), alert("gpu node 18")])))
            out.append(await _alerts(url, payload([{"status": "firing", "labels": {"node": "gpu-node-017"},
                                                    "startsAt": "2026-11-30T09:00:00Z"}])))
            out.append(await _alerts(url, b"[" + b"0," * (3 << 20) + b"0]"))
            # The collector still serves after all of that.
            out.append(await _alerts(url, payload([alert("gpu-node-017", status="resolved")])))
        return out

    got = [(status, doc.get("error")) for status, doc in run(go())]
    assert got == [(401, "unauthenticated"), (401, "unauthenticated"), (403, "forbidden"), (403, "forbidden"),
                   (400, "bad_json"), (422, "bad_label"), (422, "bad_label"), (400, "bad_alert"),
                   (413, "too_large"), (200, None)]
    assert _requests(tmp_path) == []


def test_an_agent_polls_for_its_own_node_only_and_is_answered_when_a_request_lands(tmp_path: Path) -> None:
    async def go() -> dict:
        out: dict = {}
        async with running(local_settings(tmp_path)) as (url, _col):
            out["other"] = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN_18)
            out["operator"] = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=OPERATOR_TOKEN)
            out["bad_node"] = await _call("GET", url + "/v1/requests?node=..&wait=0", token=AGENT_TOKEN)
            out["long"] = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=60", token=AGENT_TOKEN)
            out["empty"] = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            t0 = time.monotonic()
            waiting = asyncio.create_task(
                _call("GET", url + "/v1/requests?node=gpu-node-017&wait=30", token=AGENT_TOKEN))
            await asyncio.sleep(0.3)
            out["alert"] = await _alerts(url, GROUP)
            out["served"] = await waiting
            out["served_s"] = time.monotonic() - t0
        return out

    out = run(go())
    assert out["other"][0] == 403 and out["operator"][0] == 403 and out["bad_node"][0] == 400
    assert out["long"][0] == 400  # the poll is held under 55 s
    assert out["empty"] == (200, {"requests": [], "poll_interval_s": 2.0})
    status, doc = out["served"]
    assert status == 200 and [r["node"] for r in doc["requests"]] == ["gpu-node-017"]
    assert doc["requests"][0]["plan"] == "node-bundle" and "argv" not in json.dumps(doc)
    assert out["served_s"] < 5


@pytest.mark.slow
def test_a_request_queued_through_one_replica_reaches_an_agent_waiting_on_another(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)

    async def go() -> tuple:
        async with running(settings) as (url_a, _a), running(settings) as (url_b, _col_b):
            waiting = asyncio.create_task(
                _call("GET", url_b + "/v1/requests?node=gpu-node-018&wait=20", token=AGENT_TOKEN_18))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            await _alerts(url_a, GROUP)
            got = await waiting
            return got, time.monotonic() - t0

    (status, doc), took = run(go())
    assert status == 200 and [r["node"] for r in doc["requests"]] == ["gpu-node-018"]
    assert took < 2 * 2.0 + 1.0  # within one listing interval of replica b (2 s), with slack


def test_done_needs_the_stored_bundle_and_marks_the_request(tmp_path: Path) -> None:
    async def go() -> dict:
        out: dict = {}
        async with running(local_settings(tmp_path)) as (url, _col):
            _s, doc = await _alerts(url, GROUP)
            req = next(q for q in doc["queued"] if q["node"] == "gpu-node-017")
            done_url = f"{url}/v1/requests/gpu-node-017/{req['id']}/done"
            out["early"] = await _call("POST", done_url, token=AGENT_TOKEN, json_body={})
            out["other_agent"] = await _call("POST", done_url, token=AGENT_TOKEN_18, json_body={})
            hello = replace(HELLO, bundle=req["id"], incident=req["incident"], plan="node-bundle/v1")
            status, stored, _h = await post(url, body(hello, b"bundle bytes" * 100))
            out["upload"] = status, stored
            wrong = stored["key"].replace(req["id"], "b" + "0" * 24)
            out["wrong_key"] = await _call("POST", done_url, token=AGENT_TOKEN, json_body={"bundle": wrong})
            out["done"] = await _call("POST", done_url, token=AGENT_TOKEN, json_body={"bundle": stored["key"]})
            out["again"] = await _call("POST", done_url, token=AGENT_TOKEN, json_body={})
            out["show"] = await _call("GET", f"{url}/v1/requests/gpu-node-017/{req['id']}", token=OPERATOR_TOKEN)
            out["poll"] = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            # A re-capture after a restart got 409 from the upload: done without a key finds the bundle.
            req18 = next(q for q in doc["queued"] if q["node"] == "gpu-node-018")
            # A reused bundle (the node's own local capture) must be that node's.
            out["reused_other"] = await _call("POST", f"{url}/v1/requests/gpu-node-018/{req18['id']}/done",
                                              token=AGENT_TOKEN_18, json_body={"bundle": stored["key"], "reused": True})
            hello18 = replace(hello, bundle=req18["id"], node="gpu-node-018", incident=req18["incident"])
            await post(url, body(hello18, b"x" * 10), token=AGENT_TOKEN_18)
            out["found"] = await _call("POST", f"{url}/v1/requests/gpu-node-018/{req18['id']}/done",
                                       token=AGENT_TOKEN_18, json_body={})
        return out

    out = run(go())
    assert out["early"][0] == 409 and out["early"][1]["error"] == "not_stored"
    assert out["other_agent"][0] == 403
    assert out["upload"][0] == 200
    assert out["wrong_key"][0] == 400
    assert out["done"][0] == 200 and out["done"][1]["request"]["state"] == "done"
    assert out["done"][1]["request"]["bundle"] == out["upload"][1]["key"]
    assert out["again"][0] == 200 and out["show"][1]["request"]["state"] == "done"
    assert out["poll"][1]["requests"] == []
    assert out["reused_other"][0] == 400
    assert out["found"][0] == 200 and out["found"][1]["request"]["bundle"].endswith(".tar.gz")


def test_operators_ask_for_a_capture_by_plan_never_by_command(tmp_path: Path) -> None:
    async def go() -> list:
        async with running(local_settings(tmp_path)) as (url, _col):
            u = url + "/v1/requests"
            return [
                await _call("POST", u, token=OPERATOR_TOKEN, json_body={"node": "gpu-node-017", "incident": "inc-9"}),
                await _call("POST", u, token=OPERATOR_TOKEN, json_body={"node": "gpu-node-017", "incident": "inc-9"}),
                await _call("POST", u, token=AGENT_TOKEN, json_body={"node": "gpu-node-017", "incident": "inc-9"}),
                await _call("POST", u, token=OPERATOR_TOKEN, json_body={"node": "gpu-node-017", "incident": "inc-9",
                                                                         "plan": "shell"}),
                await _call("POST", u, token=OPERATOR_TOKEN, json_body={"node": "gpu-node-017", "incident": "inc-9",
                                                                         "params": {"argv": ["sh"]}}),
                await _call("POST", u, token=OPERATOR_TOKEN, json_body={"node": "Gpu/017", "incident": "inc-9"}),
                await _call("POST", u, token=OPERATOR_TOKEN, data=b"{" * 20000),
            ]

    got = run(go())
    assert got[0][0] == 201 and got[0][1]["request"]["source"] == "operator"
    assert got[1][0] == 200 and got[1][1]["created"] is False and got[1][1]["request"]["id"] == got[0][1]["request"]["id"]
    assert [g[0] for g in got[2:]] == [403, 400, 400, 400, 400]
    assert len(_requests(tmp_path)) == 1


def test_junk_in_the_request_directory_is_never_served(tmp_path: Path) -> None:
    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            await _alerts(url, GROUP)
            (path,) = [p for p in _requests(tmp_path) if "gpu-node-017" in str(p)]
            doc = json.loads(path.read_text())
            # Someone with bucket access rewrites the request: another node's id, then garbage.
            forged = path.parent / "b000000000000000000000000.json"
            forged.write_text(json.dumps({**doc, "plan": "node-bundle", "params": {"argv": ["sh", "-c", "id"]}}))
            (path.parent / "junk.json").write_bytes(b"\x00" * 100)
            # ... and a request of an older collector (no cluster) for another node's id
            legacy = tmp_path / "store" / "_requests" / "gpu-node-017" / "b000000000000000000000001.json"
            legacy.parent.mkdir(parents=True)
            legacy.write_text(json.dumps({k: v for k, v in doc.items() if k != "cluster"}))
            await asyncio.sleep(0.1)
            poll = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=3", token=AGENT_TOKEN)
            return poll, path.name

    (status, doc), name = run(go())
    assert status == 200 and [r["id"] + ".json" for r in doc["requests"]] == [name]


@pytest.mark.slow
def test_expired_requests_are_not_served(tmp_path: Path) -> None:
    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            await _alerts(url, GROUP)
            await _alerts(url, GROUP)
            (path,) = [p for p in _requests(tmp_path) if "gpu-node-017" in str(p)]
            doc = json.loads(path.read_text())
            path.write_text(json.dumps({**doc, "created": int(time.time()) - 4000, "expires": int(time.time()) - 10}))
            await asyncio.sleep(2.2)  # the replica's view is at most one listing interval old
            poll = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=3", token=AGENT_TOKEN)
            again = await _alerts(url, GROUP)
            return poll, again

    (status, doc), (_s, again) = run(go())
    assert status == 200 and doc["requests"] == []
    # Alertmanager's next resend queues it again, under the same id.
    assert [q["node"] for q in again["queued"]] == ["gpu-node-017"]


@pytest.mark.slow
def test_the_board_lists_once_per_interval_however_many_agents_wait(tmp_path: Path) -> None:
    async def go() -> tuple:
        app = make_app(local_settings(tmp_path))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as s:
                async def one() -> int:
                    async with s.get(f"{url}/v1/requests?node=gpu-node-017&wait=5",
                                     headers={"Authorization": f"Bearer {AGENT_TOKEN}"}) as r:
                        return r.status

                statuses = await asyncio.gather(*(one() for _ in range(50)))
            return statuses, app[BOARD].listings
        finally:
            await runner.cleanup()

    statuses, listings = run(go())
    # 50 agents held 5 s: about three listings (one per 2 s), not one per agent or per poll.
    assert statuses == [200] * 50 and 1 <= listings <= 4


def test_a_reused_event_capture_is_filed_under_the_alerts_incident(tmp_path: Path) -> None:
    """The agent answers an alert's request with its own event capture of the same cause: the bundle
    stored under the event's one-node incident is copied under the alert's incident and the request's
    bundle id, so the incident page lists it; the event's incident keeps its own."""
    import hashlib

    store = tmp_path / "store"

    async def go() -> dict:
        out: dict = {}
        async with running(local_settings(tmp_path)) as (url, _col):
            _s, doc = await _alerts(url, GROUP)
            req = next(q for q in doc["queued"] if q["node"] == "gpu-node-017")
            event = replace(HELLO, bundle="bevent000000000000000001", incident="linkflapping-20261201t093800z",
                            plan="node-bundle/v1")
            data = b"the event capture" * 1000
            status, stored, _h = await post(url, body(event, data))
            assert status == 200
            out["event_key"] = stored["key"]
            done_url = f"{url}/v1/requests/gpu-node-017/{req['id']}/done"
            out["done"] = await _call("POST", done_url, token=AGENT_TOKEN,
                                      json_body={"bundle": stored["key"], "reused": True})
            out["again"] = await _call("POST", done_url, token=AGENT_TOKEN,
                                       json_body={"bundle": stored["key"], "reused": True})
            out["incident"] = req["incident"]
            out["id"] = req["id"]
            out["data"] = data
        return out

    out = run(go())
    assert out["done"][0] == 200, out["done"]
    key = out["done"][1]["request"]["bundle"]
    _cluster, _date, incident, name = key.split("/")
    assert incident == out["incident"] and name.endswith(f"-{out['id']}.tar.gz")
    assert (store / key).read_bytes() == out["data"]
    assert (store / (key + ".sha256")).read_text().split()[0] == hashlib.sha256(out["data"]).hexdigest()
    assert (store / out["event_key"]).read_bytes() == out["data"]  # the event's incident keeps its bundle
    assert out["again"][1]["request"]["bundle"] == key


def test_an_operator_asking_again_after_a_capture_gets_a_new_request(tmp_path: Path) -> None:
    """While a request is pending, asking again is that request; once its bundle is stored, asking again
    is a second capture of the node in the incident, under a bundle id of its own."""

    async def go() -> dict:
        out: dict = {}
        async with running(local_settings(tmp_path)) as (url, _col):
            ask = {"node": "gpu-node-017", "incident": "inc-again"}
            out["first"] = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN, json_body=ask)
            out["pending"] = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN, json_body=ask)
            rid = out["first"][1]["request"]["id"]
            hello = replace(HELLO, bundle=rid, incident="inc-again", plan="node-bundle/v1")
            _status, stored, _h = await post(url, body(hello, b"first" * 100))
            await _call("POST", f"{url}/v1/requests/gpu-node-017/{rid}/done", token=AGENT_TOKEN,
                        json_body={"bundle": stored["key"]})
            out["second"] = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN, json_body=ask)
            out["second_pending"] = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN, json_body=ask)
            rid2 = out["second"][1]["request"]["id"]
            hello2 = replace(hello, bundle=rid2)
            out["upload2"] = await post(url, body(hello2, b"second, other bytes" * 100))
        return out

    out = run(go())
    assert out["first"][0] == 201 and out["pending"][0] == 200
    assert out["pending"][1]["request"]["id"] == out["first"][1]["request"]["id"]
    assert out["second"][0] == 201 and out["second"][1]["created"] is True
    assert out["second"][1]["request"]["id"] != out["first"][1]["request"]["id"]
    assert out["second_pending"][1]["request"]["id"] == out["second"][1]["request"]["id"], out["second_pending"]
    assert out["upload2"][0] == 200 and out["upload2"][1]["status"] == "stored"  # not a 409


def test_alerts_for_nodes_without_a_recent_agent_do_not_starve_capture_for_the_others(tmp_path: Path) -> None:
    """Twenty alerts naming nodes whose agent never polled (gone, never deployed) must not hold the
    cluster's in-flight cap: the node whose agent polls is still captured, the agentless ones are
    queued under a small cap of their own with a short TTL, and the answer names them."""
    ghosts = [alert(f"ghost-{i:03d}", incident=f"inc-ghost-{i:03d}") for i in range(20)]
    settings = local_settings(tmp_path)

    async def go() -> tuple:
        async with running(settings) as (url, _col):
            first = await _alerts(url, payload(ghosts, key="ghosts"))
            polled = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            live = await _alerts(url, payload([alert("gpu-node-017", incident="inc-live")], key="live"))
            again = await _alerts(url, payload(ghosts, key="ghosts"))
        return first, polled, live, again

    (s1, first), (s2, _), (s3, live), (s4, again) = run(go())
    assert (s1, s2, s3, s4) == (200, 200, 200, 200)
    assert [q["node"] for q in live["queued"]] == ["gpu-node-017"], live
    assert live["no_recent_agent"] == []
    cap = settings.alerts.absent_max_in_flight
    assert 0 < cap < 20
    assert len(first["queued"]) == cap
    assert sorted(first["no_recent_agent"]) == sorted(q["node"] for q in first["queued"])
    assert first["skipped"] == {"no_recent_agent_cap": 20 - cap}
    assert again["queued"] == [] and again["skipped"] == {"exists": cap, "no_recent_agent_cap": 20 - cap}
    stored = {r.node: r for r in (CaptureRequest.loads(p.read_bytes()) for p in _requests(tmp_path))}
    assert stored["gpu-node-017"].expires - stored["gpu-node-017"].created == settings.alerts.request_ttl_s
    ghost_ttls = {r.expires - r.created for n, r in stored.items() if n.startswith("ghost-")}
    assert ghost_ttls == {settings.alerts.absent_ttl_s} and settings.alerts.absent_ttl_s < settings.alerts.request_ttl_s


def test_a_poll_marks_the_node_once_a_minute_and_markers_of_nodes_gone_a_day_are_swept(tmp_path: Path) -> None:
    import os

    agents = tmp_path / "store" / "_agents" / "prod-east"  # the agent token's cluster

    async def go() -> tuple[list[str], list[str], float, float]:
        async with running(local_settings(tmp_path)) as (url, _col):
            for _ in range(5):
                await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=OPERATOR_TOKEN)
            marked = sorted(p.name for p in agents.iterdir())
            first = (agents / "gpu-node-017.json").stat().st_mtime_ns
            await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            again = (agents / "gpu-node-017.json").stat().st_mtime_ns
            (agents / "gone.json").write_text("{}")
            os.utime(agents / "gone.json", (time.time() - 2 * 86400,) * 2)
            (agents.parent / "gone-old.json").write_text("{}")  # an older collector's marker
            os.utime(agents.parent / "gone-old.json", (time.time() - 2 * 86400,) * 2)
            await _alerts(url, GROUP)
            return marked, sorted(p.name for p in agents.iterdir()), first, again

    marked, after, first, again = run(go())
    assert marked == ["gpu-node-017.json"]  # the operator's poll marks nothing
    assert first == again  # within the minute: no second write
    assert after == ["gpu-node-017.json"]
