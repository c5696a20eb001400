"""What becomes of every alert (queued, reused, skipped by reason) on the real app, and capture
requests that know their cluster.

A real collector on a loopback port with the local store, driven as Alertmanager, an operator and
agents drive it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from collector.alerts import FabricDesk, parse_webhook
from collector.config import AlertLimits
from proto.requests import request_for
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


def _series(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_a_critical_alert_after_an_operators_capture_gets_that_bundle_and_every_outcome_is_a_series(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An operator captured gpu-node-017 minutes ago; then RailLinkDown (critical) fires for it. Within
    the cooldown no second capture is asked for, but the alert's incident gets the operator's bundle
    (a copy under its own incident and bundle id), the answer says ``reused``, and
    ``railscope_collector_alert_outcomes_total`` counts it; an alert whose node is being captured for
    another incident waits for that capture and gets its bundle when it is done; an alert left without
    a bundle (here the rate per alert name) is a warning naming it."""
    from collector.config import AlertLimits

    store = tmp_path / "store"
    settings = local_settings(tmp_path, alerts=AlertLimits(rate_per_alertname=0))

    async def go() -> dict:
        out: dict = {}
        async with running(settings) as (url, _col):
            ask = {"node": "gpu-node-017", "incident": "inc-manual"}
            _s, made = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN, json_body=ask)
            rid = made["request"]["id"]
            data = b"the operator's capture" * 500
            hello = replace(HELLO, bundle=rid, incident="inc-manual", plan="node-bundle/v1")
            _s, stored, _h = await post(url, body(hello, data))
            await _call("POST", f"{url}/v1/requests/gpu-node-017/{rid}/done", token=AGENT_TOKEN,
                        json_body={"bundle": stored["key"]})
            out["operator_key"] = stored["key"]
            out["data"] = data
            # gpu-node-018 is being captured for another incident right now
            _s, busy = await _call("POST", url + "/v1/requests", token=OPERATOR_TOKEN,
                                   json_body={"node": "gpu-node-018", "incident": "inc-busy"})
            crit = payload([alert("gpu-node-017", name="RailscopeRailLinkDown", severity="critical"),
                            alert("gpu-node-018", name="RailscopeRailLinkDown", severity="critical"),
                            alert("gpu-node-019", name="RailscopeRailLinkDown", severity="critical")],
                           key="crit")
            with caplog.at_level(logging.INFO, logger="railscope.collector.alerts"):
                out["answer"] = await _alerts(url, crit)
                out["resend"] = await _alerts(url, crit)
            # gpu-node-018's capture for inc-busy is stored and closed: the alert's request gets it
            bid = busy["request"]["id"]
            data18 = b"node 18 for inc-busy" * 300
            h18 = replace(HELLO, node="gpu-node-018", bundle=bid, incident="inc-busy", plan="node-bundle/v1")
            _s, st18, _h = await post(url, body(h18, data18), token=AGENT_TOKEN_18)
            await _call("POST", f"{url}/v1/requests/gpu-node-018/{bid}/done", token=AGENT_TOKEN_18,
                        json_body={"bundle": st18["key"]})
            out["data18"] = data18
            out["polled18"] = await _call("GET", url + "/v1/requests?node=gpu-node-018&wait=0",
                                          token=AGENT_TOKEN_18)
        return out

    out = run(go())
    status, answer = out["answer"]
    assert status == 200 and answer["queued"] == [], answer
    reused, follow = answer["reused"]
    assert reused["node"] == "gpu-node-017" and reused["bundle"] == out["operator_key"]
    assert follow["node"] == "gpu-node-018" and follow["bundle"] is None
    assert answer["skipped"] == {"rate_limited": 1}
    assert answer["dropped"] == [{"incident": reused["incident"], "node": "gpu-node-019", "reason": "rate_limited",
                                  "severity": "critical"}]
    # the alert's incident holds a copy of the operator's bundle, under the alert's request id
    (copy,) = [p for p in store.rglob("*.tar.gz") if f"/{reused['incident']}/gpu-node-017" in str(p)]
    assert copy.read_bytes() == out["data"] and copy.name.endswith(f"-{reused['id']}.tar.gz")
    assert (store / out["operator_key"]).read_bytes() == out["data"]  # the operator's incident keeps its own
    (req_file,) = [p for p in (store / "_requests").rglob(f"{reused['id']}.json")]
    doc = json.loads(req_file.read_text())
    assert doc["state"] == "done" and doc["bundle"].endswith(copy.name) and doc["severity"] == "critical"
    assert out["resend"][1]["skipped"] == {"exists": 2, "rate_limited": 1} and out["resend"][1]["reused"] == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("not captured: gpu-node-019 (critical RailscopeRailLinkDown: rate_limited)" in w
               for w in warnings), warnings
    # the capture gpu-node-018 was busy with is filed under the alert's incident too, and nothing
    # more is served to gpu-node-018 (no second capture)
    (copy18,) = [p for p in store.rglob("*.tar.gz") if f"/{follow['incident']}/gpu-node-018" in str(p)]
    assert copy18.read_bytes() == out["data18"] and copy18.name.endswith(f"-{follow['id']}.tar.gz")
    assert out["polled18"][1]["requests"] == []


def test_the_outcome_series_count_every_alert_of_every_group(tmp_path: Path) -> None:
    async def go() -> str:
        import aiohttp

        async with running(local_settings(tmp_path)) as (url, _col):
            await _alerts(url, payload([alert("gpu-node-017", severity="critical"), alert("gpu-node-018")]))
            await _alerts(url, payload([alert("gpu-node-017", severity="critical"), alert("gpu-node-018")]))
            async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
                return await r.text()

    series = _series(run(go()), "railscope_collector_alert_outcomes_total")
    assert series['alert_severity="critical",outcome="queued",reason=""'] == 1
    assert series['alert_severity="warning",outcome="queued",reason=""'] == 1
    assert series['alert_severity="critical",outcome="skipped",reason="exists"'] == 1
    assert series['alert_severity="warning",outcome="skipped",reason="exists"'] == 1
    assert series['alert_severity="critical",outcome="reused",reason=""'] == 0  # there before any reuse


class _Counted(list):
    """Stored requests that count how often the policy walks them."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().__iter__()


def test_the_policy_of_5000_alerts_against_20000_stored_requests_is_linear_and_off_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored requests are indexed once per decision (it was a walk over them per incident: 1.7 s for
    this payload), and the decision runs in a worker thread: the event loop is never held for it. Its
    time is bench/bench_alert_policy.py's to measure; here, how many walks and on which thread."""
    import threading

    import collector.alerts as alerts_mod

    now = 1_796_000_000.0
    stored = _Counted()
    for i in range(20_000):
        r = request_for(f"inc-old-{i % 2000:04d}", f"gpu-node-{i:05d}", now=now - 3000, ttl_s=1800)
        stored.append(r.done(f"default/2026-11-30/{r.incident}/x-{r.id}.tar.gz", now - 2000) if i % 3 else r)
    hook = parse_webhook(json.dumps({"version": "4", "groupKey": "k", "status": "firing", "alerts": [
        {"status": "firing", "startsAt": "2026-11-30T09:00:00Z",
         "labels": {"alertname": "A", "node": f"gpu-node-{(i * 7) % 30000:05d}", "incident": f"inc-{i:05d}"}}
        for i in range(5000)]}).encode())
    limits = AlertLimits(fabric_hold_s=0, max_in_flight=10_000, rate_per_alertname=10_000)

    d = FabricDesk(limits).decide(hook, stored, now)
    assert len(d.queue) + len(getattr(d, "reused", ())) + len(d.skipped) == 5000
    assert stored.walks == 1, f"{stored.walks} walks over the stored requests for one decision"

    threads: list[int] = []
    real = alerts_mod.decide

    def spy(*args, **kw):  # type: ignore[no-untyped-def]
        threads.append(threading.get_ident())
        return real(*args, **kw)

    monkeypatch.setattr(alerts_mod, "decide", spy)

    async def off_loop() -> tuple[int, alerts_mod.Decision]:
        return threading.get_ident(), await FabricDesk(limits).decide_off_loop(hook, stored, now)

    loop_thread, d2 = run(off_loop())
    assert threads and loop_thread not in threads, "the policy ran on the event loop's thread"
    assert [(q.node, q.incident) for q in d2.queue] == [(q.node, q.incident) for q in d.queue]


def test_requests_know_their_cluster_an_agent_is_served_and_closes_its_own_only(tmp_path: Path) -> None:
    """Cluster A's alert for n1 is A's n1's request: cluster B's n1 is never served it and cannot close
    it; poll markers are per (cluster, node); an alerting token bound to a cluster queues for it only
    (a collector of many clusters: no --cluster, the alerts' cluster label decides)."""
    tokens = tmp_path / "tokens"
    settings = local_settings(tmp_path, cluster=None)
    agent_a, agent_b = "agent-token-n1-cluster-a-000000", "agent-token-n1-cluster-b-000000"
    bound_alerting = "alerting-token-bound-to-b-0000000"
    (tokens / "agent").write_text(f"n1 {agent_a} cluster-a\nn1 {agent_b} cluster-b\n")
    (tokens / "alerting").write_text(f"{'alerting-token-0123456789abcdef'}\n{bound_alerting} cluster-b\n")
    store = tmp_path / "store"

    async def go() -> dict:
        out: dict = {}
        async with running(settings) as (url, _col):
            poll = url + "/v1/requests?node=n1&wait=0"
            await _call("GET", poll, token=agent_a)
            await _call("GET", poll, token=agent_b)
            out["queued"] = await _alerts(url, payload([alert("n1", cluster="cluster-a", severity="critical")]))
            out["b_poll"] = await _call("GET", poll, token=agent_b)
            out["a_poll"] = await _call("GET", poll, token=agent_a)
            rid = out["queued"][1]["queued"][0]["id"]
            out["b_done"] = await _call("POST", f"{url}/v1/requests/n1/{rid}/done", token=agent_b, json_body={})
            out["b_asks_a"] = await _call("GET", poll + "&cluster=cluster-a", token=agent_b)
            out["bound"] = await _alerts(url, payload([alert("n2", cluster="cluster-a"), alert("n3")], key="b"),
                                         token=bound_alerting)
        return out

    out = run(go())
    status, answer = out["queued"]
    assert status == 200 and [(q["node"], q["cluster"]) for q in answer["queued"]] == [("n1", "cluster-a")]
    rid = answer["queued"][0]["id"]
    assert (store / "_requests" / "cluster-a" / "n1" / f"{rid}.json").exists()
    assert out["b_poll"][1]["requests"] == []
    assert [r["id"] for r in out["a_poll"][1]["requests"]] == [rid]
    assert out["b_done"][0] == 404
    assert out["b_asks_a"][0] == 403
    assert sorted(p.relative_to(store / "_agents").as_posix() for p in (store / "_agents").rglob("*.json")) == [
        "cluster-a/n1.json", "cluster-b/n1.json"]
    bound = out["bound"][1]
    assert [(q["node"], q["cluster"]) for q in bound["queued"]] == [("n3", "cluster-b")]
    assert bound["skipped"] == {"other_cluster": 1} and bound["dropped"][0]["node"] == "n2"


def test_with_cluster_set_an_alerting_token_naming_none_is_bound_to_it(tmp_path: Path) -> None:
    """A collector of one cluster (--cluster): an alert labelled another cluster (a Prometheus external
    label that is not the agents' name) is skipped loudly, never queued for agents that do not exist."""

    async def go() -> dict:
        async with running(local_settings(tmp_path)) as (url, _col):
            return (await _alerts(url, payload([alert("n1", cluster="elsewhere"), alert("n2")])))[1]

    answer = run(go())
    assert [(q["node"], q["cluster"]) for q in answer["queued"]] == [("n2", "prod-east")]
    assert answer["dropped"] == [{"incident": answer["dropped"][0]["incident"], "node": "n1",
                                  "reason": "other_cluster", "severity": "warning"}]


def test_an_agent_token_naming_no_cluster_is_bound_to_the_default_one(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Without --cluster an agent token used to upload for any cluster; now it is bound to ``default``
    (the agents' own default), the collector says so at start, naming the setting, and the refusal of
    another cluster names it too."""
    settings = local_settings(tmp_path, cluster=None)

    async def go() -> tuple:
        with caplog.at_level(logging.WARNING, logger="railscope.collector.auth"):
            async with running(settings) as (url, _col):
                other = await post(url, body(HELLO, b"x" * 100))
                own = await post(url, body(replace(HELLO, cluster="default"), b"x" * 100))
        return other, own

    other, own = run(go())
    assert other[0] == 403 and "--cluster" in other[1]["message"], other
    assert own[0] == 200
    assert any("--cluster is not set" in r.getMessage() and "collector.flags.cluster" in r.getMessage()
               for r in caplog.records)


def test_a_request_stored_before_requests_named_their_cluster_is_still_served_and_closed(tmp_path: Path) -> None:
    """``_requests/<node>/<id>.json`` without a ``cluster`` (an older collector's) is the default
    cluster's: its agent is served it and closes it where it lies."""
    settings = local_settings(tmp_path)
    old = request_for("inc-old", "gpu-node-017", now=time.time(), ttl_s=1800, cluster="x")
    doc = {k: v for k, v in old.to_json().items() if k != "cluster"}
    legacy = tmp_path / "store" / "_requests" / "gpu-node-017" / f"{old.id}.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))

    async def go() -> tuple:
        async with running(settings) as (url, _col):
            polled = await _call("GET", url + "/v1/requests?node=gpu-node-017&wait=0", token=AGENT_TOKEN)
            hello = replace(HELLO, bundle=old.id, incident="inc-old", plan="node-bundle/v1")
            _s, stored, _h = await post(url, body(hello, b"old" * 100))
            done = await _call("POST", f"{url}/v1/requests/gpu-node-017/{old.id}/done", token=AGENT_TOKEN,
                               json_body={"bundle": stored["key"]})
        return polled, done

    polled, done = run(go())
    assert [r["id"] for r in polled[1]["requests"]] == [old.id]
    assert done[0] == 200 and done[1]["request"]["state"] == "done"
    assert json.loads(legacy.read_text())["state"] == "done" and "cluster" not in json.loads(legacy.read_text())

