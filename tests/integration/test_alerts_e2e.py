"""Capture on alert, end to end, with the real programs.

A ``railscope agent`` runs in a node network namespace with veth rails; Debian's ``prometheus``
scrapes it and evaluates ``deploy/prometheus/railscope-rules.yaml``; Debian's
``prometheus-alertmanager`` routes the alerts to the collector's webhook; ``railscope collector``
stores into SeaweedFS (a real S3 server on loopback). A rail is flapped, as a cable pull would: the
bundle of that node and incident must be in the bucket with a valid ``.sha256`` within 60 s, and still
be the only one after Alertmanager's repeat interval has passed. A second test kills the agent in the
middle of a capture: the request is served after the restart, never lost, never doubled.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.agent_netns import PORT, flap, get, wait_for
from tests.support.collector_env import BUCKET, Collector, Weed, free_port
from tests.support.e2e import AGENT_TOKEN, ALERTING_TOKEN, OPERATOR_TOKEN, Proc
from tests.support.e2e import need as _need
from tests.support.netns import RailNetns

pytestmark = [pytest.mark.netns, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"
NODE = "e2e-node"
CLUSTER = "e2e"


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check, timeout=60)


@dataclass
class Mgmt:
    """A veth between the test's namespace and the node's: the agent listens on ``node``, the
    collector on ``host``, so the agent reaches the collector as a pod reaches a Service."""

    host: str
    node: str


@pytest.fixture
def mgmt(rails: RailNetns) -> Iterator[Mgmt]:
    tag = uuid.uuid4().hex[:8]
    host_if = f"rsa-{tag}"
    net = random.randint(64, 127) * 4
    host, node = f"10.98.{net // 256 + 1}.{net % 256 + 1}", f"10.98.{net // 256 + 1}.{net % 256 + 2}"
    _ip("link", "add", host_if, "type", "veth", "peer", "name", "mgmt0", "netns", rails.node)
    _ip("addr", "add", f"{host}/30", "dev", host_if)
    _ip("link", "set", host_if, "up")
    _ip("-n", rails.node, "addr", "add", f"{node}/30", "dev", "mgmt0")
    _ip("-n", rails.node, "link", "set", "mgmt0", "up")
    try:
        yield Mgmt(host, node)
    finally:
        _ip("link", "del", host_if, check=False)


@dataclass
class Stack:
    weed: Weed
    collector: Collector
    rails: RailNetns
    mgmt: Mgmt
    tmp: Path
    agent: Proc | None = None

    def start_agent(self, *extra: str, env: dict[str, str] | None = None) -> Proc:
        token = self.tmp / "agent-token"
        token.write_text(AGENT_TOKEN + "\n")
        token.chmod(0o600)  # a token file readable by others is refused
        argv = ["ip", "netns", "exec", self.rails.node, sys.executable, "-m", "agent.cli", "agent",
                "--listen", self.mgmt.node, "--rails", "2", "--node", NODE, "--cluster", CLUSTER,
                "--collector", f"http://{self.mgmt.host}:{self.collector.port}", "--collector-token-file", str(token),
                *extra]
        n = len(list(self.tmp.glob("agent-*.log")))
        self.agent = Proc(argv, self.tmp / f"agent-{n}.log", env={"PYTHONPATH": str(ROOT), **(env or {})})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.agent.proc.poll() is not None:
                raise AssertionError(f"agent exited: {self.agent.tail()}")
            try:
                if get(f"http://{self.mgmt.node}:{PORT}/readyz", timeout=2)[0] == 200:
                    return self.agent
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"agent never ready: {self.agent.tail()}")

    def bundles(self) -> list[str]:
        return [k for k in self.weed.objects() if k.endswith(".tar.gz") and "/_requests/" not in f"/{k}"]

    def requests(self) -> list[dict]:
        c = self.weed.client()
        return [json.loads(c.get_object(Bucket=BUCKET, Key=k)["Body"].read()) for k in self.weed.objects("_requests/")]


@pytest.fixture
def stack(rails: RailNetns, mgmt: Mgmt, tmp_path: Path) -> Iterator[Stack]:
    weed = Weed(tmp_path / "weed")
    weed.start()
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "agent").write_text(f"{NODE} {AGENT_TOKEN}\n")
    (tokens / "agent").chmod(0o600)  # token files: their owner's alone
    (tokens / "alerting").write_text(ALERTING_TOKEN + "\n")
    (tokens / "alerting").chmod(0o600)  # token files: their owner's alone
    (tokens / "operator").write_text(OPERATOR_TOKEN + "\n")
    (tokens / "operator").chmod(0o600)  # token files: their owner's alone
    col = Collector(tmp_path, f"s3://{BUCKET}", "--listen", mgmt.host, "--cluster", CLUSTER, endpoint=weed.endpoint,
                    tokens={"agent_token_file": str(tokens / "agent"), "alerting_token_file": str(tokens / "alerting"),
                            "operator_token_file": str(tokens / "operator")})
    # Collector() binds 127.0.0.1 first in its argv; the later --listen wins.
    col.url = f"http://{mgmt.host}:{col.port}"
    col.start()
    st = Stack(weed, col, rails, mgmt, tmp_path)
    try:
        yield st
    finally:
        if st.agent is not None:
            st.agent.stop()
        col.stop()
        weed.stop()


def _alerting(tmp: Path, stack: Stack, repeat: str) -> tuple[Proc, Proc]:
    prom_bin = _need("/usr/bin/prometheus")
    am_bin = _need("/usr/bin/prometheus-alertmanager")
    am_port, prom_port = free_port(), free_port()
    cred = tmp / "alerting-token"
    cred.write_text(ALERTING_TOKEN)
    (tmp / "alertmanager.yml").write_text(
        "route:\n  receiver: railscope\n  group_by: [alertname, node]\n"
        f"  group_wait: 1s\n  group_interval: 2s\n  repeat_interval: {repeat}\n"
        "receivers:\n  - name: railscope\n    webhook_configs:\n"
        f"      - url: http://{stack.mgmt.host}:{stack.collector.port}/v1/alerts\n"
        "        send_resolved: true\n"
        f"        http_config: {{authorization: {{credentials_file: {cred}}}}}\n")
    am = Proc([am_bin, f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am'}",
               f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], tmp / "alertmanager.log")
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
        f"rule_files: ['{RULES}']\n"
        f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:{am_port}']\n"
        "scrape_configs:\n  - job_name: railscope\n    static_configs:\n"
        f"      - targets: ['{stack.mgmt.node}:{PORT}']\n        labels: {{node: {NODE}, cluster: {CLUSTER}}}\n")
    prom = Proc([prom_bin, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s"],
                tmp / "prometheus.log")
    prom.url, am.url = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    return prom, am


def _state(prom: Proc, am: Proc) -> str:
    """What Prometheus and Alertmanager hold, for a failure message."""
    out = []
    for what, url in (("prometheus alerts", prom.url + "/api/v1/alerts"), ("alertmanager alerts", am.url + "/api/v2/alerts"),
                      ("events", prom.url + "/api/v1/query?query=railscope_events_total%7Bcode%3D%22LinkFlapping%22%7D%5B40s%5D"),
                      ("maintenance", prom.url + "/api/v1/query?query=railscope_node_maintenance")):
        try:
            out.append(f"{what}: {get(url, timeout=5)[1][:1500]!r}")
        except OSError as exc:
            out.append(f"{what}: {exc}")
    return "\n".join(out)


def _sha_ok(stack: Stack, key: str) -> bool:
    c = stack.weed.client()
    data = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    line = c.get_object(Bucket=BUCKET, Key=key + ".sha256")["Body"].read().decode()
    digest, name = line.split()
    return digest == hashlib.sha256(data).hexdigest() and name == key.rsplit("/", 1)[1]


def test_a_flapping_rail_lands_one_bundle_of_its_node_and_incident_in_the_bucket(stack: Stack,
                                                                                 tmp_path: Path) -> None:
    stack.start_agent()
    prom, am = _alerting(tmp_path, stack, repeat="6s")
    try:
        # Prometheus must have scraped the LinkFlapping counter at 0 before the flaps, so the first
        # event is an increase.
        q = prom.url + "/api/v1/query?query=" + urllib.parse.quote('railscope_events_total{code="LinkFlapping"} == 0')

        def scraped_zero() -> bool:
            try:
                return bool(json.loads(get(q, timeout=5)[1])["data"]["result"])
            except (OSError, ValueError, KeyError):
                return False

        assert wait_for(scraped_zero, 30, 0.5), _state(prom, am)
        time.sleep(1.5)
        start = time.time()
        for _ in range(3):
            flap(stack.rails, 0)
        keys = wait_for(lambda: [k for k in stack.bundles() if _sha_ok_safe(stack, k)], 60 - (time.time() - start),
                        step=0.5)
        took = time.time() - start
        assert keys, (f"no bundle within 60 s\nagent: {stack.agent.tail()}\ncollector: "  # type: ignore[union-attr]
                      f"{stack.collector.log.read_text()[-3000:]}\n{_state(prom, am)}")
        (key,) = keys
        cluster, _date, incident, name = key.split("/")
        assert cluster == CLUSTER and name.startswith(f"{NODE}-") and incident.startswith("railscopelinkflapping-")
        # Alertmanager resends the group (repeat_interval 6 s); the request is idempotent.
        time.sleep(15)
        assert stack.bundles() == [key]
        (req,) = stack.requests()
        assert req["state"] == "done" and req["bundle"] == key and req["incident"] == incident
        print(f"alert -> bundle stored: {took:.1f} s")
    finally:
        prom.stop()
        am.stop()


def _sha_ok_safe(stack: Stack, key: str) -> bool:
    try:
        return _sha_ok(stack, key)
    except Exception:  # the .sha256 is written just after the object
        return False


def test_an_agent_killed_mid_capture_serves_the_request_after_restart_exactly_once(stack: Stack,
                                                                                   tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "capturing"
    pids = tmp_path / "pids"
    # A devlink that takes long to answer, so that the capture is still running when the agent is killed
    # (only the delay is fake; the agent's own reads time out at --command-timeout).
    (fake / "devlink").write_text(f"#!/bin/sh\ntouch {marker}\necho $$ >> {pids}\nexec sleep 60\n")
    (fake / "devlink").chmod(0o755)
    path = f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    stack.start_agent("--command-timeout", "30s", "--source-deadline", "5s", env={"PATH": path})
    req = json.loads(urllib.request.urlopen(urllib.request.Request(
        stack.collector.url + "/v1/requests", data=json.dumps({"node": NODE, "incident": "inc-kill"}).encode(),
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}", "Content-Type": "application/json"}),
        timeout=10).read())["request"]
    assert wait_for(lambda: marker.exists() and "capturing for request" in stack.agent.log.read_text(),  # type: ignore[union-attr]
                    30, 0.2), stack.agent.tail()  # type: ignore[union-attr]
    stack.agent.stop(signal.SIGKILL)  # type: ignore[union-attr]
    for pid in pids.read_text().split():  # the slow devlinks the killed agent started
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert stack.bundles() == [] and [r["state"] for r in stack.requests()] == ["pending"]
    stack.start_agent()
    keys = wait_for(lambda: stack.bundles(), 90, 0.5)
    assert len(keys) == 1 and keys[0].split("/")[2] == "inc-kill" and keys[0].endswith(f"-{req['id']}.tar.gz")
    assert wait_for(lambda: [r["state"] for r in stack.requests()] == ["done"], 20, 0.5)
    time.sleep(3)
    assert len(stack.bundles()) == 1
