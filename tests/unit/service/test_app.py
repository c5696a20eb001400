"""The agent app over a node image (the recorded host): endpoints, readiness, recorder, images.

The sources read the shared example image instead of this machine, so the test knows exactly what
the agent must serve: two healthy rails, ``net_rail0`` and ``net_rail1``.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections.abc import Awaitable, Callable
from itertools import pairwise
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from agent.analysis import pipeline
from agent.analysis.diagnose import diagnose
from agent.config import AgentSettings, Expectations
from agent.host.recorded import open_image
from agent.readers.history import load_history
from agent.readers.snapshot import take_snapshot
from agent.service.app import make_app
from agent.service.daemon import Agent


def _agent(image: Path, **kw: object) -> Agent:
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("counters", 0.2), ("links", 1.0)),
                             watch_links=False, node="gpu-node-7", **kw)  # type: ignore[arg-type]
    return Agent(settings, host_factory=lambda: open_image(str(image)))


def _serve(agent: Agent, body: Callable[[TestClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(TestServer(make_app(agent))) as client:
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
        manifest = host.manifest or {}
        items = {it["path"]: it for it in manifest.get("items", [])}
        assert "recorder.jsonl" in items and items["recorder.jsonl"]["bytes"] > 0
        assert manifest.get("node") == "gpu-node-7" and manifest.get("reason") == "test"
        history = load_history(host)
        assert history.recorder is not None and set(history.recorder.netdevs) == {"net_rail0", "net_rail1"}
        replayed = diagnose(take_snapshot(host), exp, events=history.events, recorder=history.recorder)
    with open_image(str(example_image)) as host:
        original = diagnose(take_snapshot(host), exp)
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
        for _ in range(100):
            text = await (await client.get("/metrics")).text()
            if 'code="LinkFlapping"' in text and "railscope_finding{" in text:
                break
            await asyncio.sleep(0.02)
        assert 'railscope_finding{code="LinkFlapping",severity="warning",subject="net_rail0"} 1.0' in text

    _serve(agent, body)


def test_fetch_image_unpacks_what_the_agent_serves(example_image: Path, tmp_path: Path) -> None:
    from agent.service.client import AgentFetchError, fetch_image

    agent = _agent(example_image)
    out = tmp_path / "img"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")

    async def body(client: TestClient) -> None:
        await _until_ready(client)
        url = str(client.make_url("/"))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: fetch_image(url, str(out), reason="test"))
        try:
            await loop.run_in_executor(None, lambda: fetch_image(url, str(tmp_path / "full")))
        except AgentFetchError as exc:
            assert "refusing to overwrite" in str(exc)
        else:
            raise AssertionError("a non-empty directory was overwritten")
        try:
            await loop.run_in_executor(None, lambda: fetch_image(url + "nothing-here/", str(tmp_path / "y")))
        except AgentFetchError as exc:
            assert "HTTP 404" in str(exc)
        else:
            raise AssertionError("a 404 was taken for an image")

    _serve(agent, body)
    assert (out / "manifest.json").is_file() and (out / "recorder.jsonl").is_file()
    with open_image(str(out)) as host:
        assert [r.netdev for r in diagnose(take_snapshot(host), Expectations()).rails] == ["net_rail0", "net_rail1"]


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
