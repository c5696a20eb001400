"""The agent pulls capture requests from a real collector, captures in process, uploads, says done.

The agent reads the shared example image (a recorded host), so its capture is the real capture
runner over that image; the collector is the real app on a loopback port with the local store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from agent.capture.job import Job
from agent.config import AgentSettings
from agent.host.recorded import open_image
from agent.service import pull
from agent.service.daemon import Agent
from agent.service.pull import parse_request
from proto.keys import bundle_id
from proto.requests import CaptureRequest, RequestError
from tests.support.alerts import alert, payload
from tests.support.collector_helpers import AGENT_TOKEN, ALERTING_TOKEN, local_settings, running

NODE = "gpu-node-017"


def _agent(image: Path, **kw: object) -> Agent:
    settings = AgentSettings(listen="127.0.0.1", port=0, watch_links=False, node=NODE, cluster="prod-east",
                             **kw)  # type: ignore[arg-type]
    return Agent(settings, host_factory=lambda: open_image(str(image)))


async def _post_alert(url: str) -> dict:
    body = payload([alert(NODE, severity="critical")])
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/alerts", data=body,
                                                    headers={"Authorization": f"Bearer {ALERTING_TOKEN}"}) as r:
        assert r.status == 200
        return await r.json()


def _bundles(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*.tar.gz") if "_requests" not in p.parts)


def _request_docs(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((store / "_requests").rglob("*.json"))]


def _token(tmp_path: Path) -> str:
    f = tmp_path / "agent-token"
    f.write_text(AGENT_TOKEN + "\n")
    f.chmod(0o600)  # a token file readable by others is refused
    return str(f)


def test_an_alert_becomes_a_stored_bundle_of_that_node_and_incident(tmp_path: Path, example_image: Path) -> None:
    store = tmp_path / "store"

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            agent = _agent(example_image)
            puller = agent.request_puller(url, token_file=_token(tmp_path), wait_s=5)
            task = asyncio.create_task(puller.run())
            try:
                answer = await _post_alert(url)
                # A whole capture runs in between: generous for a loaded CI machine, done in ~1 s idle.
                for _ in range(2400):
                    if puller.served:
                        break
                    await asyncio.sleep(0.05)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return answer, puller.served, puller.errors

    answer, served, errors = asyncio.run(go())
    assert served == 1 and errors == 0
    (queued,) = answer["queued"]
    (bundle,) = _bundles(store)
    assert bundle.parent.name == queued["incident"] and bundle.parent.parent.parent.name == "prod-east"
    assert bundle.name.startswith(f"{NODE}-") and bundle.name.endswith(f"-{queued['id']}.tar.gz")
    digest, name = (bundle.parent / (bundle.name + ".sha256")).read_text().split()
    assert name == bundle.name and hashlib.sha256(bundle.read_bytes()).hexdigest() == digest
    (doc,) = _request_docs(store)
    assert doc["state"] == "done" and doc["bundle"].endswith(bundle.name)
    # The bundle is the capture runner's node image, with the incident in its manifest.
    import tarfile

    with tarfile.open(bundle) as tf:
        manifest = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        meta = json.load(tf.extractfile(manifest))  # type: ignore[arg-type]
    assert meta["incident"] == queued["incident"] and meta["node"] == NODE


def test_an_agent_killed_mid_capture_serves_the_request_after_its_restart_once(tmp_path: Path,
                                                                               example_image: Path) -> None:
    store = tmp_path / "store"
    started = threading.Event()
    release = threading.Event()

    def stuck(job: Job, work: str) -> pull.Captured:
        started.set()
        release.wait(30)
        raise RuntimeError("killed")

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            first = _agent(example_image).request_puller(url, token_file=_token(tmp_path), run=stuck, wait_s=5)
            task = asyncio.create_task(first.run())
            await _post_alert(url)
            while not started.is_set():
                await asyncio.sleep(0.02)
            task.cancel()  # the agent dies in the middle of the capture
            await asyncio.gather(task, return_exceptions=True)
            release.set()
            pending = [d["state"] for d in _request_docs(store)]
            second = _agent(example_image).request_puller(url, token_file=_token(tmp_path), wait_s=5)
            task = asyncio.create_task(second.run())
            for _ in range(600):
                if second.served:
                    break
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return pending, second.served

    pending, served = asyncio.run(go())
    assert pending == ["pending"] and served == 1
    assert len(_bundles(store)) == 1 and [d["state"] for d in _request_docs(store)] == ["done"]


@pytest.mark.slow
def test_a_capture_stored_before_the_agent_died_is_not_stored_twice(tmp_path: Path, example_image: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            first = _agent(example_image).request_puller(url, token_file=_token(tmp_path), wait_s=5)

            async def dies(*_a: object) -> str:
                raise asyncio.CancelledError  # killed between the upload and the done call

            monkeypatch.setattr(first, "_done_call", dies)
            await _post_alert(url)
            async with first.client:
                (req,) = await first.poll()
                with pytest.raises(asyncio.CancelledError):
                    await first.serve(req)
            stored_once = _bundles(store)
            second = _agent(example_image).request_puller(url, token_file=_token(tmp_path), wait_s=5)
            async with second.client:
                (again,) = await second.poll()
                key = await second.serve(again)
            return stored_once, key

    stored_once, key = asyncio.run(go())
    assert len(stored_once) == 1
    # The second capture differs byte for byte (a later clock), so the collector answered 409, and
    # done found the first one by its id.
    assert _bundles(store) == stored_once and key.endswith(stored_once[0].name)
    assert [d["state"] for d in _request_docs(store)] == ["done"]


def _doc(**kw: object) -> dict:
    base = {"schema": "railscope.request/v1", "state": "pending",
            "id": bundle_id("inc-1", NODE, "node-bundle/v1"), "incident": "inc-1", "node": NODE,
            "plan": "node-bundle", "plan_version": 1, "params": {"pod_netns": False, "redact": False},
            "created": 1796000000, "expires": 1796001800, "alertname": "A", "source": "alert"}
    return {**base, **kw}


def test_the_agent_runs_only_the_plans_it_ships() -> None:
    assert parse_request(_doc(), NODE).plan_ref == "node-bundle/v1"
    netns = _doc(params={"pod_netns": True}, id=bundle_id("inc-1", NODE, "node-bundle/v1;pod_netns=true"))
    assert parse_request(netns, NODE).params["pod_netns"] is True
    for bad in (_doc(node="gpu-node-018"), _doc(plan="shell"), _doc(plan_version=2),
                _doc(params={"argv": ["sh", "-c", "id"]}), _doc(params={"pod_netns": "yes"}),
                _doc(id="b" + "0" * 24), _doc(incident="../x"), _doc(created="now"), "not a dict"):
        with pytest.raises(RequestError):
            parse_request(bad, NODE)


def test_the_agent_runs_only_its_own_clusters_requests() -> None:
    """A request naming another cluster is another machine's of the same node name: refused. One
    naming none (an older collector's) is the agent's."""
    assert parse_request(_doc(cluster="lab"), NODE, "lab").cluster == "lab"
    assert parse_request(_doc(), NODE, "lab").cluster == ""
    with pytest.raises(RequestError, match="of cluster 'prod', not this node's cluster 'lab'"):
        parse_request(_doc(cluster="prod"), NODE, "lab")


def test_collector_flags_need_a_node(example_image: Path) -> None:
    agent = _agent(example_image)
    with pytest.raises(ValueError):
        replace_settings(agent, node=None).request_puller("http://127.0.0.1:1")


def replace_settings(agent: Agent, **kw: object) -> Agent:
    agent.settings = replace(agent.settings, **kw)  # type: ignore[misc]
    return agent


@pytest.mark.slow
def test_railscope_capture_queues_a_request_and_waits_for_its_bundle(tmp_path: Path, example_image: Path) -> None:
    import os
    import subprocess

    from tests.support.collector_helpers import OPERATOR_TOKEN

    root = Path(__file__).resolve().parents[3]
    tokens = tmp_path / "op-token"
    tokens.write_text(OPERATOR_TOKEN + "\n")
    bad = tmp_path / "bad-token"
    bad.write_text("not-an-operator-token-at-all\n")
    tokens.chmod(0o600)
    bad.chmod(0o600)

    async def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent.cli", "capture", *argv, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(root)}, cwd=root)
        out, err = await proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode or 0, out.decode(), err.decode())

    async def go() -> tuple:
        async with running(local_settings(tmp_path)) as (url, _col):
            puller = _agent(example_image).request_puller(url, token_file=_token(tmp_path), wait_s=5)
            task = asyncio.create_task(puller.run())
            try:
                waited = await cli("--node", NODE, "--incident", "inc-77", "--collector", url, "--wait",
                                   "--operator-token-file", str(tokens), "--wait-timeout", "60")
                queued = await cli("--node", "gpu-node-018", "--incident", "inc-78", "--collector", url,
                                   "--operator-token-file", str(tokens))
                refused = await cli("--node", NODE, "--incident", "inc-79", "--collector", url,
                                    "--operator-token-file", str(bad))
                no_incident = await cli("--node", NODE, "--collector", url, "--operator-token-file", str(tokens))
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            return waited, queued, refused, no_incident

    waited, queued, refused, no_incident = asyncio.run(go())
    assert waited.returncode == 0, waited.stderr
    key = waited.stdout.strip()
    assert key.startswith("prod-east/") and "/inc-77/" in key and (tmp_path / "store" / key).is_file()
    assert queued.returncode == 0 and queued.stdout.strip() == bundle_id("inc-78", "gpu-node-018", "node-bundle/v1")
    assert refused.returncode == 1 and "401" in refused.stderr
    assert no_incident.returncode == 3


def test_a_local_capture_of_the_same_cause_answers_the_alerts_request(tmp_path: Path, example_image: Path) -> None:
    import time as _time

    from aiohttp.test_utils import TestServer

    from agent.model import Event
    from agent.service.app import make_app

    store = tmp_path / "store"

    async def go() -> list:
        async with running(local_settings(tmp_path)) as (url, _col):
            # The whole agent app: its spool upload and its request puller run with it.
            agent = _agent(example_image, spool_dir=str(tmp_path / "spool"), capture_on=frozenset({"LinkFlapping"}),
                           collector_url=url, collector_token_file=_token(tmp_path))
            server = TestServer(make_app(agent))
            await server.start_server()
            try:
                # The detector's event captures into the spool, under an incident derived from the event.
                assert agent.captures.on_event(Event(_time.time(), "LinkFlapping", "warning", "net_rail0"), NODE)
                await _post_alert(url)
                for _ in range(1200):
                    docs = _request_docs(store)
                    if docs and docs[0]["state"] == "done":
                        break
                    await asyncio.sleep(0.05)
            finally:
                await server.close()
            return _request_docs(store)

    (doc,) = asyncio.run(go())
    event, filed = sorted(_bundles(store), key=lambda p: not p.parent.name.startswith("linkflapping-"))
    assert event.parent.name.startswith("linkflapping-")  # the event's incident keeps its bundle
    # ... and the alert's incident gets the same bytes under the request's id: no second capture
    assert filed.parent.name == doc["incident"] and filed.read_bytes() == event.read_bytes()
    assert doc["state"] == "done" and doc["bundle"].endswith(filed.name) and filed.name.endswith(f"-{doc['id']}.tar.gz")
    assert not list((tmp_path / "spool").glob("*.tar.gz"))  # sent, then removed from the spool


REQUEST_VECTORS = json.loads((Path(__file__).resolve().parents[3] / "proto" / "vectors" / "requests.json")
                             .read_text())["vectors"]


@pytest.mark.parametrize("vec", REQUEST_VECTORS, ids=[v["name"] for v in REQUEST_VECTORS])
def test_the_agent_reads_the_request_vectors_byte_for_byte(vec: dict) -> None:
    try:
        doc = json.loads(vec["json"])
    except ValueError:
        assert vec["error"] == "not_json"
        return
    if vec.get("error") == "too_large":
        # a stored document's cap: the collector never serves one, and a poll's answer has its own cap
        with pytest.raises(RequestError):
            pull.CaptureRequest.loads(vec["json"].encode())
        return
    if "error" in vec:
        with pytest.raises(RequestError) as info:
            parse_request(doc, NODE)
        assert info.value.code == vec["error"]
        return
    req = parse_request(doc, NODE)
    assert req.to_json() == vec["request"]
    assert req.dumps() == vec.get("canonical_json", vec["json"]).encode()
    assert req.plan_ref == vec["plan_ref"]
    with pytest.raises(RequestError) as info:
        parse_request(doc, "gpu-node-018")
    assert info.value.code == "node"


def test_the_puller_polls_the_vectors_a_collector_holds(tmp_path: Path, example_image: Path) -> None:
    """The collector's answer to a poll, parsed by the agent, is each stored vector byte for byte."""
    store = tmp_path / "store"
    ok = [v for v in REQUEST_VECTORS if "request" in v and v["request"]["state"] == "pending"]
    for vec in ok:
        (store / vec["key"]).parent.mkdir(parents=True, exist_ok=True)
        (store / vec["key"]).write_bytes(vec["json"].encode())

    async def go() -> list[CaptureRequest]:
        async with running(local_settings(tmp_path)) as (url, _col):
            puller = _agent(example_image).request_puller(url, token_file=_token(tmp_path), wait_s=0)
            async with puller.client:
                return await puller.poll()

    got = asyncio.run(go())
    # The collector serves a node its oldest pending request, one at a time: byte for byte that vector's.
    mine = sorted((v for v in ok if v["request"]["node"] == NODE),
                  key=lambda v: (v["request"]["created"], v["request"]["id"]))
    assert [r.dumps() for r in got] == [mine[0].get("canonical_json", mine[0]["json"]).encode()]


def test_every_event_code_has_its_alert_for_a_request_to_reuse() -> None:
    """A request for an event's alert reuses the node's local capture of that event: every event code
    is in the map (NicHealthError was once missing), and the rules name each alert the same way."""
    import yaml

    from agent.findings import EVENT_CODES

    assert {pull.ALERT_EVENTS[f"Railscope{code}"] for code in EVENT_CODES} == set(EVENT_CODES)
    assert pull.ALERT_EVENTS["RailscopeNicHealthError"] == "NicHealthError"
    rules = yaml.safe_load((Path(__file__).resolve().parents[3] / "deploy" / "prometheus" /
                            "railscope-rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    # every event the detectors raise as an alert of its own is mapped back to its code
    for name in alerts:
        if name.removeprefix("Railscope") in EVENT_CODES:
            assert pull.ALERT_EVENTS[name] == name.removeprefix("Railscope")
    assert {f"Railscope{c}" for c in EVENT_CODES if c != "DriverReload"} <= alerts


def test_the_daemon_has_one_collector_client_for_its_uploads_and_its_requests(example_image: Path) -> None:
    """One session per app: the puller uses the daemon's client, which the daemon closes when it stops."""
    from aiohttp import web

    agent = _agent(example_image, collector_url="http://127.0.0.1:9")
    puller = pull.attach(web.Application(), agent)
    assert puller is not None and agent.collector is not None and puller.client is agent.collector

    async def go() -> bool:
        session = agent.collector.session  # type: ignore[union-attr]
        await agent.stop()
        return session.closed

    assert asyncio.run(go())
    assert _agent(example_image).collector is None  # no --collector, no client


def test_a_refused_poll_and_upload_are_series_of_the_agent(tmp_path: Path, example_image: Path) -> None:
    """A token bound to another node (403) and a token the collector does not know (401) are counted by
    call and outcome on /metrics, not only logged; so are the spool's bundles."""
    from prometheus_client import CollectorRegistry, generate_latest

    from agent.clients.collector import CollectorClient, CollectorError
    from agent.service.selfmetrics import AgentMetrics
    from tests.support.collector_helpers import AGENT_TOKEN_18, HELLO

    other = tmp_path / "other-node-token"
    other.write_text(AGENT_TOKEN_18 + "\n")
    other.chmod(0o600)
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(b"x" * 1000)

    async def go() -> Agent:
        async with running(local_settings(tmp_path)) as (url, _col):
            agent = _agent(example_image)
            puller = agent.request_puller(url, token_file=str(other), wait_s=1)
            async with puller.client:
                with pytest.raises(CollectorError) as exc:
                    await puller.poll()
                assert exc.value.status == 403
            async with CollectorClient(url, token="not-a-token", outcomes=agent.collector_outcomes) as client:
                with pytest.raises(CollectorError):
                    await client.upload(HELLO, bundle)
            return agent

    agent = asyncio.run(go())
    assert agent.collector_outcomes.counts() == {("poll", "403"): 1, ("upload", "401"): 1}
    reg = CollectorRegistry()
    reg.register(AgentMetrics(agent))
    text = generate_latest(reg).decode()
    assert 'railscope_agent_collector_calls_total{call="poll",outcome="403"} 1.0' in text
    assert 'railscope_agent_collector_calls_total{call="upload",outcome="401"} 1.0' in text


def test_the_spool_outcomes_are_series_of_the_agent(tmp_path: Path, example_image: Path) -> None:
    """One spooled bundle stored, one refused for good (another node's bundle under this node's token:
    403), counted by outcome; the refused one is in rejected/, the stored one gone from the spool."""
    import os
    import time

    from tests.support.collector_helpers import HELLO, spool_bundle

    spool = tmp_path / "spool"
    now = time.time()
    spool_bundle(spool, replace(HELLO, bundle="bmine0001"), os.urandom(2000), now - 2)
    spool_bundle(spool, replace(HELLO, bundle="btheirs01", node="gpu-node-018"), os.urandom(2000), now - 1)

    async def go() -> Agent:
        async with running(local_settings(tmp_path)) as (url, _col):
            agent = _agent(example_image, spool_dir=str(spool), collector_url=url,
                           collector_token_file=_token(tmp_path))
            task = asyncio.create_task(agent.uploader.run())
            try:
                for _ in range(400):
                    if sum(agent.uploader.outcomes.values()) >= 2:
                        break
                    await asyncio.sleep(0.05)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await agent.stop()  # closes the daemon's collector client
            return agent

    agent = asyncio.run(go())
    assert dict(agent.uploader.outcomes) == {"stored": 1, "rejected": 1}
    assert agent.collector_outcomes.counts() == {("upload", "ok"): 1, ("upload", "403"): 1}
    assert [p.name for p in spool.glob("*.tar.gz")] == []
    assert [p.name for p in (spool / "rejected").glob("*.tar.gz")] == ["gpu-node-018-btheirs01.tar.gz"]
