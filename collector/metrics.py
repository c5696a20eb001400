"""The collector's own metrics (``/metrics``), in a registry per app so that replicas in one process
(tests, benchmarks) never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "CollectorMetrics"]

#: Refusal reasons are the SPEC.md error codes: a closed set, so the label stays bounded.
REASONS = ("malformed", "unknown_frame", "order", "unsupported_version", "bad_key", "length_mismatch",
           "digest_mismatch", "truncated", "frame_too_large", "unauthenticated", "forbidden", "too_slow",
           "conflict", "too_large", "busy", "store_unavailable", "auth_unavailable", "disconnected")
#: The codes of the other endpoints (bundle API, requests, alerts, pages).
OTHER_REASONS = ("not_found", "bad_request", "not_stored", "bad_json", "bad_version", "bad_alert", "bad_label")


class CollectorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.bytes_in = Counter("railscope_collector_received_bytes", "Bundle bytes received (chunk data).",
                                registry=r)
        self.stored = Counter("railscope_collector_bundles_stored", "Bundles stored and verified.", registry=r)
        self.duplicates = Counter("railscope_collector_bundles_duplicate",
                                  "Uploads of a bundle already stored with the same digest (nothing written).",
                                  registry=r)
        self.refused = Counter("railscope_collector_bundles_refused", "Uploads refused, by reason (SPEC.md codes).",
                               ["reason"], registry=r)
        for reason in REASONS:
            self.refused.labels(reason)
        #: every refusal of every endpoint (the uploads' are in ``refused`` as well, by reason)
        self.refusals = Counter("railscope_collector_refusals", "Requests refused, by endpoint and reason "
                                "(SPEC.md codes).", ["endpoint", "reason"], registry=r)
        #: 401s answered to the browser pages (a Basic challenge: no or wrong operator credentials),
        #: never in ``refusals``: opening /ui is not an agent being refused
        self.page_challenges = Counter("railscope_collector_page_challenges",
                                       "Browser page requests answered 401 (asked for the operator token), by page; "
                                       "not counted as refusals.", ["endpoint"], registry=r)
        self.duration = Histogram("railscope_collector_ingest_duration_seconds",
                                  "Time from the request to the answer of an upload that was admitted.",
                                  buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900), registry=r)
        self.in_flight = Gauge("railscope_collector_ingests_in_flight", "Uploads being received now.", registry=r)
        self.storage_errors = Counter("railscope_collector_storage_errors", "Store operations that failed.",
                                      ["op"], registry=r)
        for op in ("write", "read", "list", "ready"):
            self.storage_errors.labels(op)
        self.alerts_truncated = Counter("railscope_collector_alerts_truncated",
                                        "Alerts Alertmanager left out of the webhook payloads it sent (their "
                                        "truncatedAlerts, its max_alerts): accepted, never refused.", registry=r)
        self.alerts_held = Gauge("railscope_collector_alerts_held",
                                 "Alert payloads whose rail alerts wait for the fabric correlation (--fabric-hold).",
                                 registry=r)
        #: every alert of every group posted, by what became of it: queued (a capture), reused (the node's
        #: bundle of moments ago filed under the alert's incident) or skipped by reason
        self.alert_outcomes = Counter("railscope_collector_alert_outcomes",
                                      "Firing alerts with a node, by outcome (queued, reused, skipped), the skip's "
                                      "reason and the alert's severity label (critical, warning, info, other); "
                                      "counted again on each resend of the group.",
                                      ["outcome", "reason", "alert_severity"],
                                      registry=r)
        for severity in ("critical", "warning", "info", "other"):
            self.alert_outcomes.labels("queued", "", severity)
            self.alert_outcomes.labels("reused", "", severity)
            self.alert_outcomes.labels("reused", "capture_in_flight", severity)
            self.alert_outcomes.labels("skipped", "rate_limited", severity)
        self.fabric_events = Gauge("railscope_collector_fabric_events",
                                   "Fabric events in this replica's window: rails of several nodes that degraded "
                                   "together behind one leaf, one plane or one optics batch.", ["kind"], registry=r)
        for kind in ("leaf", "plane", "batch"):
            self.fabric_events.labels(kind)
        #: set to read the store's ``StoreClock`` (``collector.app.make_app``)
        self.store_clock_skew = Gauge("railscope_collector_store_clock_skew_seconds",
                                      "How far this replica's clock is ahead of the store's (negative: behind), "
                                      "as measured from the store's answers; NaN before a measurement. The "
                                      "agents' poll markers are judged on this replica's clock, moved by it.",
                                      registry=r)

    def refuse(self, endpoint: str, reason: str) -> None:
        """Count a refusal of ``endpoint`` (a route name of ``collector.routes``, a closed set)."""
        if endpoint == "upload":
            self.refused.labels(reason if reason in REASONS else "malformed").inc()
        known = reason in REASONS or reason in OTHER_REASONS
        self.refusals.labels(endpoint, reason if known else "malformed").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
