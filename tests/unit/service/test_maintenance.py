"""``railscope_node_maintenance{reason}``: the agent's watch on its own Node object, and the series.

No API server runs here: ``KubeApiStandIn`` is a stand-in that speaks the parts of the Kubernetes API
the watch uses (GET one Node, a watch on the nodes collection with a field selector, resourceVersion,
bookmarks, 410 Gone, bearer tokens), and records every request so the tests can prove the agent never
lists the cluster's Nodes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.config import AgentSettings
from agent.model import Event
from agent.service import maintenance
from agent.service.app import make_app
from agent.service.daemon import Agent
from agent.service.maintenance import ApiConfig, MaintenanceMetrics, NodeWatch, node_reasons
from tests.support.kube_api import NODE, TOKEN, KubeApiStandIn, node_object, until, with_stand_in


def test_node_reasons_from_the_node_object() -> None:
    assert node_reasons(node_object(1)) == frozenset()
    assert node_reasons(node_object(1, state=None)) == frozenset()
    for state in ("Drain_Required", "Draining", "DrainComplete", "Reboot_Required"):
        assert node_reasons(node_object(1, state=state)) == {"sriov_reconfiguring"}, state
    assert node_reasons(node_object(1, unschedulable=True)) == {"cordoned"}
    assert node_reasons(node_object(1, unschedulable=False)) == frozenset()
    assert node_reasons(node_object(1, state="Draining", unschedulable=True)) == {"sriov_reconfiguring", "cordoned"}
    # Junk where the object should be gives nothing, never an exception.
    assert node_reasons({"metadata": "x", "spec": ["unschedulable"]}) == frozenset()


def test_in_cluster_config_only_where_there_is_an_api_server(tmp_path: Path) -> None:
    assert ApiConfig.in_cluster({}, str(tmp_path)) is None
    assert ApiConfig.in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, str(tmp_path)) is None  # no token
    (tmp_path / "token").write_text("t0\n")
    cfg = ApiConfig.in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "6443"},
                               str(tmp_path))
    assert cfg is not None and cfg.base_url == "https://10.96.0.1:6443" and cfg.ca_path is None
    assert cfg.headers()["Authorization"] == "Bearer t0"
    (tmp_path / "token").write_text("t1\n")  # rotated: read again on the next connection
    assert cfg.headers()["Authorization"] == "Bearer t1"
    v6 = ApiConfig.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1"}, str(tmp_path))
    assert v6 is not None and v6.base_url == "https://[fd00::1]:443"


def test_one_watch_follows_the_node_resumes_and_never_lists_the_cluster(tmp_path: Path) -> None:
    async def body(api: KubeApiStandIn, cfg: ApiConfig) -> None:
        watch = NodeWatch(cfg, NODE, sleep=lambda s: asyncio.sleep(0))
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: watch.synced, "the first read")
            assert watch.reasons == frozenset() and watch.resource_version == "100"
            await api.streams.put([{"type": "MODIFIED", "object": node_object(101, unschedulable=True)},
                                   {"type": "MODIFIED", "object": node_object(102, state="Draining", unschedulable=True)},
                                   {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "150"}}},
                                   None])
            await until(lambda: watch.resource_version == "150", "the bookmark")
            assert watch.reasons == {"sriov_reconfiguring", "cordoned"}
            # The server ended that watch: the next one resumes at the bookmark, without a GET.
            await until(lambda: len([r for r in api.requests if r[0] == "/api/v1/nodes"]) == 2, "a resumed watch")
            assert api.requests[-1][1]["resourceVersion"] == "150"
            await api.streams.put([{"type": "MODIFIED", "object": node_object(151, state="Idle", unschedulable=False)}])
            await until(lambda: watch.reasons == frozenset(), "the node back in service")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        gets = [r for r in api.requests if r[0] == f"/api/v1/nodes/{NODE}"]
        watches = [r for r in api.requests if r[0] == "/api/v1/nodes"]
        assert len(gets) == 1
        for _path, query in watches:
            assert query["fieldSelector"] == f"metadata.name={NODE}" and query["watch"] == "true"
            assert query["allowWatchBookmarks"] == "true" and int(query["timeoutSeconds"]) < 300
        assert watch.errors == 0

    asyncio.run(with_stand_in(body, tmp_path))


def test_gone_starts_over_errors_back_off_and_recover(tmp_path: Path) -> None:
    async def body(api: KubeApiStandIn, cfg: ApiConfig) -> None:
        sleeps: list[float] = []

        async def sleep(s: float) -> None:
            sleeps.append(s)
            await asyncio.sleep(0)

        api.get_failures = 3
        api.gone_versions.add("100")
        api.node = node_object(100, unschedulable=True)
        watch = NodeWatch(cfg, NODE, sleep=sleep)
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: watch.errors == 3 and watch.synced, "recovery after three failed GETs")
            assert watch.reasons == {"cordoned"}
            # 410 on the watch: start over with a GET, which now gives a newer version.
            api.node = node_object(200)
            api.gone_versions.add("100")
            await until(lambda: watch.resource_version == "200", "a fresh GET after 410 Gone")
            assert watch.reasons == frozenset()
            await api.watching.wait()
            await api.streams.put([{"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                                "message": "too old resource version"}}])
            await until(lambda: len([r for r in api.requests if r[0] == f"/api/v1/nodes/{NODE}"]) >= 6,
                         "a GET after an ERROR 410 event")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # Exponential, jittered (0.5x to 1.5x), bounded.
        assert len(sleeps) >= 3
        assert 0.5 <= sleeps[0] <= 1.5 and 1.0 <= sleeps[1] <= 3.0 and 2.0 <= sleeps[2] <= 6.0
        assert all(s <= maintenance.BACKOFF_MAX_S * 1.5 for s in sleeps)

    asyncio.run(with_stand_in(body, tmp_path))


def test_a_bad_token_and_garbage_are_errors_not_crashes(tmp_path: Path) -> None:
    async def body(api: KubeApiStandIn, cfg: ApiConfig) -> None:
        Path(cfg.token_path or "").write_text("wrong")
        watch = NodeWatch(cfg, NODE, sleep=lambda s: asyncio.sleep(0.01))
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: watch.errors >= 2, "errors for a refused token")
            assert not watch.synced and watch.reasons == frozenset()
            Path(cfg.token_path or "").write_text(TOKEN)  # the rotated token is read again
            await until(lambda: watch.synced, "sync once the token is right")
            errors = watch.errors
            await api.watching.wait()
            await api.streams.put([{"type": "MODIFIED", "object": "not a node"}])
            await until(lambda: watch.errors > errors, "an error for a malformed event")
            await until(lambda: watch.synced, "a fresh start after a malformed event")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(with_stand_in(body, tmp_path))


def _agent(image: Path) -> Agent:
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("counters", 0.2), ("links", 1.0)),
                             watch_links=False, node=NODE)
    from agent.host.recorded import open_image

    return Agent(settings, host_factory=lambda: open_image(str(image)))


def _maintenance(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("railscope_node_maintenance{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def test_the_agent_serves_the_reasons_of_its_node_and_its_driver_reloads(example_image: Path, tmp_path: Path) -> None:
    async def body(api: KubeApiStandIn, cfg: ApiConfig) -> None:
        agent = _agent(example_image)
        app = make_app(agent)
        assert maintenance.attach(app, agent, cfg) is not None
        async with TestClient(TestServer(app)) as client:
            await api.watching.wait()
            text = await (await client.get("/metrics")).text()
            assert _maintenance(text) == {"sriov_reconfiguring": 0, "cordoned": 0, "driver_reload": 0}
            assert "railscope_agent_node_watch_synced 1.0" in text
            await api.streams.put([{"type": "MODIFIED", "object": node_object(101, unschedulable=True)}])
            for _ in range(300):
                text = await (await client.get("/metrics")).text()
                if _maintenance(text)["cordoned"] == 1:
                    break
                await asyncio.sleep(0.01)
            assert _maintenance(text) == {"sriov_reconfiguring": 0, "cordoned": 1, "driver_reload": 0}
            agent.events.add(Event(time.time() - 30, "DriverReload", "info", "mlx5_core"))
            text = await (await client.get("/metrics")).text()
            assert _maintenance(text)["driver_reload"] == 1

    asyncio.run(with_stand_in(body, tmp_path))


def test_a_driver_reload_counts_for_minutes_only() -> None:
    from agent.service.events import EventLog

    now = [10_000.0]
    events = EventLog()
    watch = NodeWatch(ApiConfig("http://127.0.0.1:1"), NODE)
    col = MaintenanceMetrics(watch, events, clock=lambda: now[0], driver_reload_window_s=600)
    events.add(Event(now[0] - 5, "LinkFlapping", "warning", "net_rail0"))
    assert col.reasons() == frozenset()
    events.add(Event(now[0] - 5, "DriverReload", "info", "mlx5_core"))
    assert col.reasons() == {"driver_reload"}
    now[0] += 600
    assert col.reasons() == frozenset()


def test_no_api_server_no_series(example_image: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    agent = _agent(example_image)

    async def main() -> None:
        async with TestClient(TestServer(make_app(agent))) as client:
            text = await (await client.get("/metrics")).text()
            assert "railscope_node_maintenance" not in text
            assert "railscope_agent_node_watch_synced" not in text

    asyncio.run(main())
