"""The agent app over a node image (the recorded host): endpoints, readiness, recorder, images.

The sources read the shared example image instead of this machine, so the test knows exactly what
the agent must serve: two healthy rails, ``net_rail0`` and ``net_rail1``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Awaitable, Callable
from itertools import pairwise
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.analysis import pipeline
from agent.analysis.diagnose import diagnose
from agent.config import AgentSettings, Expectations
from agent.host.recorded import open_image
from agent.readers.history import load_history
from agent.readers.kernel_table import load_kernel_table
from agent.readers.snapshot import take_snapshot
from agent.service.app import make_app
from agent.service.daemon import Agent

#: the data endpoints answer over TCP only with the bearer token of --data-token-file
TOKEN = "test-data-token-0123456789"
_TOKEN_DIR = tempfile.mkdtemp(prefix="railscope-test-token-")
TOKEN_FILE = os.path.join(_TOKEN_DIR, "token")
with open(TOKEN_FILE, "w") as _fh:
    _fh.write(TOKEN + "\n")
os.chmod(TOKEN_FILE, 0o600)  # the token-file reader opens nothing for a file others may read
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _agent(image: Path, **kw: object) -> Agent:
    kw.setdefault("data_token_file", TOKEN_FILE)
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("counters", 0.2), ("links", 1.0)),
                             watch_links=False, node="gpu-node-7", **kw)  # type: ignore[arg-type]
    return Agent(settings, host_factory=lambda: open_image(str(image)))


def _serve(agent: Agent, body: Callable[[TestClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(TestServer(make_app(agent)), headers=AUTH) as client:
            await body(client)

    asyncio.run(main())


async def _until_ready(client: TestClient) -> None:
    for _ in range(200):
        resp = await client.get("/readyz")
        if resp.status == 200:
            return
        assert resp.status == 503
        await asyncio.sleep(0.02)
    raise AssertionError("the agent never became ready")


def test_endpoints_serve_the_latest_sample(example_image: Path) -> None:
    agent = _agent(example_image)

    async def body(client: TestClient) -> None:
        assert (await client.get("/healthz")).status == 200
        await _until_ready(client)
        resp = await client.get("/metrics")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
        assert "railscope_sample_age_seconds " in text
        assert 'railscope_scrape_collector_success{source="links"} 1.0' in text
        for rail in ("net_rail0", "net_rail1"):
            assert f'device="{rail}"' in text
        assert 'railscope_events_total{code="LinkFlapping"} 0.0' in text
        assert "railscope_agent_link_queue_capacity 4096.0" in text
        assert 'node="' not in text  # Prometheus target labels name the node, never the agent
        events = await (await client.get("/v1/events")).json()
        assert events == {"events": []}

    _serve(agent, body)


def test_the_recorder_keeps_one_line_per_rail_per_sample(example_image: Path) -> None:
    agent = _agent(example_image)

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        await asyncio.sleep(0.7)
        text = await (await client.get("/v1/recorder")).text()
        lines = [json.loads(x) for x in text.splitlines()]
        assert {x["netdev"] for x in lines} == {"net_rail0", "net_rail1"}
        assert len(lines) >= 4
        rail0 = [x for x in lines if x["netdev"] == "net_rail0"]
        assert "tx_prio3_pause" in rail0[-1]["counters"]
        assert all(a["ts"] <= b["ts"] for a, b in pairwise(rail0))

    _serve(agent, body)


def test_recorder_off_is_a_404(example_image: Path) -> None:
    agent = _agent(example_image, recorder_window_s=0)

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        assert (await client.get("/v1/recorder")).status == 404

    _serve(agent, body)


@pytest.mark.slow
def test_a_node_image_recorded_by_the_agent_replays_to_the_same_diagnosis(example_image: Path,
                                                                          tmp_path: Path) -> None:
    agent = _agent(example_image)
    got: dict[str, bytes] = {}

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        await asyncio.sleep(0.5)
        resp = await client.get("/v1/image", params={"reason": "test"})
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"] == "application/gzip"
        got["tar"] = await resp.read()

    _serve(agent, body)
    with tarfile.open(fileobj=io.BytesIO(got["tar"]), mode="r:gz") as tf:
        names = tf.getnames()
        top = names[0].split("/")[0]
        assert top.startswith("gpu-node-7-")
        assert f"{top}/recorder.jsonl" in names and f"{top}/events.json" in names
    path = tmp_path / "image.tar.gz"
    path.write_bytes(got["tar"])
    exp = Expectations()
    with open_image(str(path)) as host:
        manifest = host.manifest
        assert manifest is not None
        items = {it.path: it for it in manifest.items}
        assert "recorder.jsonl" in items and items["recorder.jsonl"].bytes > 0
        assert manifest.node == "gpu-node-7" and manifest.reason == "test"
        # the capture runner's whole bundle, every plug-in listed
        from agent.capture.plugins import PLUGINS

        assert [p["name"] for p in manifest.extra["plugins"]] == list(PLUGINS)
        history = load_history(host)
        assert history.recorder is not None and set(history.recorder.netdevs) == {"net_rail0", "net_rail1"}
        replayed = diagnose(take_snapshot(host), exp, events=history.events, recorder=history.recorder,
                            kernel_table=load_kernel_table())
    with open_image(str(example_image)) as host:
        original = diagnose(take_snapshot(host), exp, kernel_table=load_kernel_table())
    assert [r.netdev for r in replayed.rails] == [r.netdev for r in original.rails] == ["net_rail0", "net_rail1"]
    assert not [f for f in replayed.findings if f.severity in ("warning", "critical")]


def test_link_notes_of_a_pci_rail_raise_link_flapping_once(example_image: Path) -> None:
    """The path a real ConnectX rail takes: notes keyed by (PCI function, port), three carrier losses."""
    from agent.host.netlink.link_events import LinkNote

    agent = _agent(example_image)

    def note(downs: int, carrier: int, ts: float, name: str = "net_rail0", ifindex: int = 4,
             port: str = "p0", pci: str = "0000:0c:00.0") -> LinkNote:
        return LinkNote(ts=ts, ifindex=ifindex, ifname=name, deleted=False, admin_up=True,
                        operstate="UP" if carrier else "DOWN", carrier=carrier, carrier_down_count=downs,
                        phys_port_name=port, parent_dev=pci)

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        # Notes dated in the past, as the watcher's are: an event finding covers the window that
        # ends at the analysis, so an event dated after it is none yet.
        now = agent.clock() - 60.0
        # A representor flapping with its pod's VF is never a rail's flap.
        agent._on_notes([note(n, n % 2, now + n, "net_rail0_0", 6, "pf0vf0") for n in range(2, 12)])
        for n in range(3):
            agent._on_notes([note(2 + n, 0, now + 2 * n)])
            agent._on_notes([note(2 + n, 1, now + 2 * n + 1)])
        events = (await (await client.get("/v1/events")).json())["events"]
        assert [(e["code"], e["subject"], e["severity"]) for e in events] == [("LinkFlapping", "net_rail0", "warning")]
        text = await (await client.get("/metrics")).text()
        assert 'railscope_events_total{code="LinkFlapping"} 1.0' in text
        # The event is a current finding at once, not only after the next links sample.
        # (Waiting for that finding itself: the image's other findings are there before the analysis ends.)
        want = 'railscope_finding{code="LinkFlapping",severity="warning",subject="net_rail0"} 1.0'
        for _ in range(250):
            text = await (await client.get("/metrics")).text()
            if want in text:
                break
            await asyncio.sleep(0.02)
        assert want in text

    _serve(agent, body)


def test_fetch_image_unpacks_what_the_agent_serves(example_image: Path, tmp_path: Path) -> None:
    from agent.clients.agent import AgentClientError as AgentFetchError
    from agent.clients.agent import fetch_image

    agent = _agent(example_image)
    out = tmp_path / "img"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        url = str(client.make_url("/"))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: fetch_image(url, str(out), reason="test", token=TOKEN))
        try:
            await loop.run_in_executor(None, lambda: fetch_image(url, str(tmp_path / "full"), token=TOKEN))
        except AgentFetchError as exc:
            assert "refusing to overwrite" in str(exc)
        else:
            raise AssertionError("a non-empty directory was overwritten")
        try:
            await loop.run_in_executor(None, lambda: fetch_image(url + "nothing-here/", str(tmp_path / "y"), token=TOKEN))
        except AgentFetchError as exc:
            assert "HTTP 404" in str(exc)
        else:
            raise AssertionError("a 404 was taken for an image")

    _serve(agent, body)
    assert (out / "manifest.json").is_file() and (out / "recorder.jsonl").is_file()
    with open_image(str(out)) as host:
        assert [r.netdev for r in diagnose(take_snapshot(host), Expectations(), kernel_table=()).rails] == ["net_rail0", "net_rail1"]


def test_a_dump_older_than_a_link_message_does_not_count_a_loss_twice(example_image: Path) -> None:
    from agent.host.netlink.link_events import LinkNote

    agent = _agent(example_image)

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        stale = pipeline.Outcome(agent.snapshot, agent.topology, agent.diagnosis)  # net_rail0 carrier_down_count 1
        now = agent.clock()
        for n, (downs, carrier) in enumerate([(2, 0), (2, 1), (3, 0), (3, 1)]):
            agent._on_notes([LinkNote(ts=now + n, ifindex=4, ifname="net_rail0", deleted=False, admin_up=True,
                                      operstate="UP" if carrier else "DOWN", carrier=carrier,
                                      carrier_down_count=downs, phys_port_name="p0", parent_dev="0000:0c:00.0")])
            agent._apply_analysis(stale)  # a links sample read before the message, analysed after it
        assert agent.events.counts().get("LinkFlapping", 0) == 0  # two losses, not four

    _serve(agent, body)


def test_data_endpoints_refuse_tcp_without_the_token(example_image: Path, tmp_path: Path) -> None:
    agent = _agent(example_image)

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        for path in ("/v1/events", "/v1/recorder", "/v1/image"):
            plain = await client.get(path, headers={"Authorization": ""})
            assert plain.status == 401, path
            wrong = await client.get(path, headers={"Authorization": "Bearer not-the-token"})
            assert wrong.status == 401, path
        for path in ("/metrics", "/healthz", "/readyz"):
            assert (await client.get(path, headers={"Authorization": ""})).status == 200, path
        assert (await client.get("/v1/events")).status == 200  # with the token

    _serve(agent, body)

    # Without a token file nothing opens them over TCP.
    closed = _agent(example_image, data_token_file=None)

    async def body2(client: TestClient) -> None:
        await _until_ready(client)
        resp = await client.get("/v1/events", headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status == 403 and "Unix socket" in await resp.text()
        assert (await client.get("/metrics")).status == 200

    _serve(closed, body2)


def test_the_data_socket_serves_them_without_a_token(example_image: Path, tmp_path: Path) -> None:
    import stat

    import aiohttp
    from aiohttp import web

    from agent.service.app import _unix_site

    agent = _agent(example_image, data_token_file=None)
    sock = str(tmp_path / "run/agent.sock")

    async def main() -> None:
        runner = web.AppRunner(make_app(agent))
        await runner.setup()
        await _unix_site(runner, sock).start()
        try:
            assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock)) as s:
                for _ in range(200):
                    if (await s.get("http://agent/readyz")).status == 200:
                        break
                    await asyncio.sleep(0.02)
                resp = await s.get("http://agent/v1/events")
                assert resp.status == 200 and "events" in await resp.json()
        finally:
            await runner.cleanup()

    asyncio.run(main())

    # railscope capture --agent unix:PATH takes the events from there (and so would kubectl exec).
    from agent.clients.agent import AgentClient

    async def main2() -> None:
        runner = web.AppRunner(make_app(agent))
        await runner.setup()
        await _unix_site(runner, sock).start()
        try:
            loop = asyncio.get_running_loop()
            for _ in range(200):
                if agent.ready:
                    break
                await asyncio.sleep(0.02)
            client = AgentClient("unix:" + sock)
            events = await loop.run_in_executor(None, client.events)
            recorder = await loop.run_in_executor(None, client.recorder)
            assert events == [] and recorder is not None
        finally:
            await runner.cleanup()

    asyncio.run(main2())


@pytest.mark.slow
def test_event_captures_land_in_the_spool_once_per_cooldown_and_the_cap_drops_the_oldest(
        example_image: Path, tmp_path: Path) -> None:
    from agent.capture.spool import Spool
    from agent.model import Event

    spool_dir = tmp_path / "spool"
    agent = _agent(example_image, capture_on=frozenset({"LinkFlapping", "PfcStorm"}), capture_cooldown_s=600.0,
                   spool_dir=str(spool_dir), spool_max_bytes=10 << 20)

    def ev(code: str) -> Event:
        return Event(ts=agent.clock(), code=code, severity="warning", subject="net_rail0", message=f"{code} test")

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        loop = asyncio.get_running_loop()
        for _ in range(5):
            agent._emit(ev("LinkFlapping"))  # a storm: one capture
        agent._emit(ev("RepresentorStale"))  # not configured: none
        assert await loop.run_in_executor(None, agent.captures.idle)
        entries = Spool(str(spool_dir), 10 << 20).entries()
        assert len(entries) == 1
        meta = entries[0].meta
        assert meta["node"] == "gpu-node-7" and meta["incident"].startswith("linkflapping-")
        assert meta["reason"].startswith("event LinkFlapping")
        from proto.keys import bundle_id

        assert meta["bundle"] == bundle_id(meta["incident"], "gpu-node-7", meta["plan"]) and meta["plan"]
        text = await (await client.get("/metrics")).text()
        assert 'railscope_captures_total{outcome="ok",trigger="event"} 1.0' in text
        assert "railscope_spool_dropped_total 0.0" in text
        # the cap: a second bundle (another code) that does not fit beside the first drops the first
        agent.captures.spool.max_bytes = entries[0].bytes + 1000  # type: ignore[union-attr]
        agent._emit(ev("PfcStorm"))
        assert await loop.run_in_executor(None, agent.captures.idle)
        left = Spool(str(spool_dir), 10 << 20).entries()
        assert [e.meta["incident"].split("-")[0] for e in left] == ["pfcstorm"]
        text = await (await client.get("/metrics")).text()
        assert "railscope_spool_dropped_total 1.0" in text

    _serve(agent, body)


def test_a_firmware_read_hung_in_a_capture_is_exported_and_skipped_by_the_next(example_image: Path) -> None:
    agent = _agent(example_image)
    agent.captures.hung.add(("counters", "net_rail0"))

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        text = await (await client.get("/metrics")).text()
        assert 'railscope_source_hung{device="net_rail0",source="counters"} 1.0' in text

    _serve(agent, body)
    from dataclasses import replace

    from agent.capture.job import Job

    shared = replace(agent.captures.shared(), hung_tools=frozenset({("devlink", "pci/0000:0c:00.0")}))
    params = Job.for_image("test", None, "gpu-node-7", agent.settings).params(shared)
    assert params.skip_firmware == frozenset({"net_rail0", "pci/0000:0c:00.0"})
    assert params.hung_tools == frozenset({("devlink", "pci/0000:0c:00.0")})
    assert params.recorder_jsonl is not None and params.events == []


def test_a_node_without_rails_is_ready_with_a_warning_and_serves_railscope_rails_0(
        caplog: pytest.LogCaptureFixture) -> None:
    """Netdevs no template matches and no rule (the image's recorded map is the capturing agent's, not this
    one's): the agent serves, says on /readyz and in one log line that it found no rail, and railscope_rails is
    0; with --rail-map the rails are found by PCI function and the warning is gone."""
    from agent.config import ReadConfig

    image = Path(__file__).resolve().parents[2] / "images" / "rail-map-pci-healthy"
    rail_map = ((0, "0000:0c:00.0"), (1, "0000:8d:00.0"))
    got: dict[str, object] = {}

    def body(key: str) -> Callable[[TestClient], Awaitable[None]]:
        async def run(client: TestClient) -> None:
            await _until_ready(client)
            got[key] = (await (await client.get("/readyz")).json(), await (await client.get("/metrics")).text())
        return run

    with caplog.at_level("WARNING", logger="railscope.agent"):
        _serve(_agent(image), body("none"))
    ready, text = got["none"]  # type: ignore[misc]
    assert ready["status"] == "ready" and ready["warnings"][0].startswith("no rails found: ")
    assert "\nrailscope_rails 0.0\n" in text and "railscope_rail_up{" not in text
    assert [r.getMessage() for r in caplog.records if r.name == "railscope.agent"] == [ready["warnings"][0]]
    _serve(_agent(image, expectations=Expectations(rail_map=rail_map), read=ReadConfig(rail_map=rail_map)),
           body("mapped"))
    ready, text = got["mapped"]  # type: ignore[misc]
    assert "warnings" not in ready and "\nrailscope_rails 2.0\n" in text
    assert 'railscope_rail_up{device="enp12s0f0np0",plane="",rail="0"} 1.0' in text
