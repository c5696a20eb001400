"""Fabric correlation (collector/fabric.py) and the incident identity it gives the alert policy.

Alertmanager with the README's ``group_by: [alertname, node]`` sends one webhook per node: a leaf fault
on 64 nodes is 64 payloads. The alerts carry the rail's leaf (``peer_system``/``peer_port``, joined on by
the shipped rules from ``railscope_rail_peer_info``).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from collector.alerts import AlertLimits, FabricDesk, decide, parse_webhook
from collector.fabric import (
    FabricConfig,
    Ledger,
    Signal,
    correlate,
    event_incident,
    signal_of_alert,
    signals_of_doctor,
)
from proto.keys import PART
from tests.support.alerts import NOW, alert, payload
from tests.support.alerts import post_alerts as _alerts
from tests.support.collector_helpers import local_settings, run, running

T = "2026-11-30T09:00:10Z"  # NOW is 2026-11-30T08:53:20Z; the alerts started a little later


def rail_alert(node: str, leaf: str, *, port: str = "swp1", rail: str = "0", plane: str = "0",
               name: str = "RailscopeRailLinkDown", severity: str = "critical", starts: str = T, **labels: str):
    return alert(node, name=name, severity=severity, starts=starts, rail=rail, plane=plane, device=f"net_rail{rail}",
                 peer_system=leaf, peer_port=port, **labels)


def per_node(alerts: list[dict]) -> list[bytes]:
    """What Alertmanager sends with group_by [alertname, node]: a payload per node."""
    return [payload([a], key=f'{{}}:{{alertname="{a["labels"]["alertname"]}", node="{a["labels"]["node"]}"}}')
            for a in alerts]


def through_desk(bodies: list[bytes], limits: AlertLimits, now: float = NOW) -> list:
    """Post each payload to a desk, then decide the held ones once the hold is over."""
    desk = FabricDesk(limits)
    stored: list = []
    decisions = []
    for i, b in enumerate(bodies):
        hook = parse_webhook(b)
        at = now + i * 0.01
        desk.observe(hook, at)
        d = desk.decide(hook, stored, at)
        stored += d.queue
        decisions.append(d)
    later = now + len(bodies) * 0.01 + limits.fabric_hold_s
    for hook in desk.due(later):
        d = desk.decide(hook, stored, later)
        stored += d.queue
        decisions.append(d)
    assert not desk.held
    return stored, decisions, desk


LIMITS = AlertLimits(max_in_flight=1000, rate_per_alertname=10_000)


def test_a_64_node_leaf_fault_posted_per_node_is_one_incident_with_the_incident_caps() -> None:
    bodies = per_node([rail_alert(f"gpu-{n:03d}", "leaf-a07", port=f"swp{n}") for n in range(64)])
    stored, decisions, desk = through_desk(bodies, LIMITS)
    incidents = {r.incident for r in stored}
    assert len(incidents) == 1, incidents
    (incident,) = incidents
    assert incident.startswith("fabric-leaf-leaf-a07-") and PART.fullmatch(incident)
    # the worst few and a sample of the whole event, not the first ten webhooks
    assert len(stored) == LIMITS.incident_worst + LIMITS.incident_sample
    skipped = [s.reason for d in decisions for s in d.skipped]
    assert skipped.count("held") == 64 and skipped.count("incident_cap") == 54
    (event,) = desk.ledger.correlation().top
    assert (event.kind, event.key, event.nodes) == ("leaf", "leaf-a07", 64)


def test_without_the_correlation_the_same_leaf_fault_is_64_incidents() -> None:
    # the policy alone (before fabric correlation): one incident per Alertmanager group
    bodies = per_node([rail_alert(f"gpu-{n:03d}", "leaf-a07") for n in range(64)])
    got = {r.incident for b in bodies for r in decide(parse_webhook(b), [], NOW, LIMITS).queue}
    assert len(got) == 64


def test_a_10000_node_plane_fault_is_one_incident() -> None:
    # 8 rails per node, rail r of every node on plane r's leaves (64 nodes a leaf); plane 3 fails
    alerts = [rail_alert(f"gpu-{n:05d}", f"p3-leaf{n // 64:03d}", rail="3", plane="3", port=f"swp{n % 64}")
              for n in range(10_000)]
    random.Random(1).shuffle(alerts)  # webhooks arrive in any order
    stored, _d, desk = through_desk(per_node(alerts), LIMITS)
    incidents = {r.incident for r in stored}
    assert len(incidents) == 1 and next(iter(incidents)).startswith("fabric-plane-3-"), incidents
    assert len(stored) == 10
    (event,) = desk.ledger.correlation().top
    assert event.kind == "plane" and event.nodes == 10_000 and len(event.leaves) == 157


def test_independent_single_node_faults_stay_their_own_incidents_and_name_no_leaf() -> None:
    rng = random.Random(7)
    leaves = rng.sample(range(600), 100)
    alerts = [rail_alert(f"gpu-{n:05d}", f"leaf{leaves[i]:03d}", rail=str(i % 8), plane=str(i % 8))
              for i, n in enumerate(rng.sample(range(10_000), 100))]
    stored, _d, desk = through_desk(per_node(alerts), LIMITS)
    assert not desk.ledger.correlation().events
    assert len({r.incident for r in stored}) == 100 and not any(r.incident.startswith("fabric-") for r in stored)


def test_the_storming_node_is_the_culprit_the_paused_ones_victims() -> None:
    storm = rail_alert("gpu-009", "leaf-b02", name="RailscopePfcStorm")
    paused = [rail_alert(f"gpu-{n:03d}", "leaf-b02", name="RailscopeRailPausedByPeer", severity="warning",
                         direction="rx") for n in range(10, 16)]
    corr = correlate([signal_of_alert(a["labels"], NOW) for a in [storm, *paused]])
    (ev,) = corr.top
    assert ev.culprits == ["gpu-009"] and ev.victims == [f"gpu-{n:03d}" for n in range(10, 16)]
    assert ev.to_json()["victims_total"] == 6


def test_an_event_straddling_a_window_boundary_is_one_event() -> None:
    cfg = FabricConfig(window_s=300)
    edge = 300 * 6_000_000
    sigs = [Signal(f"n{i}", "0", edge - 2 + i, leaf="leaf-c") for i in range(6)]
    corr = correlate(sigs, cfg)
    (ev,) = corr.top
    assert {corr.event_of(s).incident for s in sigs} == {ev.incident}


def doctor(node: str, leaf: str, findings: list[tuple[str, str]], vendor: str = "FINISAR CORP.") -> dict:
    return {"node": node, "rails": [{"rail": 0, "plane": 0, "netdev": "net_rail0",
                                     "peer": {"system": leaf, "port": "swp1", "mfs": 9216, "pfc": [3], "seen": T}}],
            "findings": [{"code": c, "subject": "net_rail0", "severity": s,
                          "evidence": {"vendor": vendor, "part": "FTLC1152RGPL6-FB"}} for c, s in findings]}


def test_a_bad_optics_batch_over_many_leaves_names_the_batch_and_no_leaf() -> None:
    sigs = []
    known = []
    for n in range(40):
        s, k = signals_of_doctor(doctor(f"gpu-{n:03d}", f"leaf{n % 10}",
                                        [("OpticsOutOfRange", "warning")] if n < 12 else []), NOW)
        sigs += s
        known += k
    corr = correlate(sigs, known=known)
    assert [(e.kind, e.key, e.nodes) for e in corr.top] == [("batch", "FINISAR CORP. FTLC1152RGPL6-FB", 12)]


def test_a_leaf_whose_share_of_degraded_nodes_is_small_is_not_named() -> None:
    sigs, known = [], []
    for n in range(64):
        s, k = signals_of_doctor(doctor(f"gpu-{n:03d}", "leaf-x", [("RailLinkDown", "critical")] if n < 5 else []),
                                 NOW)
        sigs += s
        known += k
    assert not correlate(sigs, known=known).events  # 5 of 64: not the leaf
    assert [e.kind for e in correlate(sigs).top] == ["leaf"]  # without the sizes, 5 >= leaf_min_nodes


def test_incident_ids_are_key_parts_whatever_the_leaf_is_called() -> None:
    for name in ("Leaf-01.DC2", "ünïcode\x1b[31m", "x" * 300, "", "../.."):
        inc = event_incident("leaf", name, 5_986_666, 300)
        assert PART.fullmatch(inc) and ".." not in inc, inc


def test_the_ledger_is_bounded_and_forgets_old_alerts() -> None:
    led = Ledger(FabricConfig(window_s=60), max_signals=1000, keep_s=3600)
    led.observe((Signal(f"n{i}", "0", NOW, leaf=f"l{i % 7}") for i in range(5000)), NOW)
    assert len(led) <= 1000
    led.prune(NOW + 3000)
    assert len(led) == 1000  # Alertmanager resends a firing group within its repeat_interval
    led.prune(NOW + 3601)
    assert len(led) == 0


def test_a_resend_hours_later_finds_its_fabric_incident_and_captures_nothing_new() -> None:
    bodies = per_node([rail_alert(f"gpu-{n:03d}", "leaf-a07") for n in range(64)])
    stored, _d, desk = through_desk(bodies, LIMITS)
    later = NOW + 4 * 3600  # Alertmanager's default repeat_interval
    desk.ledger.prune(later)
    again = []
    for b in bodies:
        hook = parse_webhook(b)
        desk.observe(hook, later)
        again.append(desk.decide(hook, [r.done(r.bundle or "k", NOW + 60) for r in stored], later))
    assert not any(d.queue for d in again)
    assert {s.reason for d in again for s in d.skipped} == {"exists", "incident_cap"}


def test_truncated_alerts_are_accepted_and_counted(tmp_path: Path) -> None:
    body = payload([alert("gpu-node-017")], truncatedAlerts=250)

    async def go():
        async with running(local_settings(tmp_path)) as (url, col):
            got = await _alerts(url, body)
            again = await _alerts(url, body)
            return got, again, col.metrics.render().decode()

    (status, doc), (status2, _doc2), metrics = run(go())
    assert status == status2 == 200 and len(doc["queued"]) == 1 and doc["truncated_alerts"] == 250
    assert re.search(r"^railscope_collector_alerts_truncated_total 500\.0$", metrics, re.M), metrics


@pytest.mark.parametrize("value", [-1, "12", None, 1 << 40, 2.5])
def test_a_bad_truncated_alerts_value_is_no_reason_to_refuse(value: object) -> None:
    hook = parse_webhook(payload([alert("n1")], truncatedAlerts=value))
    assert hook.truncated == 0 and len(hook.alerts) == 1


def test_the_incident_and_fabric_pages_name_the_leaf_its_culprit_and_victims(tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.support.collector_helpers import AGENT_TOKEN, HELLO, OPERATOR_TOKEN, body, post
    from tests.support.pages import basic, bundle_of, fetch

    leaf = "leaf-a07<script>"
    group = [rail_alert("gpu-node-017", leaf, name="RailscopePfcStorm", port="swp17")]
    group += [rail_alert(f"gpu-{n:03d}", leaf, name="RailscopeRailPausedByPeer", severity="warning", direction="rx",
                         port=f"swp{n}") for n in range(5)]
    settings = replace(local_settings(tmp_path), alerts=AlertLimits(fabric_hold_s=0))

    async def go():
        async with running(settings) as (url, _col):
            status, doc = await _alerts(url, payload(group, key='{}:{alertname=~".*"}'))
            assert status == 200, doc
            (incident,) = {q["incident"] for q in doc["queued"]}
            status, _text, _h = await fetch(url, "/ui/fabric")
            assert status == 401
            status, fabric_page, _h = await fetch(url, "/ui/fabric", basic(OPERATOR_TOKEN))
            assert status == 200
            status, up, _ = await post(url, body(replace(HELLO, incident=incident), bundle_of("rail-link-down")),
                                       token=AGENT_TOKEN)
            assert status == 200, up
            _s, linked, _h = await fetch(url, "/ui/fabric", basic(OPERATOR_TOKEN))
            _s, page, _h = await fetch(url, f"/ui/incidents/prod-east/2026-12-01/{incident}", basic(OPERATOR_TOKEN))
            return doc, incident, fabric_page, linked, page

    doc, incident, fabric_page, linked, page = run(go())
    assert incident.startswith("fabric-leaf-leaf-a07-script-") and doc["fabric"][0]["event"] == f"leaf {leaf}"
    for text in (fabric_page, page):
        assert "leaf leaf-a07&lt;script&gt;" in text and "<script>" not in text
        assert re.search(r"Culprit</b> \(sends pause, storms\): <span class=mono>gpu-node-017</span>", text)
        assert re.search(r"Victims</b> \(paused by the leaf\): <span class=mono>gpu-000, gpu-001, gpu-002, "
                         r"gpu-003, gpu-004</span>", text)
        assert "<b>6</b> nodes' rails degraded together" in text
    assert "no bundle stored yet" in fabric_page
    assert f'href="/ui/incidents/prod-east/2026-12-01/{incident}"' in linked
    assert page.index("<h2>Fabric</h2>") < page.index("<h2>Fleet view</h2>")


def test_a_plane_fault_whose_webhooks_trickle_in_past_the_hold_is_still_one_incident() -> None:
    # 10,000 webhooks over 100 s, node by node (a leaf's nodes one after the other), the desk deciding
    # what is due every second: a payload held 20 s whose leaf has not yet shown its other nodes joins
    # the plane's event (it once became an incident of its own)
    limits = replace_limits(fabric_hold_s=20)
    desk = FabricDesk(limits)
    stored: list = []
    bodies = per_node([rail_alert(f"gpu-{n:05d}", f"p1-leaf{n // 64:03d}", rail="1", plane="1") for n in range(10_000)])
    # the first node of every leaf first, then the others leaf by leaf: the last leaf's other nodes
    # arrive 100 s after its first, long past the hold
    order = sorted(range(len(bodies)), key=lambda k: (k % 64 != 0, k))
    tick = NOW
    for j, k in enumerate(order):
        at = NOW + j * 0.01
        hook = parse_webhook(bodies[k])
        desk.observe(hook, at)
        stored += desk.decide(hook, stored, at).queue
        if at >= tick + 1:
            tick = at
            for h in desk.due(at):
                stored += desk.decide(h, stored, at).queue
    end = NOW + len(bodies) * 0.01
    for step in range(200):
        for h in desk.due(end + step):
            stored += desk.decide(h, stored, end + step).queue
    assert not desk.held
    assert {r.incident.split("-")[1] for r in stored} == {"plane"} and len(stored) == 10


def replace_limits(**kw: float) -> AlertLimits:
    from dataclasses import replace

    return replace(LIMITS, **kw)


def _doctor(node: str, leaf: str, ports: list[str], plane: int | None = None) -> dict:
    """A doctor document's rails as a stored bundle's analysis has them (``rails[].peer``)."""
    return {"schema": "railscope.doctor/v1", "node": node, "findings": [],
            "rails": [{"rail": i, "plane": plane, "netdev": f"net_rail{i}",
                       "peer": {"system": leaf, "port": p, "mfs": 9216, "pfc": [3], "seen": NOW - 600}}
                      for i, p in enumerate(ports)]}


def bare_alert(node: str, *, rail: str = "0", name: str = "RailscopeRailLinkDown", severity: str = "critical"):
    """A rail alert whose labels name no leaf (a Prometheus without the shipped join rules)."""
    return alert(node, name=name, severity=severity, starts=T, rail=rail, plane="0", device=f"net_rail{rail}")


def test_alerts_without_peer_labels_are_filed_under_the_leaf_their_nodes_stored_diagnoses_name() -> None:
    nodes = [f"gpu-{n:03d}" for n in range(8)]
    bodies = per_node([bare_alert(n) for n in nodes])
    stored, _d, _desk = through_desk(bodies, LIMITS)
    assert len({r.incident for r in stored}) == 8  # nothing says which leaf: a node each

    desk = FabricDesk(LIMITS)
    for i, n in enumerate(nodes):
        assert desk.peers.learn(n, _doctor(n, "leaf-a07", [f"swp{i}", f"swp{i + 8}"]), NOW - 3600, NOW) == 2
    stored, decisions = [], []
    for i, b in enumerate(bodies):
        hook = parse_webhook(b)
        desk.observe(hook, NOW + i * 0.01)
        d = desk.decide(hook, stored, NOW + i * 0.01)
        stored += d.queue
    later = NOW + 1 + LIMITS.fabric_hold_s
    for hook in desk.due(later):
        d = desk.decide(hook, stored, later)
        stored += d.queue
        decisions.append(d)
    (incident,) = {r.incident for r in stored}
    assert incident.startswith("fabric-leaf-leaf-a07-")
    assert {e for d in decisions for e in d.fabric.values()} == {"leaf leaf-a07"}


def test_the_peer_map_is_bounded_forgets_old_diagnoses_and_a_newer_one_wins() -> None:
    from collector.fabric import PeerMap

    peers = PeerMap(max_nodes=100, max_age_s=86400)
    for n in range(250):
        peers.learn(f"n{n}", _doctor(f"n{n}", "leaf-01", ["swp1"]), NOW - 60, NOW)
    assert len(peers) == 100 and peers.peer("n0", "0", "", "net_rail0", NOW) is None
    assert peers.peer("n249", "0", "", "net_rail0", NOW) == ("leaf-01", "swp1", "")
    # too old to teach, and too old to use
    assert peers.learn("old", _doctor("old", "leaf-01", ["swp1"]), NOW - 2 * 86400, NOW) == 0
    assert peers.peer("n249", "0", "", "net_rail0", NOW + 2 * 86400) is None
    # a node recabled: the newer diagnosis wins, an older one analysed later does not undo it
    peers.learn("n249", _doctor("n249", "leaf-09", ["swp4"]), NOW - 30, NOW)
    peers.learn("n249", _doctor("n249", "leaf-01", ["swp1"]), NOW - 90, NOW)
    assert peers.peer("n249", "0", "", "net_rail0", NOW) == ("leaf-09", "swp4", "")
    # by rail and plane, else by netdev; an alert's own peer labels always win
    peers.learn("p", _doctor("p", "leaf-03", ["swp1", "swp2"], plane=1), NOW - 30, NOW)
    assert peers.peer("p", "1", "1", "", NOW) == ("leaf-03", "swp2", "1")
    assert peers.peer("p", "", "", "net_rail1", NOW) == ("leaf-03", "swp2", "1")
    labels = {"node": "p", "rail": "1", "plane": "1", "peer_system": "leaf-77", "peer_port": "swp9"}
    assert peers.labels(labels, NOW) is labels
    # a rail of 64 entries at most, whatever the document says
    many = _doctor("big", "leaf-01", [f"swp{i}" for i in range(500)])
    assert peers.learn("big", many, NOW - 30, NOW) == PeerMap.MAX_RAILS


def test_a_stored_bundles_analysis_teaches_the_collector_its_nodes_leaf(tmp_path: Path) -> None:
    """Through the collector: a bundle of gpu-node-017 (lldp-peers-healthy: leaf-02) is uploaded and its
    incident page analyses it; then a rail alert of gpu-node-017 without peer labels joins the leaf-02 event
    of three other nodes whose alerts name it."""
    from dataclasses import replace

    from tests.support.collector_helpers import AGENT_TOKEN, HELLO, OPERATOR_TOKEN, body, post
    from tests.support.pages import basic, bundle_of, fetch

    others = [rail_alert(f"gpu-{n:03d}", "leaf-02", port=f"swp{n + 10}") for n in range(3)]
    settings = replace(local_settings(tmp_path), alerts=AlertLimits(fabric_hold_s=0, max_in_flight=1000,
                                                                     absent_max_in_flight=1000))

    async def go():
        async with running(settings) as (url, _col):
            status, up, _ = await post(url, body(HELLO, bundle_of("lldp-peers-healthy")), token=AGENT_TOKEN)
            assert status == 200, up
            status, page, _h = await fetch(url, f"/ui/incidents/prod-east/2026-12-01/{HELLO.incident}",
                                           basic(OPERATOR_TOKEN))
            assert status == 200 and "PENDING" not in page  # analysed
            status, doc = await _alerts(url, payload([bare_alert("gpu-node-017"), *others],
                                                     key='{}:{alertname="RailscopeRailLinkDown"}'))
            assert status == 200, doc
            return doc

    doc = run(go())
    incidents = {q["node"]: q["incident"] for q in doc["queued"]}
    assert set(incidents) == {"gpu-node-017", "gpu-000", "gpu-001", "gpu-002"}, doc
    assert len(set(incidents.values())) == 1 and incidents["gpu-node-017"].startswith("fabric-leaf-leaf-02-"), doc
