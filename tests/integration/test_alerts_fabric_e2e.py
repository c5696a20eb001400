"""A leaf fault through a real Alertmanager routed as the README says: one incident, the incident caps.

Debian's ``prometheus-alertmanager`` groups by ``[alertname, node]`` and posts to a ``railscope
collector`` (local store). 64 nodes' rail alerts that name the same leaf (``peer_system``, as the shipped
rules join it on from ``railscope_rail_peer_info``) arrive as 64 webhooks; the collector files them under
one fabric incident and queues the worst few and a sample (5 + 5), still after Alertmanager's resends.
A second route cuts its payloads with ``max_alerts``: Alertmanager's ``truncatedAlerts`` is accepted
and counted in ``railscope_collector_alerts_truncated_total``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.agent_netns import get, wait_for
from tests.support.collector_env import Collector, free_port
from tests.support.e2e import ALERTING_TOKEN, OPERATOR_TOKEN, Proc
from tests.support.e2e import need as _need

pytestmark = [pytest.mark.slow]

NODES = [f"gpu-{n:03d}" for n in range(64)]


def _post_alerts(am_url: str, alerts: list[dict]) -> None:
    req = urllib.request.Request(am_url + "/api/v2/alerts", data=json.dumps(alerts).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def _requests(store: Path) -> list[dict]:
    root = store / "_requests"
    return [json.loads(p.read_text()) for p in root.rglob("*.json")] if root.exists() else []


def test_a_64_node_leaf_fault_through_alertmanager_is_one_incident(tmp_path: Path) -> None:
    am_bin = _need("/usr/bin/prometheus-alertmanager")
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "alerting").write_text(ALERTING_TOKEN + "\n")
    (tokens / "operator").write_text(OPERATOR_TOKEN + "\n")
    (tokens / "agent").write_text("gpu-000 agent-token-0123456789abcdef0123\n")
    for f in tokens.iterdir():
        f.chmod(0o600)  # token files: their owner's alone (the collector refuses others at start)
    store = tmp_path / "store"
    col = Collector(tmp_path, str(store), "--fabric-hold", "4s",
                    tokens={"agent_token_file": str(tokens / "agent"),
                            "alerting_token_file": str(tokens / "alerting"),
                            "operator_token_file": str(tokens / "operator")})
    col.start()
    cred = tmp_path / "alerting-token"
    cred.write_text(ALERTING_TOKEN)
    am_port = free_port()
    hook = (f"      - url: {col.url}/v1/alerts\n        send_resolved: true\n"
            f"        http_config: {{authorization: {{credentials_file: {cred}}}}}\n")
    (tmp_path / "alertmanager.yml").write_text(
        "route:\n  receiver: railscope\n  group_by: [alertname, node]\n"
        "  group_wait: 1s\n  group_interval: 2s\n  repeat_interval: 4s\n"
        "  routes:\n    - receiver: railscope-capped\n      matchers: ['alertname=\"RailscopeLinkFlapping\"']\n"
        "      group_by: [alertname]\n"
        "receivers:\n  - name: railscope\n    webhook_configs:\n" + hook +
        "  - name: railscope-capped\n    webhook_configs:\n" + hook + "        max_alerts: 2\n")
    am = Proc([am_bin, f"--config.file={tmp_path / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'am'}",
               f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], tmp_path / "alertmanager.log")
    am.url = f"http://127.0.0.1:{am_port}"
    # every node's agent polled a moment ago (the marker a poll leaves in the store), so the captures
    # count against the cluster's cap, not the small one of nodes without an agent
    (store / "_agents").mkdir(parents=True, exist_ok=True)
    for n in NODES:
        (store / "_agents" / f"{n}.json").write_text(json.dumps({"node": n, "polled_at": time.time()}))
    try:
        assert wait_for(lambda: _ready(am.url), 30, 0.3), am.tail()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        fault = [{"labels": {"alertname": "RailscopeRailLinkDown", "node": n, "rail": "3", "plane": "1",
                             "device": "net_rail3", "peer_system": "leaf-a07", "peer_port": f"swp{i + 1}",
                             "severity": "critical" if i % 9 else "warning", "job": "railscope"},
                  "annotations": {"summary": "rail 3 down"}, "startsAt": now} for i, n in enumerate(NODES)]
        flaps = [{"labels": {"alertname": "RailscopeLinkFlapping", "node": f"other-{i}", "severity": "warning"},
                  "startsAt": now} for i in range(5)]
        _post_alerts(am.url, fault + flaps)
        # the 64 webhooks arrive within Alertmanager's group_wait; the hold (4 s) decides them together
        assert wait_for(lambda: len([r for r in _requests(store) if r["incident"].startswith("fabric-")]) >= 10,
                        60, 0.5), (col.log.read_text()[-3000:], am.tail())
        time.sleep(10)  # Alertmanager resends every group (repeat_interval 4 s)
        reqs = [r for r in _requests(store) if r["node"] in NODES]
        incidents = {r["incident"] for r in reqs}
        assert len(incidents) == 1, incidents
        (incident,) = incidents
        assert incident.startswith("fabric-leaf-leaf-a07-"), incident
        assert len(reqs) == 10, sorted(r["node"] for r in reqs)
        # the worst five (critical, then the earliest, then the name) are among them
        assert {"gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005"} <= {r["node"] for r in reqs}
        log = col.log.read_text()
        # one Alertmanager group per node: 64 webhooks, each held first
        held = set(re.findall(r'RailscopeRailLinkDown\\", node=\\"(gpu-\d+)\\"\}: 0 queued .*\'held\': 1', log))
        assert held == set(NODES), sorted(set(NODES) - held)
        status, metrics = get(col.url + "/metrics", timeout=10)
        m = re.search(r"^railscope_collector_alerts_truncated_total (\S+)$", metrics.decode() if isinstance(
            metrics, bytes) else metrics, re.M)
        assert status == 200 and m and float(m.group(1)) >= 3, metrics[-2000:]
        print(f"\n64-node leaf fault: 1 incident ({incident}), {len(reqs)} capture requests")
    finally:
        am.stop()
        col.stop()


def _ready(url: str) -> bool:
    try:
        return get(url + "/-/ready", timeout=2)[0] == 200
    except OSError:
        return False
