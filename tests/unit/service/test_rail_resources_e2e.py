"""RailResourcesLost end to end against the Kubernetes API stand-in of the maintenance watch: the Node
object's allocatable nvidia.com/rail0 goes 1 -> 0 -> 0, and the agent gives one event, one
``railscope_node_allocatable`` drop that the real alert rule (promtool) turns into one alert, and one
capture in the spool."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from agent.config import AgentSettings
from agent.host.recorded import open_image
from agent.service import maintenance
from agent.service.app import make_app
from agent.service.daemon import Agent
from agent.service.maintenance import ApiConfig
from tests.support.kube_api import NODE, KubeApiStandIn, node_object, until, with_stand_in

ROOT = Path(__file__).resolve().parents[3]


def _with_alloc(rv: int, rail0: str) -> dict[str, Any]:
    obj = node_object(rv)
    obj["status"]["allocatable"] = {"cpu": "190", "nvidia.com/gpu": "8", "nvidia.com/rail0": rail0,
                                    "rdma/rdma_shared_device_a": "63"}
    return obj


def _value(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}}"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_allocatable_one_to_zero_gives_one_event_one_alert_one_capture(example_image: Path, tmp_path: Path) -> None:
    from agent.capture.spool import Spool

    spool = tmp_path / "spool"
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("counters", 0.2), ("links", 1.0)),
                             watch_links=False, node=NODE, capture_on=frozenset({"RailResourcesLost"}),
                             spool_dir=str(spool), spool_max_bytes=64 << 20)
    agent = Agent(settings, host_factory=lambda: open_image(str(example_image)))
    scraped: list[float] = []

    async def body(api: KubeApiStandIn, cfg: ApiConfig) -> None:
        api.node = _with_alloc(100, "1")
        app = make_app(agent)
        watch = maintenance.attach(app, agent, cfg)
        assert watch is not None
        async with TestClient(TestServer(app)) as client:
            await api.watching.wait()
            text = await (await client.get("/metrics")).text()
            scraped.append(_value(text, "railscope_node_allocatable", resource="nvidia.com/rail0"))
            assert _value(text, "railscope_node_allocatable", resource="rdma/rdma_shared_device_a") == 63
            assert _value(text, "railscope_node_allocatable", resource="nvidia.com/gpu") is None  # a GPU, not a rail
            await api.streams.put([{"type": "MODIFIED", "object": _with_alloc(101, "0")},
                                   {"type": "MODIFIED", "object": _with_alloc(102, "0")}])
            await until(lambda: agent.events.counts().get("RailResourcesLost", 0) >= 1, "the event")
            await until(lambda: watch.resource_version == "102", "the second update")
            text = await (await client.get("/metrics")).text()
            scraped.append(_value(text, "railscope_node_allocatable", resource="nvidia.com/rail0"))
            assert _value(text, "railscope_events_total", code="RailResourcesLost") == 1
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, agent.captures.idle)

    asyncio.run(with_stand_in(body, tmp_path))
    events = [e for e in agent.events.recent(0) if e.code == "RailResourcesLost"]
    assert [(e.subject, e.severity, dict(e.evidence)["before"]) for e in events] == [("nvidia.com/rail0", "critical", 1)]
    entries = Spool(str(spool), 64 << 20).entries()
    assert len(entries) == 1 and entries[0].meta["reason"].startswith("event RailResourcesLost")
    assert scraped == [1.0, 0.0]
    _one_alert(scraped, tmp_path)


def _one_alert(scraped: list[float], tmp: Path) -> None:
    """The two scrapes as a series (1 for 5 minutes, then 0): the chart's rule fires one alert."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian 'prometheus')")
    before, after = (int(v) for v in scraped)
    labels = {"node": NODE, "job": "railscope", "resource": "nvidia.com/rail0", "severity": "critical"}
    rules = yaml.safe_load((ROOT / "deploy/prometheus/railscope-rules.yaml").read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "RailscopeRailResourcesLost")
    annotations = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], " ".join(v.split()))
                   for k, v in rule["annotations"].items()}
    suite = {"rule_files": [str(ROOT / "deploy/prometheus/railscope-rules.yaml")], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": [
                 {"series": f'railscope_node_allocatable{{node="{NODE}",job="railscope",resource="nvidia.com/rail0"}}',
                  "values": f"{before}x4 {after}x10"},
                 {"series": f'railscope_node_maintenance{{node="{NODE}",job="railscope",reason="cordoned"}}',
                  "values": "0x14"}],
                 "alert_rule_test": [
                     {"eval_time": "4m", "alertname": "RailscopeRailResourcesLost", "exp_alerts": []},
                     {"eval_time": "7m", "alertname": "RailscopeRailResourcesLost", "exp_alerts": [{
                         "exp_labels": labels, "exp_annotations": annotations}]}]}]}
    path = tmp / "rail-resources-test.yaml"
    path.write_text(yaml.safe_dump(suite))
    res = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
