"""``POST /v1/alerts``: Alertmanager's webhook (version 4) turned into capture requests, bounded.

The policy is pure (:func:`parse_webhook`, :func:`decide`): a payload, the requests already in the
store and the clock in; the requests to queue and why every other node was left out. So the same
group posted ten times queues once, and the limits can be counted exactly in a table test.

- Idempotent: Alertmanager resends a group on every ``group_interval`` and ``repeat_interval``. The
  incident id comes from the alert's ``incident`` label, else from the group key and the group's
  earliest ``startsAt`` — both stable across resends — and a request's id is the bundle id of
  (incident, node, plan), so a resend finds the request it made.
- One request per node per incident; resolved alerts create nothing; alerts without a ``node`` label
  never fan out.
- Never silent: a node captured within its cooldown (for any incident, by an operator too) is not
  captured again, its bundle is filed under the alert's incident (``reused``; a capture still running
  is filed when done); every other alert left without a bundle is a warning, and every outcome is
  counted (``railscope_collector_alert_outcomes_total``).
- Bounded: a cooldown per node (across incidents), a cluster-wide cap on requests in flight, a cap
  per incident (the worst few by severity plus a deterministic sample of the rest; the others are
  named in the answer, to capture on demand), a rate limit per alert name, and a kill switch.
- Fabric events (``collector.fabric``): rail alerts that name their leaf (``peer_system``, joined on
  by the shipped rules) are correlated across webhooks; the alerts of one leaf or plane event are one
  incident (``fabric-<leaf|plane>-…``) whatever Alertmanager's grouping, and its captures are the worst
  few and a sample of the whole event's nodes. Such an alert is held ``fabric_hold_s`` first (the skip
  reason ``held``), so the other nodes' webhooks of the event arrive before its incident is decided.
- ``truncatedAlerts`` (Alertmanager's ``max_alerts``) is accepted and counted, never refused.
- Nodes whose agent has not polled recently (the poll markers of ``RequestBoard.mark_polled``) never
  hold the cluster's cap: they share a small cap of their own, their requests expire soon, and the
  answer names them (``no_recent_agent``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from proto.keys import KeyPartError, check_part

from . import limits as limits_mod
from .config import AlertLimits
from .errors import Refused
from .fabric import Correlation, Event, FabricConfig, Ledger, PeerMap, Signal, choose, signal_of_alert
from .metrics import CollectorMetrics
from .requests import DEFAULT_CLUSTER, CaptureRequest, check_params, request_for
from .state import BOARD, FABRIC, LIMITS, PRINCIPAL, STATE
from .storage import StoreError

log = logging.getLogger("railscope.collector.alerts")

__all__ = ["BENIGN_SKIPS", "SEVERITY_RANK", "Alert", "AlertLimits", "Decision", "Reuse", "Skip", "Webhook",
           "WebhookError", "decide",
           "derive_incident", "parse_webhook"]

#: Worst first; an alert without a known severity ranks below info.
SEVERITY_RANK = {"critical": 3, "error": 3, "warning": 2, "info": 1}

MAX_BODY_BYTES = 2 << 20
MAX_ALERTS = 5000
MAX_LABELS = 64
MAX_LABEL_BYTES = 1024
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_SLUG = re.compile(r"[^a-z0-9]+")


class WebhookError(Refused):
    """A payload refused whole: nothing is queued. ``status`` is the HTTP answer."""


@dataclass(frozen=True, slots=True)
class Alert:
    status: str  # firing | resolved
    labels: Mapping[str, str]
    starts_at: float
    fingerprint: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def node(self) -> str | None:
        return self.labels.get("node")

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "")


@dataclass(frozen=True, slots=True)
class Webhook:
    group_key: str
    status: str
    receiver: str
    alerts: tuple[Alert, ...]
    common_labels: Mapping[str, str] = field(default_factory=dict)
    #: alerts Alertmanager left out of this payload (its ``max_alerts``)
    truncated: int = 0


def _time(value: Any, what: str) -> float:
    m = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise WebhookError(400, "bad_alert", f"{what} is not an RFC 3339 time")
    # Go prints nanoseconds; Python parses at most microseconds.
    frac = (m.group(2) or "")[:7]
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        ts = datetime.fromisoformat(m.group(1) + frac + tz).timestamp()
        # In UTC the year must stay within 1-9999 too: the incident id and the keys print it.
        datetime.fromtimestamp(ts, UTC)
        return ts
    except (ValueError, OverflowError, OSError):
        raise WebhookError(400, "bad_alert", f"{what} is not a real time (UTC years 1-9999)") from None


def _labels(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebhookError(400, "bad_alert", f"{what} must be an object of strings")
    if len(value) > MAX_LABELS:
        raise WebhookError(400, "bad_alert", f"{what}: more than {MAX_LABELS} labels")
    for k, v in value.items():
        if not isinstance(v, str):
            raise WebhookError(400, "bad_alert", f"{what} {k[:40]!r} must be a string")
        if len(k) + len(v) > MAX_LABEL_BYTES:
            raise WebhookError(400, "bad_alert", f"{what} {k[:40]!r} is longer than {MAX_LABEL_BYTES} bytes")
    return dict(value)


def parse_webhook(body: bytes) -> Webhook:
    """An Alertmanager webhook payload (version 4), validated, or :class:`WebhookError`."""
    if len(body) > MAX_BODY_BYTES:
        raise WebhookError(413, "too_large", f"the payload is larger than {MAX_BODY_BYTES} bytes")
    try:
        doc = limits_mod.loads(body, "the payload")
    except ValueError as exc:
        raise WebhookError(400, "bad_json", f"the payload is not JSON: {str(exc)[:80]}") from None
    if not isinstance(doc, dict):
        raise WebhookError(400, "bad_json", "the payload must be a JSON object")
    if doc.get("version") != "4":
        raise WebhookError(400, "bad_version", f"webhook version {str(doc.get('version'))[:10]!r} is not \"4\"")
    group_key = doc.get("groupKey")
    if not isinstance(group_key, str) or not group_key or len(group_key) > 4096:
        raise WebhookError(400, "bad_alert", "groupKey must be a non-empty string")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise WebhookError(400, "bad_alert", "alerts must be a list")
    if len(alerts) > MAX_ALERTS:
        raise WebhookError(413, "too_large", f"more than {MAX_ALERTS} alerts in one payload")
    out = []
    for n, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise WebhookError(400, "bad_alert", f"alerts[{n}] must be an object")
        status = a.get("status")
        if status not in ("firing", "resolved"):
            raise WebhookError(400, "bad_alert", f"alerts[{n}].status must be firing or resolved")
        labels = _labels(a.get("labels"), f"alerts[{n}].labels")
        if "alertname" not in labels:
            raise WebhookError(400, "bad_alert", f"alerts[{n}] has no alertname label")
        fp = a.get("fingerprint", "")
        out.append(Alert(status=status, labels=labels, starts_at=_time(a.get("startsAt"), f"alerts[{n}].startsAt"),
                         fingerprint=fp[:64] if isinstance(fp, str) else ""))
    status = doc.get("status")
    if status not in ("firing", "resolved"):
        raise WebhookError(400, "bad_alert", "status must be firing or resolved")
    receiver = doc.get("receiver") if isinstance(doc.get("receiver"), str) else ""
    # Alertmanager's webhook_config max_alerts cuts the list and says how many it left out: the group
    # is still an incident (the rest arrive with later notifications or on demand), so never refused.
    truncated = doc.get("truncatedAlerts", 0)
    truncated = truncated if type(truncated) is int and 0 <= truncated < 1 << 31 else 0
    hook = Webhook(group_key=group_key, status=status, receiver=receiver[:200], alerts=tuple(out),
                   common_labels=_labels(doc.get("commonLabels"), "commonLabels"), truncated=truncated)
    # A value that would make a bad key refuses the payload before anything is queued.
    for n, a in enumerate(hook.alerts):
        for label in ("node", "incident"):
            if label in a.labels:
                try:
                    check_part(f"alerts[{n}] label {label}", a.labels[label])
                except KeyPartError as exc:
                    raise WebhookError(422, "bad_label", str(exc)) from None
    return hook


def derive_incident(group_key: str, earliest: float, alertname: str = "") -> str:
    """The incident id of a group without an ``incident`` label: readable, stable across resends.

    ``<alertname>-<yyyymmddThhmmZ of the earliest startsAt>-<10 hex of the group key and that time>``.
    """
    stamp = datetime.fromtimestamp(int(earliest), UTC).strftime("%Y%m%dt%H%Mz")
    digest = hashlib.sha256(f"{group_key}\0{int(earliest)}".encode()).hexdigest()[:10]
    slug = _SLUG.sub("-", alertname.lower()).strip("-")[:30].strip("-") or "alert"
    return f"{slug}-{stamp}-{digest}"


#: Skip reasons that lose nothing: the capture exists, waits for the fabric correlation, is one of an
#: incident's many nodes left for on demand (named in the answer), or capture on alert is switched off.
#: Every other skip is an alert whose node is not captured: logged as a warning and alerted on
#: (``RailscopeCaptureAlertsDropped``).
BENIGN_SKIPS = frozenset({"exists", "held", "incident_cap", "disabled"})
#: The severity label of the outcome series: a closed set.
_SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True, slots=True)
class Skip:
    node: str
    incident: str
    #: exists | incident_cap | in_flight_cap | no_recent_agent_cap | rate_limited | disabled |
    #: held | other_cluster | bad_cluster | reuse_failed
    reason: str
    alertname: str = ""
    severity: str = ""
    cluster: str = ""

    @property
    def dropped(self) -> bool:
        """Whether the alert's node is left without a bundle for it (see :data:`BENIGN_SKIPS`)."""
        return self.reason not in BENIGN_SKIPS


@dataclass(frozen=True, slots=True)
class Reuse:
    """A node captured within the cooldown (for another incident, by an operator, by an alert): the
    alert's incident gets that bundle, copied under ``request``'s incident and bundle id, instead of a
    second capture or nothing."""

    #: the alert's request, pending; filed done once the copy is stored
    request: CaptureRequest
    #: the recent bundle's key (``<cluster>/<date>/<incident>/<name>``) and when it was captured
    bundle: str
    done_at: int


@dataclass(frozen=True, slots=True)
class Decision:
    queue: tuple[CaptureRequest, ...] = ()
    skipped: tuple[Skip, ...] = ()
    #: replaces an expired request that was never picked up (same id)
    requeued: tuple[str, ...] = ()
    resolved: int = 0
    no_node: int = 0
    #: queued nodes whose agent did not poll recently (their own cap and TTL)
    no_recent_agent: tuple[str, ...] = ()
    #: the fabric events this payload's alerts belong to: incident -> what it is
    fabric: Mapping[str, str] = field(default_factory=dict)
    truncated: int = 0
    #: nodes captured within the cooldown: their recent bundle filed under the alert's incident
    reused: tuple[Reuse, ...] = ()
    #: nodes being captured for another incident now: the alert's request, stored pending, gets that
    #: capture's bundle once it is done
    follow: tuple[CaptureRequest, ...] = ()

    def to_json(self) -> dict[str, Any]:
        reasons: dict[str, int] = {}
        for s in self.skipped:
            reasons[s.reason] = reasons.get(s.reason, 0) + 1
        return {"queued": [{"id": r.id, "incident": r.incident, "node": r.node, "plan": r.plan,
                            "cluster": r.cluster} for r in self.queue],
                "reused": [{"id": u.request.id, "incident": u.request.incident, "node": u.request.node,
                            "cluster": u.request.cluster, "bundle": u.bundle} for u in self.reused]
                + [{"id": r.id, "incident": r.incident, "node": r.node, "cluster": r.cluster, "bundle": None}
                   for r in self.follow][:1000],
                "skipped": reasons,
                "dropped": [{"incident": s.incident, "node": s.node, "reason": s.reason, "severity": s.severity}
                            for s in self.skipped if s.dropped][:1000],
                "on_demand": [{"incident": s.incident, "node": s.node} for s in self.skipped
                              if s.reason == "incident_cap"][:1000],
                "resolved": self.resolved, "no_node": self.no_node,
                "no_recent_agent": list(self.no_recent_agent),
                "fabric": [{"incident": i, "event": t} for i, t in sorted(self.fabric.items())][:100],
                "truncated_alerts": self.truncated}

    def outcomes(self) -> dict[tuple[str, str, str], int]:
        """(outcome, reason, severity) -> how many of this decision's alerts had it: ``queued``,
        ``reused`` or ``skipped`` by reason (the series ``railscope_collector_alert_outcomes_total``)."""
        out: dict[tuple[str, str, str], int] = {}

        def add(outcome: str, reason: str, severity: str) -> None:
            key = (outcome, reason, severity if severity in _SEVERITIES else "other")
            out[key] = out.get(key, 0) + 1

        for r in self.queue:
            add("queued", "", r.severity)
        for u in self.reused:
            add("reused", "", u.request.severity)
        for r in self.follow:
            add("reused", "capture_in_flight", r.severity)
        for s in self.skipped:
            add("skipped", s.reason, s.severity)
        return out


@dataclass(frozen=True, slots=True)
class _Target:
    incident: str
    node: str
    alertname: str
    severity: str
    starts_at: float
    #: the cluster whose node it is: the alert's ``cluster`` label, else the alerting token's binding,
    #: else the collector's default cluster
    cluster: str = ""

    @property
    def rank(self) -> int:
        return SEVERITY_RANK.get(self.severity, 0)


def _targets(hook: Webhook, fabric: Correlation | Callable[[], Correlation] | None = None,
             held: Callable[[Alert], bool] | None = None, cluster: str | None = None,
             default_cluster: str = DEFAULT_CLUSTER) -> tuple[list[_Target], int, int, dict[str, Event],
                                                               list[_Target], list[Skip]]:
    """(incident, cluster, node) -> its worst firing alert; with the counts of resolved and node-less
    alerts, the fabric events by incident, the targets held for the fabric correlation, and the alerts
    refused for their cluster (another than the alerting token's, or not a key part)."""
    firing = [a for a in hook.alerts if a.status == "firing"]
    resolved = len(hook.alerts) - len(firing)
    earliest = min((a.starts_at for a in hook.alerts), default=0.0)
    group_incident = derive_incident(hook.group_key, earliest, hook.common_labels.get("alertname", ""))
    best: dict[tuple[str, str, str], _Target] = {}
    events: dict[str, Event] = {}
    waiting: dict[tuple[str, str], _Target] = {}
    refused: list[Skip] = []
    no_node = 0
    corr: Correlation | None = fabric if isinstance(fabric, Correlation) else None
    for a in firing:
        if not a.node:
            no_node += 1
            continue
        named = a.labels.get("cluster")
        where = named if named is not None else cluster or default_cluster
        try:
            check_part("cluster", where)
        except KeyPartError:
            refused.append(Skip(a.node, a.labels.get("incident", group_incident), "bad_cluster", a.name,
                                a.severity, where[:63]))
            continue
        if cluster is not None and where != cluster:
            refused.append(Skip(a.node, a.labels.get("incident", group_incident), "other_cluster", a.name,
                                a.severity, where))
            continue
        incident = a.labels.get("incident")
        if incident is None:
            sig = signal_of_alert(a.labels, a.starts_at)
            if sig is not None and held is not None and held(a):
                waiting[(where, a.node)] = _Target(group_incident, a.node, a.name, a.severity, a.starts_at, where)
                continue
            if corr is None and fabric is not None and sig is not None:
                corr = fabric() if callable(fabric) else fabric  # only when an alert needs it
            ev = corr.event_of(sig) if corr is not None and sig is not None else None
            if ev is not None:
                incident = ev.incident
                events[incident] = ev
        t = _Target(incident or group_incident, a.node, a.name, a.severity, a.starts_at, where)
        key = (t.incident, where, t.node)
        old = best.get(key)
        if old is None or (t.rank, -t.starts_at) > (old.rank, -old.starts_at):
            best[key] = t
    # A node with an alert decided now is not held for another.
    decided = {(k[1], k[2]) for k in best}
    held_out = [t for k, t in sorted(waiting.items()) if k not in decided]
    return list(best.values()), resolved, no_node, events, held_out, refused


def _sample_order(incident: str, node: str) -> str:
    # The same nodes win the sample on every resend, on every replica.
    return hashlib.sha256(f"{incident}\0{node}".encode()).hexdigest()


def decide(hook: Webhook, existing: Iterable[CaptureRequest], now: float,
           limits: AlertLimits | None = None, agents: Mapping[Any, float] | None = None,
           fabric: Correlation | Callable[[], Correlation] | None = None,
           held: Callable[[Alert], bool] | None = None, *, cluster: str | None = None,
           default_cluster: str = DEFAULT_CLUSTER) -> Decision:
    """The requests to queue for ``hook``, given the requests already stored.

    ``fabric`` (the correlation of the recent rail alerts, ``collector.fabric``, or a function that makes
    it, called only when an alert is decided and not held) files an alert of a
    leaf or plane event under the event's incident, and its captures are chosen among the event's
    nodes; ``held`` says which alerts wait for the correlation (skipped as ``held``, decided again later).

    ``agents`` ((cluster, node) -> when its agent last polled; None: every node has one) splits the
    nodes: those whose agent polled within ``agent_recent_s`` share ``max_in_flight``; the others, which
    nothing may ever pick up, share ``absent_max_in_flight`` and expire after ``absent_ttl_s``, so a storm
    of alerts for dead nodes cannot hold the cap from the nodes that can capture.

    Each alert's cluster is its ``cluster`` label, else ``cluster`` (the alerting token's binding), else
    ``default_cluster``; a token bound to a cluster queues for that cluster only (``other_cluster``).
    Nodes, caps and the cooldown are per (cluster, node); the in-flight caps and the rate per alert name
    per cluster. A node captured within the cooldown gets that bundle filed under the alert's incident
    (``reused``) rather than nothing.

    The stored requests are indexed once (by cluster and node, by incident, by id): the cost is linear
    in the alerts plus the stored requests, so 5,000 alerts against 20,000 requests take milliseconds.
    """
    limits = limits or AlertLimits()

    def where(r: CaptureRequest) -> str:
        return r.cluster or default_cluster

    def has_agent(c: str, node: str) -> bool:
        return agents is None or now - agents.get((c, node), float("-inf")) <= limits.agent_recent_s

    targets, resolved, no_node, events, waiting, refused = _targets(hook, fabric, held, cluster, default_cluster)
    fabric_names = {i: e.title() for i, e in events.items()}
    existing = list(existing)
    plan_params = check_params(limits.plan, None)
    skipped: list[Skip] = [*refused, *(Skip(t.node, t.incident, "held", t.alertname, t.severity, t.cluster)
                                       for t in waiting)]
    if not limits.enabled:
        skipped = [*refused, *(Skip(t.node, t.incident, "disabled", t.alertname, t.severity, t.cluster)
                               for t in [*targets, *waiting])]
        return Decision(skipped=tuple(skipped), resolved=resolved, no_node=no_node, fabric=fabric_names,
                        truncated=hook.truncated)

    # One pass over the stored requests builds every index the decisions below look up.
    by_id: dict[tuple[str, str], CaptureRequest] = {}
    in_flight: dict[str, int] = {}
    absent_in_flight: dict[str, int] = {}
    recent_by_node: dict[tuple[str, str], list[CaptureRequest]] = {}
    have_by_incident: dict[str, set[tuple[str, str]]] = {}
    rate: dict[tuple[str, str], int] = {}
    for r in existing:
        c = where(r)
        by_id[(c, r.id)] = r
        live = r.in_flight(now)
        if live:
            counts = in_flight if has_agent(c, r.node) else absent_in_flight
            counts[c] = counts.get(c, 0) + 1
        if r.state == "done" or live:
            recent_by_node.setdefault((c, r.node), []).append(r)
            have_by_incident.setdefault(r.incident, set()).add((c, r.node))
        if r.alertname and now - r.created < limits.rate_window_s:
            rate[(c, r.alertname)] = rate.get((c, r.alertname), 0) + 1

    queue: list[CaptureRequest] = []
    reused: list[Reuse] = []
    follow: list[CaptureRequest] = []
    requeued: list[str] = []
    no_agent: list[str] = []
    incidents: dict[str, list[_Target]] = {}
    for t in targets:
        incidents.setdefault(t.incident, []).append(t)
    for incident in sorted(incidents):
        group = incidents[incident]
        have = have_by_incident.get(incident, set())
        # Worst first (severity, then the earliest start, then the name); then the sample.
        group.sort(key=lambda t: (-t.rank, t.starts_at, t.node, t.cluster))
        if incident in events:
            # A fabric event: the worst few and a sample of all its nodes, whichever webhook brings them.
            picked = choose(events[incident], limits.incident_worst, limits.incident_sample)
            chosen = {(t.cluster, t.node) for t in group if t.node in picked}
        else:
            worst = group[:limits.incident_worst]
            rest = sorted(group[limits.incident_worst:], key=lambda t: _sample_order(incident, t.node))
            chosen = {(t.cluster, t.node) for t in worst + rest[:limits.incident_sample]}
        slots = limits.incident_worst + limits.incident_sample - len(have)
        for t in group:
            if (t.cluster, t.node) in have:
                skipped.append(Skip(t.node, incident, "exists", t.alertname, t.severity, t.cluster))
        for t in group:
            c, node = t.cluster, t.node
            if (c, node) in have:
                continue

            def skip(reason: str, t: _Target = t, incident: str = incident) -> None:
                skipped.append(Skip(t.node, incident, reason, t.alertname, t.severity, t.cluster))

            if (c, node) not in chosen or slots <= 0:
                skip("incident_cap")
                continue
            cooling = [r for r in recent_by_node.get((c, node), ())
                       if now - (r.done_at or r.created) < limits.cooldown_s]
            if cooling:
                # Captured moments ago (another incident, an operator, this node's last alert): the
                # incident gets that bundle rather than a second capture or nothing. A capture still
                # running has no bundle yet: the alert's request waits for it (stored pending, and
                # never served within the cooldown after it), and the capture's ``done`` files its
                # bundle under this incident too (``collector.requests.done``).
                req = request_for(incident, node, now=now, ttl_s=limits.request_ttl_s, plan=limits.plan,
                                  params=plan_params, alertname=t.alertname, severity=t.severity, cluster=c)
                captured = [r for r in cooling if r.state == "done" and r.bundle]
                if captured:
                    last = max(captured, key=lambda r: (r.done_at or 0, r.id))
                    reused.append(Reuse(req, last.bundle or "", last.done_at or int(now)))
                else:
                    follow.append(req)
                    recent_by_node.setdefault((c, node), []).append(req)
                slots -= 1
                continue
            if rate.get((c, t.alertname), 0) >= limits.rate_per_alertname:
                skip("rate_limited")
                continue
            present = has_agent(c, node)
            if present and in_flight.get(c, 0) >= limits.max_in_flight:
                skip("in_flight_cap")
                continue
            if not present and absent_in_flight.get(c, 0) >= limits.absent_max_in_flight:
                skip("no_recent_agent_cap")
                continue
            ttl = limits.request_ttl_s if present else limits.absent_ttl_s
            req = request_for(incident, node, now=now, ttl_s=ttl, plan=limits.plan, params=plan_params,
                              alertname=t.alertname, severity=t.severity, cluster=c)
            old = by_id.get((c, req.id))
            if old is not None and old.expired(now):
                requeued.append(old.id)
            queue.append(req)
            counts = in_flight if present else absent_in_flight
            counts[c] = counts.get(c, 0) + 1
            if not present:
                no_agent.append(node)
            slots -= 1
            rate[(c, t.alertname)] = rate.get((c, t.alertname), 0) + 1
            recent_by_node.setdefault((c, node), []).append(req)
    return Decision(queue=tuple(queue), skipped=tuple(skipped), requeued=tuple(requeued), resolved=resolved,
                    no_node=no_node, no_recent_agent=tuple(no_agent), fabric=fabric_names, truncated=hook.truncated,
                    reused=tuple(reused), follow=tuple(follow))


# -- HTTP: POST /v1/alerts (alerting role) -----------------------------------------------------


async def _body(request: web.Request) -> bytes:
    """The payload, read up to the cap (``client_max_size`` does not guard ``request.content``)."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise WebhookError(413, "too_large", f"the payload is larger than {MAX_BODY_BYTES} bytes")
    data = bytearray()
    while True:
        chunk = await request.content.read(1 << 16)
        if not chunk:
            return bytes(data)
        data.extend(chunk)
        if len(data) > MAX_BODY_BYTES:
            raise WebhookError(413, "too_large", f"the payload is larger than {MAX_BODY_BYTES} bytes")


def _signals(hook: Webhook) -> list[Signal]:
    return [s for a in hook.alerts if a.status == "firing" and "incident" not in a.labels
            for s in [signal_of_alert(a.labels, a.starts_at)] if s is not None]


class FabricDesk:
    """This replica's fabric correlation: the ledger of recent rail alerts (``collector.fabric``) and the
    payloads whose rail alerts wait ``fabric_hold_s`` for it, decided again by :meth:`release`.

    Held payloads live in memory only, at most :attr:`max_held` (beyond, a payload is decided at once):
    a replica that stops loses them, and Alertmanager's next notification of the group (its
    ``group_interval`` or ``repeat_interval``) decides them; the requests are idempotent either way.
    """

    def __init__(self, limits: AlertLimits, metrics: CollectorMetrics | None = None, max_held: int = 20_000,
                 default_cluster: str = DEFAULT_CLUSTER) -> None:
        self.limits = limits
        #: the cluster of an alert that names none, posted with a token bound to none
        self.default_cluster = default_cluster
        #: group key -> the cluster its alerting token is bound to (None: any), kept with a held payload
        self.held_cluster: dict[str, str | None] = {}
        self.ledger = Ledger(FabricConfig(window_s=limits.fabric_window_s, leaf_min_nodes=limits.leaf_min_nodes,
                                          plane_min_leaves=limits.plane_min_leaves))
        self.metrics = metrics
        self.max_held = max_held
        #: each node's rails' leaves from its stored diagnoses, for rail alerts whose labels name none
        self.peers = PeerMap()
        #: group key -> (the latest payload of the group, when it was first held)
        self.held: dict[str, tuple[Webhook, float]] = {}

    def observe(self, hook: Webhook, now: float) -> None:
        self.ledger.observe(_signals(self.peers.hook(hook, now)), now)
        if self.metrics is not None:
            self.metrics.alerts_truncated.inc(hook.truncated)

    def holds(self, now: float) -> Callable[[Alert], bool] | None:
        """Whether an alert still waits for the correlation (None: no hold at all)."""
        hold = self.limits.fabric_hold_s
        if hold <= 0:
            return None

        def held(a: Alert) -> bool:
            sig = signal_of_alert(a.labels, a.starts_at)
            first = self.ledger.first_seen(sig) if sig is not None else None
            return first is not None and now < first + hold

        return held

    def all_held(self, hook: Webhook, now: float) -> bool:
        """Whether every firing alert of ``hook`` with a node waits for the correlation (then nothing
        is queued, and the store need not be read: a 10,000-node event costs no listing per webhook)."""
        held = self.holds(now)
        if held is None or (len(self.held) >= self.max_held and hook.group_key not in self.held):
            return False
        hook = self.peers.hook(hook, now)
        firing = [a for a in hook.alerts if a.status == "firing" and a.node]
        return bool(firing) and all("incident" not in a.labels and held(a) for a in firing)

    def _holds_for(self, hook: Webhook, now: float) -> Callable[[Alert], bool] | None:
        return self.holds(now) if len(self.held) < self.max_held or hook.group_key in self.held else None

    def _settle(self, hook: Webhook, d: Decision, now: float, cluster: str | None) -> Decision:
        if any(s.reason == "held" for s in d.skipped):
            first = self.held.get(hook.group_key, (hook, now))[1]
            self.held[hook.group_key] = (hook, first)
            self.held_cluster[hook.group_key] = cluster
        else:
            self.held.pop(hook.group_key, None)
            self.held_cluster.pop(hook.group_key, None)
        if self.metrics is not None:
            self.metrics.alerts_held.set(len(self.held))
        return d

    def decide(self, hook: Webhook, existing: Iterable[CaptureRequest], now: float,
               agents: Mapping[Any, float] | None = None, fabric: Correlation | None = None,
               cluster: str | None = None) -> Decision:
        """:func:`decide` with this replica's correlation; a payload with held alerts is kept for later."""
        hook = self.peers.hook(hook, now)  # the leaves its nodes' stored diagnoses name
        held = self._holds_for(hook, now)
        # While an event's alerts arrive each is held, and nothing is correlated: the correlation runs
        # once they are decided, and once for all the payloads released together.
        d = decide(hook, existing, now, self.limits, agents, fabric or self.ledger.correlation, held,
                   cluster=cluster, default_cluster=self.default_cluster)
        return self._settle(hook, d, now, cluster)

    async def decide_off_loop(self, hook: Webhook, existing: Iterable[CaptureRequest], now: float,
                              agents: Mapping[Any, float] | None = None, fabric: Correlation | None = None,
                              cluster: str | None = None) -> Decision:
        """:meth:`decide`, the policy itself in a worker thread: a payload of thousands of alerts against
        tens of thousands of stored requests never holds the event loop (the polls, the uploads, the
        probes). The ledger is touched on the loop only: the correlation, when an alert needs it, is
        made here first; the worker only looks signals up in it."""
        hook = self.peers.hook(hook, now)  # the leaves its nodes' stored diagnoses name
        held = self._holds_for(hook, now)
        if fabric is None and any(a.status == "firing" and a.node and "incident" not in a.labels
                                  and (held is None or not held(a))
                                  and signal_of_alert(a.labels, a.starts_at) is not None for a in hook.alerts):
            fabric = self.ledger.correlation()
        existing = list(existing)
        d = await asyncio.to_thread(decide, hook, existing, now, self.limits, agents, fabric, held,
                                    cluster=cluster, default_cluster=self.default_cluster)
        return self._settle(hook, d, now, cluster)

    def due(self, now: float) -> list[Webhook]:
        """The held payloads to decide now: held ``fabric_hold_s`` and either the ledger has been quiet
        for half of that (the event stopped growing), or their rail alerts already belong to a fabric
        event, or they waited four holds (an event that keeps growing is decided anyway)."""
        hold = self.limits.fabric_hold_s
        ripe = [(h, at) for h, at in self.held.values() if at + hold <= now]
        if not ripe or now - self.ledger.last_new >= hold / 2:
            return [h for h, _at in ripe]
        corr = self.ledger.correlation()

        def placed(h: Webhook) -> bool:
            sigs = _signals(self.peers.hook(h, now))
            return bool(sigs) and all(corr.event_of(s) is not None for s in sigs)

        return [h for h, at in ripe if at + 4 * hold <= now or placed(h)]

    def gauges(self) -> None:
        if self.metrics is None:
            return
        self.metrics.alerts_held.set(len(self.held))
        counts = {"leaf": 0, "plane": 0, "batch": 0}
        for e in self.ledger.correlation().top:
            counts[e.kind] = counts.get(e.kind, 0) + 1
        for kind, n in counts.items():
            self.metrics.fabric_events.labels(kind).set(n)

    async def release(self, board: Any) -> int:
        """Decide the held payloads whose hold is over; the number of requests queued."""
        now = time.time()
        due = self.due(now)
        if not due:
            return 0
        self.ledger.prune(now)
        self.gauges()
        await board.refresh()
        agents = await board.agents_seen()
        queued = 0
        # One correlation for the whole batch: webhooks arriving meanwhile must not make each decision
        # correlate again (they are held, and decided with the next batch).
        corr = self.ledger.correlation()
        for hook in due:
            d = await self.decide_off_loop(hook, board.all(), time.time(), agents, corr,
                                           self.held_cluster.get(hook.group_key))
            d = await _queue(board, d)
            queued += len(d.queue)
            _record(self.metrics, hook, d, "after the fabric hold")
        self.gauges()
        return queued


async def _queue(board: Any, decision: Decision) -> Decision:
    """The decision's requests stored and its reused bundles filed; the decision as it turned out."""
    for req in decision.queue:
        await board.store.put_small(req.object_key(), req.dumps(), only_new=req.id not in decision.requeued)
        board.note(req)
    for req in decision.follow:
        await board.store.put_small(req.object_key(), req.dumps())
        board.note(req)
    return await _file_reused(board, decision)


async def _file_reused(board: Any, decision: Decision) -> Decision:
    """The recent bundles of :attr:`Decision.reused` copied under their alert's incident
    (``collector.rekey``: a copy, the first incident keeps its own) and their requests stored done.
    A bundle gone meanwhile (deleted, expired) turns that alert into a ``reuse_failed`` skip."""
    from proto.keys import parse_rel

    from .rekey import file_under_request

    failed: list[Skip] = []
    for u in decision.reused:
        req = u.request
        key = parse_rel(u.bundle)
        found = await board.store.stat(key) if key is not None else None
        if found is None:
            log.warning("the recent bundle %s of %s is gone: %s not filed under %s", u.bundle[:200], req.node,
                        req.alertname, req.incident)
            failed.append(Skip(req.node, req.incident, "reuse_failed", req.alertname, req.severity, req.cluster))
            continue
        copied = await file_under_request(board.store, found, req.incident, req.id)
        # done when the first capture was: a chain of reuses never stretches the node's cooldown
        finished = req.done(copied.key.rel, u.done_at)
        await board.store.put_small(finished.object_key(), finished.dumps())
        board.note(finished)
    if not failed:
        return decision
    gone = {(s.cluster, s.node, s.incident) for s in failed}
    return dataclasses.replace(decision, skipped=(*decision.skipped, *failed), reused=tuple(
        u for u in decision.reused if (u.request.cluster, u.request.node, u.request.incident) not in gone))


def _log(hook: Webhook, decision: Decision, when: str = "") -> None:
    """One line per alert group; a warning, naming them, when an alert's node is left without a bundle
    for it (a critical one first): never only an info line that nobody reads."""
    answer = decision.to_json()
    dropped = sorted((s for s in decision.skipped if s.dropped), key=lambda s: -SEVERITY_RANK.get(s.severity, 0))
    level = logging.WARNING if dropped else logging.INFO
    log.log(level, "alert group %s%s: %d queued (%d without a recent agent), %d reused, skipped %s, %d resolved, "
                   "%d without node%s%s",
            hook.group_key[:120], f" {when}" if when else "", len(decision.queue), len(decision.no_recent_agent),
            len(decision.reused) + len(decision.follow), answer["skipped"], decision.resolved, decision.no_node,
            f", fabric {sorted(decision.fabric.values())[:4]}" if decision.fabric else "",
            "; not captured: " + ", ".join(f"{s.node} ({s.severity or 'no severity'} {s.alertname}: {s.reason})"
                                            for s in dropped[:10]) if dropped else "")


def _record(metrics: CollectorMetrics | None, hook: Webhook, decision: Decision, when: str = "") -> None:
    """Every outcome of the group's alerts as a series, and the log line."""
    if metrics is not None:
        for (outcome, reason, severity), n in decision.outcomes().items():
            metrics.alert_outcomes.labels(outcome, reason, severity).inc(n)
    _log(hook, decision, when)


async def receive(request: web.Request) -> web.Response:
    """Alertmanager's webhook: queue the captures the policy allows and say why the rest were not."""
    try:
        hook = parse_webhook(await _body(request))
    except WebhookError as exc:
        # The body may be unread past the cap: the connection cannot carry another request.
        exc.close = exc.status == 413
        raise
    board = request.app[BOARD]
    desk = request.app[FABRIC]
    try:
        now = time.time()
        desk.observe(hook, now)
        principal = request.get(PRINCIPAL)
        cluster = principal.cluster if principal is not None else None
        if desk.all_held(hook, now):
            decision = desk.decide(hook, (), now, cluster=cluster)
        else:
            # A fresh view: another replica may have queued for this group a moment ago.
            await board.refresh()
            agents = await board.agents_seen()
            decision = await desk.decide_off_loop(hook, board.all(), time.time(), agents, cluster=cluster)
            decision = await _queue(board, decision)
    except StoreError as exc:
        # 5xx: Alertmanager sends the group again, and the requests are idempotent.
        raise Refused(503, "store_unavailable", str(exc)[:200], headers={"Retry-After": "10"}) from None
    _record(desk.metrics, hook, decision)
    return web.json_response(decision.to_json())


def setup(app: web.Application, limits: AlertLimits | None = None) -> None:
    """The limits of ``POST /v1/alerts`` (which needs the request board of :func:`collector.requests.setup`)
    and the fabric desk, whose held payloads a task of the app decides when their hold is over."""
    limits = limits or app[STATE].settings.alerts
    check_params(limits.plan, None)
    app[LIMITS] = limits
    desk = app[FABRIC] = FabricDesk(limits, app[STATE].metrics,
                                    default_cluster=app[STATE].settings.cluster or DEFAULT_CLUSTER)

    async def loop() -> None:
        while True:
            await asyncio.sleep(min(1.0, max(0.1, limits.fabric_hold_s / 4)))
            try:
                await desk.release(app[BOARD])
            except (StoreError, OSError) as exc:
                log.warning("deciding held alerts failed (tried again): %s", exc)

    async def ctx(app: web.Application) -> Any:
        task = asyncio.create_task(loop(), name="railscope-fabric-desk")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(ctx)
