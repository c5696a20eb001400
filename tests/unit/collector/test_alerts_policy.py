"""The capture-on-alert policy (collector/alerts.py): Alertmanager webhook v4 in, capture requests out.

Table tests over payloads shaped as Alertmanager sends them (``notify/webhook``: version "4", groupKey,
status, receiver, groupLabels, commonLabels, alerts with status / labels / startsAt / fingerprint).
Every limit is counted exactly at its default.
"""

from __future__ import annotations

import json
import random

import pytest

from collector.alerts import AlertLimits, WebhookError, decide, derive_incident, parse_webhook
from collector.requests import CaptureRequest, RequestError, request_for
from proto.keys import PART, bundle_id
from tests.support.alerts import NOW, T0, alert, payload


def run(body: bytes, existing: list[CaptureRequest] | None = None, now: float = NOW,
        limits: AlertLimits | None = None):
    return decide(parse_webhook(body), existing or [], now, limits or AlertLimits())


def store_of(*decisions) -> list[CaptureRequest]:
    return [r for d in decisions for r in d.queue]


def test_the_same_group_posted_ten_times_queues_once() -> None:
    body = payload([alert("gpu-node-017"), alert("gpu-node-018")])
    stored: list[CaptureRequest] = []
    counts = []
    for i in range(10):
        d = run(body, stored, now=NOW + 60 * i)
        stored += d.queue
        counts.append(len(d.queue))
    assert counts == [2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert sorted(r.node for r in stored) == ["gpu-node-017", "gpu-node-018"]
    last = run(body, stored, now=NOW + 600)
    assert [s.reason for s in last.skipped] == ["exists", "exists"]


def test_one_alert_name_on_two_nodes_is_one_incident_and_one_request_per_node() -> None:
    d = run(payload([alert("gpu-node-017"), alert("gpu-node-018", severity="critical"),
                     alert("gpu-node-017", name="RailscopeLinkFlapping", rail="1")]))
    assert len(d.queue) == 2
    (incident,) = {r.incident for r in d.queue}
    assert PART.fullmatch(incident) and incident.startswith("railscopelinkflapping-20261130t0900z-")
    for r in d.queue:
        assert r.id == bundle_id(incident, r.node, "node-bundle/v1")
        assert r.plan == "node-bundle" and r.plan_version == 1 and r.params == {"pod_netns": False, "redact": False}
        assert r.expires - r.created == 1800 and r.state == "pending"
    assert {r.node: r.severity for r in d.queue} == {"gpu-node-017": "warning", "gpu-node-018": "critical"}


def test_resolved_alerts_create_nothing_and_alerts_without_a_node_never_fan_out() -> None:
    d = run(payload([alert("gpu-node-017", status="resolved")]))
    assert d.queue == () and d.resolved == 1
    d = run(payload([alert(None, name="RailscopeDriverSkewInPool", pool="a"), alert(None)]))
    assert d.queue == () and d.no_node == 2
    d = run(payload([alert("gpu-node-017", status="resolved"), alert("gpu-node-018")]))
    assert [r.node for r in d.queue] == ["gpu-node-018"] and d.resolved == 1


def test_the_incident_label_wins_and_the_derived_id_is_stable() -> None:
    d = run(payload([alert("gpu-node-017", incident="inc-4711")]))
    assert [r.incident for r in d.queue] == ["inc-4711"]
    a = [alert("n1", starts="2026-11-30T09:00:00Z"), alert("n2", starts="2026-11-30T09:03:00Z")]
    ids = {r.incident for r in run(payload(a)).queue}
    ids |= {r.incident for r in run(payload(list(reversed(a)))).queue}
    # A later alert joining the group keeps the incident: the earliest startsAt did not move.
    ids |= {r.incident for r in run(payload([*a, alert("n3", starts="2026-11-30T09:30:00Z")])).queue}
    assert len(ids) == 1
    other = run(payload(a, key='{}:{alertname="RailscopePfcStorm"}')).queue[0].incident
    assert other not in ids
    assert derive_incident("k", 0, "") == derive_incident("k", 0, "")
    assert PART.fullmatch(derive_incident("k" * 5000, NOW, "Ünïcode Alert/../name" * 9))


def test_a_500_node_storm_at_default_caps_captures_the_worst_and_a_stable_sample() -> None:
    nodes = [f"gpu-node-{i:03d}" for i in range(500)]
    critical = {"gpu-node-100", "gpu-node-250", "gpu-node-499"}
    alerts = [alert(n, severity="critical" if n in critical else "warning",
                    starts=f"2026-11-30T09:{i // 60:02d}:{i % 60:02d}Z") for i, n in enumerate(nodes)]
    d = run(payload(alerts))
    reasons = [s.reason for s in d.skipped]
    assert len(d.queue) == 10 and reasons.count("incident_cap") == 490 and len(reasons) == 490
    chosen = {r.node for r in d.queue}
    # The worst five: the three critical ones, then the two earliest warnings.
    assert critical | {"gpu-node-000", "gpu-node-001"} <= chosen
    # The sample does not depend on the order Alertmanager listed the alerts in.
    random.Random(7).shuffle(alerts)
    assert {r.node for r in run(payload(alerts)).queue} == chosen
    # The rest are named for capture on demand.
    assert len(d.to_json()["on_demand"]) == 490
    # Resent while the first ten are in flight: nothing more for this incident.
    again = run(payload(alerts), list(d.queue), now=NOW + 300)
    assert again.queue == ()
    assert sum(s.reason == "exists" for s in again.skipped) == 10


def test_a_storm_of_500_incidents_stops_at_the_cluster_cap_then_the_rate_limit() -> None:
    bodies = [payload([alert(f"gpu-node-{i:03d}")], key=f'{{}}:{{node="gpu-node-{i:03d}"}}') for i in range(500)]
    stored: list[CaptureRequest] = []
    reasons: list[str] = []
    for body in bodies:
        d = run(body, stored)
        stored += d.queue
        reasons += [s.reason for s in d.skipped]
    assert len(stored) == 20 and reasons.count("in_flight_cap") == 480 and len(reasons) == 480
    # With room in flight, the rate limit per alert name holds: 50 per 10 minutes.
    roomy = AlertLimits(max_in_flight=1000)
    stored, reasons = [], []
    for body in bodies:
        d = run(body, stored, limits=roomy)
        stored += d.queue
        reasons += [s.reason for s in d.skipped]
    assert len(stored) == 50 and reasons.count("rate_limited") == 450
    # Another alert name has its own budget; ten minutes later the first has its budget back.
    other = payload([alert("gpu-node-900", name="RailscopePfcStorm")], key="pfc")
    assert len(run(other, stored, limits=roomy).queue) == 1
    late = payload([alert("gpu-node-901")], key="late")
    assert len(run(late, stored, now=NOW + 600, limits=roomy).queue) == 1
    # Requests that completed no longer count in flight.
    unlimited = AlertLimits(rate_per_alertname=10_000)
    assert [s.reason for s in run(late, stored, now=NOW + 120, limits=unlimited).skipped] == ["in_flight_cap"]
    done = [r.done(f"c/2026-11-30/{r.incident}/x.tar.gz", NOW + 60) for r in stored]
    assert len(run(late, done, now=NOW + 120, limits=unlimited).queue) == 1


def test_a_node_captured_recently_gets_that_bundle_filed_under_the_new_incident() -> None:
    """Within the cooldown a node is not captured again, but the alert is not dropped either: its
    incident gets the node's bundle of moments ago (reused), whoever asked for that one."""
    first = run(payload([alert("gpu-node-017")], key="a")).queue
    key = f"default/2026-11-30/{first[0].incident}/gpu-node-017-20261130T090140Z-{first[0].id}.tar.gz"
    done = [first[0].done(key, NOW + 100)]
    body_b = payload([alert("gpu-node-017", name="RailscopePfcStorm", severity="critical")], key="b")
    d = run(body_b, done, now=NOW + 100 + 899)
    assert d.queue == () and d.skipped == ()
    (u,) = d.reused
    assert u.bundle == key and u.done_at == NOW + 100 and u.request.node == "gpu-node-017"
    assert u.request.incident != first[0].incident and u.request.severity == "critical"
    assert d.outcomes() == {("reused", "", "critical"): 1}
    assert d.to_json()["reused"] == [{"id": u.request.id, "incident": u.request.incident, "node": "gpu-node-017",
                                      "cluster": "default", "bundle": key}]
    assert len(run(body_b, done, now=NOW + 100 + 900).queue) == 1
    # A request for another incident in flight (no bundle yet): the alert's request waits for that
    # capture (stored pending, filed when it is done), never a second capture, never nothing.
    d = run(body_b, list(first), now=NOW + 10)
    assert d.queue == () and d.skipped == () and d.reused == ()
    (f,) = d.follow
    assert f.node == "gpu-node-017" and f.state == "pending" and f.severity == "critical"
    assert d.outcomes() == {("reused", "capture_in_flight", "critical"): 1}
    # Two incidents of one payload for one node: one capture, the second incident follows it.
    two = payload([alert("gpu-node-017", incident="inc-a"), alert("gpu-node-017", incident="inc-b")])
    d = run(two)
    assert [r.incident for r in d.queue] == ["inc-a"] and [r.incident for r in d.follow] == ["inc-b"]
    # A skip that leaves the node without a bundle is marked dropped.
    d = run(body_b, [], limits=AlertLimits(rate_per_alertname=0))
    assert [(s.reason, s.severity, s.dropped) for s in d.skipped] == [("rate_limited", "critical", True)]
    assert d.to_json()["dropped"] == [{"incident": d.skipped[0].incident, "node": "gpu-node-017",
                                       "reason": "rate_limited", "severity": "critical"}]


def test_an_operators_capture_answers_a_critical_alert_within_the_cooldown() -> None:
    """The manual capture of a node (an operator's request, done) is the bundle a critical alert of
    minutes later gets; the reused request keeps the capture's time, so reusing never stretches the
    cooldown, and the group's resend finds it (exists)."""
    op = request_for("inc-manual", "gpu-node-017", now=NOW - 300, ttl_s=1800, source="operator")
    op_key = f"default/2026-11-30/inc-manual/gpu-node-017-20261130T085500Z-{op.id}.tar.gz"
    stored = [op.done(op_key, NOW - 240)]
    body = payload([alert("gpu-node-017", name="RailscopeRailLinkDown", severity="critical")], key="crit")
    d = run(body, stored)
    assert [u.bundle for u in d.reused] == [op_key] and d.queue == ()
    filed = d.reused[0].request.done("default/2026-11-30/x/y.tar.gz", d.reused[0].done_at)
    again = run(body, [*stored, filed], now=NOW + 60)
    assert [s.reason for s in again.skipped] == ["exists"] and not again.reused
    # The kill switch is the only way a critical alert goes uncounted as captured: and it is counted.
    off = run(body, stored, limits=AlertLimits(enabled=False))
    assert off.outcomes() == {("skipped", "disabled", "critical"): 1}


def test_the_kill_switch_queues_nothing() -> None:
    d = run(payload([alert("gpu-node-017"), alert("gpu-node-018")]), limits=AlertLimits(enabled=False))
    assert d.queue == () and [s.reason for s in d.skipped] == ["disabled", "disabled"]


def test_an_expired_request_never_picked_up_is_queued_again_with_the_same_id() -> None:
    first = run(payload([alert("gpu-node-017")])).queue
    d = run(payload([alert("gpu-node-017")]), list(first), now=NOW + 1800)
    assert [r.id for r in d.queue] == [first[0].id] and d.requeued == (first[0].id,)
    assert not run(payload([alert("gpu-node-017")]), list(first), now=NOW + 1799).queue


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "bad_json"),
    (b"[]", 400, "bad_json"),
    (b"\xff\xfe", 400, "bad_json"),
    (json.dumps({"version": "3", "groupKey": "k", "status": "firing", "alerts": []}).encode(), 400, "bad_version"),
    (json.dumps({"version": "4", "status": "firing", "alerts": []}).encode(), 400, "bad_alert"),
    (payload([{"status": "firing", "labels": {"node": "n"}, "startsAt": T0}]), 400, "bad_alert"),
    (payload([{**alert("n"), "startsAt": "yesterday"}]), 400, "bad_alert"),
    (payload([{**alert("n"), "labels": {"alertname": "A", "node": 7}}]), 400, "bad_alert"),
    (payload([{**alert("n"), "status": "pending"}]), 400, "bad_alert"),
    (payload([alert("../../etc")]), 422, "bad_label"),
    (payload([alert("gpu-node-017,gpu-node-018")]), 422, "bad_label"),
    (payload([alert("GPU-Node-017")]), 422, "bad_label"),
    (payload([alert("n", incident="x" * 64)]), 422, "bad_label"),
    (payload([alert("n", incident="..")]), 422, "bad_label"),
    (payload([alert(f"n{i}") for i in range(5001)]), 413, "too_large"),
    (b" " * (2 << 20) + b"{}", 413, "too_large"),
    (payload([alert("n", big="v" * 2000)]), 400, "bad_alert"),
])
def test_hostile_payloads_are_refused_whole(body: bytes, status: int, code: str) -> None:
    with pytest.raises(WebhookError) as exc:
        parse_webhook(body)
    assert (exc.value.status, exc.value.code) == (status, code)
    assert exc.value.message and len(exc.value.message) < 300


def test_a_bad_node_anywhere_refuses_the_good_ones_too() -> None:
    with pytest.raises(WebhookError):
        parse_webhook(payload([alert("gpu-node-017"), alert("bad/node")]))


def test_stored_requests_round_trip_and_bad_ones_are_refused() -> None:
    req = request_for("inc-1", "gpu-node-017", now=NOW, ttl_s=1800, alertname="A", severity="critical")
    assert CaptureRequest.loads(req.dumps()) == req
    done = req.done("c/2026-11-30/inc-1/gpu-node-017-20261130T090000Z-" + req.id + ".tar.gz", NOW + 30)
    assert CaptureRequest.loads(done.dumps()) == done
    assert req.object_key() == f"_requests/default/gpu-node-017/{req.id}.json"
    doc = req.to_json()
    for bad in ({"plan": "rm -rf /"}, {"params": {"argv": ["sh", "-c", "x"]}}, {"params": {"pod_netns": "yes"}},
                {"node": "../x"}, {"id": "b" + "0" * 24}, {"plan_version": 2}, {"state": "running"},
                {"created": "now"}, {"schema": "other"}):
        with pytest.raises(RequestError):
            CaptureRequest.loads(json.dumps({**doc, **bad}).encode())
    with pytest.raises(RequestError):
        CaptureRequest.loads(b"x" * 20000)
    # A non-default parameter is part of the plan, hence of the bundle id.
    netns = request_for("inc-1", "gpu-node-017", now=NOW, ttl_s=1800, params={"pod_netns": True})
    assert netns.id != req.id and netns.id == bundle_id("inc-1", "gpu-node-017", "node-bundle/v1;pod_netns=true")


def test_the_alert_plan_is_one_the_agents_ship() -> None:
    from collector.config import AlertLimits, SettingsError

    assert AlertLimits().plan == "node-bundle"
    with pytest.raises(SettingsError, match="unknown capture plan 'shell'"):
        AlertLimits(plan="shell")


def test_nodes_without_a_recent_agent_have_their_own_cap_and_ttl() -> None:
    limits = AlertLimits(max_in_flight=2, absent_max_in_flight=1, absent_ttl_s=120, agent_recent_s=300)
    agents = {("default", "live-1"): NOW - 300, ("default", "live-2"): NOW - 10, ("default", "stale"): NOW - 301}
    body = payload([alert(n, incident=f"inc-{n}") for n in ("ghost-a", "ghost-b", "stale", "live-1", "live-2")])
    d = decide(parse_webhook(body), [], NOW, limits, agents)
    assert sorted(r.node for r in d.queue) == ["ghost-a", "live-1", "live-2"]
    assert d.no_recent_agent == ("ghost-a",)
    assert {r.node: r.expires - r.created for r in d.queue} == {"ghost-a": 120, "live-1": 1800, "live-2": 1800}
    assert sorted(s.node for s in d.skipped if s.reason == "no_recent_agent_cap") == ["ghost-b", "stale"]
    # The agentless request in flight holds only its own cap: a live node's alert still queues...
    more = payload([alert("live-3", incident="inc-x"), alert("ghost-c", incident="inc-y")])
    d2 = decide(parse_webhook(more), list(d.queue[:1]), NOW + 1, limits, {**agents, ("default", "live-3"): NOW})
    assert [r.node for r in d2.queue] == ["live-3"]
    assert [s.reason for s in d2.skipped] == ["no_recent_agent_cap"]
    # ...and once it expired (short TTL), the resend may queue one again, never more than the cap.
    d3 = decide(parse_webhook(more), list(d.queue[:1]), NOW + 121, limits, {**agents, ("default", "live-3"): NOW})
    assert d3.no_recent_agent == ("ghost-c",)
    # Without a view of the agents (None) every node counts as having one: the former policy.
    assert len(decide(parse_webhook(body), [], NOW, AlertLimits()).queue) == 5
