"""``railscope collector``: the central service that receives, verifies and stores bundles.

Every flag can also come from ``RAILSCOPE_<FLAG>``. Exit status: 0 after a clean stop, 1 when it
cannot serve (address taken), 3 for a setting that cannot work (no token source without
``--insecure-dev``, an unreadable token file, a bad ``--store``).
"""

from __future__ import annotations

import argparse
import sys

from agent.settings import Setting, add_flags, bool_word, count, duration, duration_or_zero, read, size
from collector.config import DEFAULT_PORT

_SERVING = "serving"
_AUTH = "authentication (every endpoint but /metrics, /healthz, /readyz)"
_TLS = "TLS"
_LIMITS = "limits"
_ALERTS = "capture on alert (POST /v1/alerts)"
_CLUSTER = "cluster view (the operators' objects, read-only; a slice of them in every incident)"


#: Every flag of ``railscope collector``, in ``--help`` order. ``chart="fixed"``: the chart sets it
#: (the pod IP, collector.store, the token files of tokenSecret, TokenReview, TLS); the others are
#: ``collector.flags.<flagInCamelCase>``.
TABLE: tuple[Setting, ...] = (
    Setting("--listen", "The IP address to serve on (the pod IP, or 0.0.0.0 behind a Service). Default: 127.0.0.1.",
            default="127.0.0.1", metavar="ADDR", group=_SERVING, field="listen", chart="fixed"),
    Setting("--port", f"The TCP port to serve on. Default: {DEFAULT_PORT}.", type=int, default=str(DEFAULT_PORT), group=_SERVING,
            field="port"),
    Setting("--store", "Where bundles go: a directory (the embedded store) or s3://bucket/prefix (boto3, with the "
            "usual AWS configuration: environment, profile, IRSA). Default: ./railscope-data.",
            default="./railscope-data", group=_SERVING, field="store", chart="fixed"),
    Setting("--s3-endpoint-url", "The S3 endpoint for MinIO, Ceph RGW or SeaweedFS. Default: AWS.", metavar="URL",
            group=_SERVING, field="s3_endpoint_url"),
    Setting("--log-level", "Least severe log lines written. Default: info.", default="info",
            choices=("debug", "info", "warning", "error"), group=_SERVING),
    Setting("--agent-token-file", "Static agent tokens, one '<node> <token> [<cluster>]' per line: each uploads as "
            "its node only, and for its cluster only (without one, --cluster's, else 'default'). Default: none.", metavar="FILE",
            group=_AUTH, field="agent_token_file", chart="fixed"),
    Setting("--cluster", "The cluster this collector stores for: TokenReview'd agents and agent tokens naming no "
            "cluster upload, poll and close capture requests under this name only (403 otherwise); alerting "
            "tokens naming no cluster capture its nodes only (an alert labelled another cluster is skipped, "
            "other_cluster). Default: none: agents are bound to 'default', the agents' own default (a "
            "warning at start), and alerts' cluster label decides.", metavar="NAME",
            group=_AUTH, field="cluster"),
    Setting("--operator-token-file", "Static operator tokens (list, fetch, verify), one per line. Default: none.",
            metavar="FILE", group=_AUTH, field="operator_token_file", chart="fixed"),
    Setting("--alerting-token-file", "Static alerting tokens (Alertmanager's webhook), one per line. Default: none.",
            metavar="FILE", group=_AUTH, field="alerting_token_file", chart="fixed"),
    Setting("--tokenreview-url", "The Kubernetes API server whose TokenReview checks agents' projected "
            "ServiceAccount tokens (https://kubernetes.default.svc in a cluster). Default: none.", metavar="URL",
            group=_AUTH, field="tokenreview_url", chart="fixed"),
    Setting("--tokenreview-token-file", "The collector's own token for TokenReview. Default: none.", metavar="FILE",
            group=_AUTH, field="tokenreview_token_file", chart="fixed"),
    Setting("--tokenreview-ca-file", "The API server's CA bundle. Default: the system's.", metavar="FILE",
            group=_AUTH, field="tokenreview_ca_file", chart="fixed"),
    Setting("--tokenreview-rate", "TokenReviews per second this replica asks the API server for (tokens not in its "
            "cache; bursts of 100); past it a request is answered 503 and the agent tries again. Only tokens "
            "shaped as a JWT for --agent-audience are reviewed at all, and only after their signature verifies "
            "against the cluster's ServiceAccount issuer keys. Default: 20.", type=float, default="20",
            group=_AUTH, field="tokenreview_rate"),
    Setting("--tokenreview-peer-rate", "TokenReviews per second one client address may cause (bursts of 5) for "
            "tokens the issuer's keys cannot judge (the keys unreadable, another algorithm); past it 503. "
            "Default: 0.5.", type=float, default="0.5", group=_AUTH, field="tokenreview_peer_rate"),
    Setting("--agent-audience", "The audience agents' tokens must carry. Default: railscope-collector.",
            default="railscope-collector", group=_AUTH, field="agent_audience"),
    # the chart gives the agent ServiceAccount it installs, and collector.agentServiceAccounts
    Setting("--agent-service-account", "A ServiceAccount whose tokens are agents, as "
            "system:serviceaccount:<ns>:<name>. Repeatable. Default: system:serviceaccount:railscope:railscope-agent.",
            kind="list", env=False, metavar="USER", group=_AUTH, field="agent_service_accounts", chart="fixed",
            convert=lambda v: tuple(v) if v else None),
    # never from the chart: a laptop's switch
    Setting("--insecure-dev", "Accept requests without a valid token, as every role. For a laptop only. Default: off "
            "(without a token source the collector refuses to start).", kind="switch", default=False, group=_AUTH,
            field="insecure_dev", chart="none"),
    Setting("--tls-cert-file", "The PEM certificate (with its chain) served over TLS; read again when it changes "
            "(a cert-manager renewal). Default: none.", metavar="FILE", group=_TLS, field="tls_cert_file",
            chart="fixed"),
    Setting("--tls-key-file", "The PEM private key of --tls-cert-file; read again when it changes. Default: none.",
            metavar="FILE", group=_TLS, field="tls_key_file", chart="fixed"),
    Setting("--plain-http", "Serve plain HTTP because TLS ends in front of the collector (a service mesh sidecar, "
            "an ingress). Default: off (without a certificate the collector refuses to start, "
            "unless --insecure-dev).", kind="switch", default=False, group=_TLS, field="plain_http", chart="fixed"),
    Setting("--proxy-protocol-from", "With --plain-http: a proxy address or CIDR network whose connections begin "
            "with a PROXY protocol header (v1 or v2, HAProxy's) naming the client; a connection from there "
            "without a valid header is refused (400). --max-conns-per-peer then caps each client it names. "
            "Repeatable, or comma separated. Default: none (with --plain-http, no cap per client address).",
            kind="list", metavar="CIDR", group=_TLS, field="proxy_protocol_from",
            convert=lambda v: tuple(x.strip() for item in v for x in str(item).split(",") if x.strip()) if v else ()),
    Setting("--max-bundle-size", "A bundle longer than this is refused (413) as its bytes pass it. Default: 4G.",
            type=size, default="4G", group=_LIMITS, field="max_bundle_bytes"),
    Setting("--max-inflight", "Uploads served at once by this replica; beyond, 429 with Retry-After. Default: 8.",
            type=count(0), default="8", group=_LIMITS, field="max_inflight"),
    Setting("--max-inflight-per-node", "Uploads one node may have in flight on this replica; beyond, 429 with "
            "Retry-After. Kept below --max-inflight (at least 1), so one node never holds every slot. Default: 2.",
            type=count(0), default="2", group=_LIMITS, field="max_inflight_per_node"),
    Setting("--max-uploads-per-node-hour", "Uploads one node may start per hour on this replica; beyond, 429 with a "
            "Retry-After until the oldest leaves the hour (0: no cap). Default: 600.", type=count(0), default="600",
            group=_LIMITS, field="max_uploads_per_node_hour"),
    Setting("--max-upload-bytes-per-node-hour", "Bundle bytes one node may send per hour on this replica; past it, "
            "429 with a Retry-After until the hour's oldest bytes leave it (a few bundles of --max-bundle-size "
            "an hour, whatever their number). Default: 32G.", type=size, default="32G", group=_LIMITS,
            field="max_upload_bytes_per_node_hour"),
    Setting("--max-upload-duration", "An upload still receiving after this long is ended (408), however fast it "
            "trickles; keep --stale-part-age above it. Default: 30m.", type=duration, default="30m", group=_LIMITS,
            field="max_upload_s"),
    Setting("--retry-after", "Seconds told to agents in Retry-After. Default: 5.", type=count(0), default="5",
            group=_LIMITS, field="retry_after_s"),
    Setting("--min-rate", "An upload averaging fewer bytes per second than this after --min-rate-grace is ended "
            "(408). Default: 64k.", type=size, default="64k", group=_LIMITS, field="min_rate_bps"),
    Setting("--min-rate-grace", "How long an upload may start slowly. Default: 30s.", type=duration, default="30s",
            group=_LIMITS, field="min_rate_grace_s"),
    Setting("--stall-timeout", "An upload that sends nothing for this long is ended (408). Default: 60s.",
            type=duration, default="60s", group=_LIMITS, field="stall_timeout_s"),
    Setting("--header-timeout", "A connection whose request headers are not complete by then is closed, and so is "
            "one idle this long between requests. Default: 10s.", type=duration, default="10s", group=_LIMITS,
            field="header_timeout_s"),
    Setting("--max-conns-per-peer", "Connections one client address may hold open; beyond, a new one is closed at "
            "once (0: no cap). Not applied with --plain-http (every connection is the proxy's) unless "
            "--proxy-protocol-from names the clients. The total stays "
            "below the descriptor limit regardless. Default: 128.",
            type=count(0), default="128", group=_LIMITS, field="max_conns_per_peer"),
    Setting("--max-handshakes-per-peer", "TLS handshakes one client address may have in progress; beyond, a new "
            "connection is closed at once (0: no cap). A handshake not done within --header-timeout is ended. "
            "Default: 16.", type=count(0), default="16", group=_LIMITS, field="max_handshakes_per_peer"),
    Setting("--max-handshakes", "TLS handshakes in progress on this replica in all; beyond, a new connection is "
            "closed at once. Default: 128.", type=count(0), default="128", group=_LIMITS, field="max_handshakes"),
    Setting("--part-size", "Multipart part size for S3 (a smaller bundle is one PutObject); at least 5M. "
            "Default: 8M.", type=size, default="8M", group=_LIMITS, field="part_bytes"),
    Setting("--part-concurrency", "Parts of one upload sent to S3 at once. Default: 4.", type=count(0), default="4",
            group=_LIMITS, field="part_concurrency"),
    Setting("--parts-in-flight", "Parts held in memory for S3 across all uploads of this replica: with --part-size, "
            "the ingest memory bound. Default: 8.", type=count(0), default="8", group=_LIMITS,
            field="parts_in_flight"),
    Setting("--stale-part-age", "Temporary files and incomplete multipart uploads older than this (a replica killed "
            "mid-upload) are removed at start. Default: 1h.", type=duration, default="1h", group=_LIMITS,
            field="stale_part_s"),
    Setting("--capture-on-alert", "The kill switch: off queues no capture for any alert (operators can still ask). "
            "Default: on.", type=bool_word, default="on", metavar="on|off", group=_ALERTS, field="alerts.enabled"),
    Setting("--capture-cooldown", "A node captured this recently, for any incident, is not captured again; 0 turns "
            "the cooldown off. Default: 15m.", type=duration_or_zero, default="15m", group=_ALERTS,
            field="alerts.cooldown_s"),
    Setting("--capture-max-in-flight", "Capture requests pending across the cluster; beyond, alerts queue nothing. "
            "Default: 20.", type=count(0), default="20", group=_ALERTS, field="alerts.max_in_flight"),
    Setting("--capture-incident-worst", "Per incident, the nodes with the worst severity captured first. Default: 5.",
            type=count(0), default="5", group=_ALERTS, field="alerts.incident_worst"),
    Setting("--capture-incident-sample", "Per incident, a further sample of the other nodes (the rest on demand). "
            "Default: 5.", type=count(0), default="5", group=_ALERTS, field="alerts.incident_sample"),
    Setting("--capture-rate", "Capture requests per alert name per --capture-rate-window. Default: 50.",
            type=count(0), default="50", group=_ALERTS, field="alerts.rate_per_alertname"),
    Setting("--capture-rate-window", "The window of --capture-rate. Default: 10m.", type=duration, default="10m",
            group=_ALERTS, field="alerts.rate_window_s"),
    Setting("--request-ttl", "A capture request no agent picked up by then expires. Default: 30m.", type=duration,
            default="30m", group=_ALERTS, field="alerts.request_ttl_s"),
    Setting("--capture-agent-recent", "A node whose agent polled within this long counts toward "
            "--capture-max-in-flight; the others (agent gone or never deployed) toward "
            "--capture-no-agent-max-in-flight. Default: 5m.", type=duration, default="5m", group=_ALERTS,
            field="alerts.agent_recent_s"),
    Setting("--capture-no-agent-max-in-flight", "Capture requests pending for nodes without a recent agent; the alert "
            "answer names them under no_recent_agent. Default: 3.", type=count(0), default="3", group=_ALERTS,
            field="alerts.absent_max_in_flight"),
    Setting("--capture-no-agent-ttl", "A capture request for a node without a recent agent expires after this. "
            "Default: 5m.", type=duration, default="5m", group=_ALERTS, field="alerts.absent_ttl_s"),
    # fabric correlation (collector.fabric): one incident per fabric event, whatever Alertmanager's grouping
    Setting("--fabric-window", "Rail alerts naming the same leaf (peer_system) within this window are one fabric "
            "event and one incident, whatever Alertmanager's grouping. Default: 5m.", type=duration, default="5m",
            group=_ALERTS, field="alerts.fabric_window_s"),
    Setting("--fabric-hold", "A rail alert naming its leaf waits this long before its capture is decided, so the "
            "other nodes' alerts of the event arrive first (Alertmanager's group_wait); 0 decides at once. "
            "Default: 30s.", type=duration_or_zero, default="30s", group=_ALERTS, field="alerts.fabric_hold_s"),
    # the chart sets these from clusterView.enabled / operatorNamespace and its own Lease's name
    Setting("--cluster-view", "Watch the operators' objects (one replica, elected by --cluster-lease) and store "
            "the slice of each new incident's nodes beside its bundles: auto is on where an API server is given "
            "(--cluster-api-server, or the pod's in-cluster configuration), off elsewhere. Default: auto.",
            default="auto", choices=("auto", "on", "off"), group=_CLUSTER, field="cluster_view", chart="fixed"),
    Setting("--cluster-api-server", "The Kubernetes API server of the cluster view (https://HOST:PORT), with "
            "--cluster-api-token-file. Default: the pod's in-cluster configuration.", metavar="URL",
            group=_CLUSTER, field="cluster_api_server", chart="none"),
    Setting("--cluster-api-token-file", "A bearer token for --cluster-api-server (read on every request; "
            "owner-readable only). Default: none.", metavar="FILE", group=_CLUSTER, field="cluster_api_token_file",
            chart="none"),
    Setting("--cluster-api-ca-file", "The CA bundle of --cluster-api-server. Default: the system's.", metavar="FILE",
            group=_CLUSTER, field="cluster_api_ca_file", chart="none"),
    Setting("--operator-namespace", "The operators' namespace (DaemonSets, pods, NicDevices, SR-IOV states, pools). "
            "Default: nvidia-network-operator.", default="nvidia-network-operator", metavar="NS", group=_CLUSTER,
            field="operator_namespace", chart="fixed"),
    Setting("--cluster-lease", "The Lease ([NAMESPACE/]NAME, coordination.k8s.io/v1) whose holder is the one "
            "replica that watches: the collector's only write. Default: railscope-collector-cluster-view in the "
            "pod's own namespace.", default="railscope-collector-cluster-view", metavar="[NS/]NAME",
            group=_CLUSTER, field="cluster_lease", chart="fixed"),
)


def register(p: argparse.ArgumentParser) -> None:
    add_flags(p, TABLE)


def settings_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from collector.config import AlertLimits, CollectorSettings, check_listen, parse_store

    kw = read(TABLE, args)
    kw["listen"] = check_listen(kw["listen"])
    kw["store"] = parse_store(kw["store"])
    if kw["agent_service_accounts"] is None:
        del kw["agent_service_accounts"]  # the dataclass's default
    alerts = AlertLimits(**kw.pop("alerts"))
    return CollectorSettings(**kw, alerts=alerts)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from agent.service.logs import setup_logging
    from collector.app import serve
    from collector.config import SettingsError

    # One JSON object per line, as the agent writes them: one log pipeline parses both.
    setup_logging(args.log_level)
    try:
        settings = settings_from_args(args)
        return asyncio.run(serve(settings))
    except SettingsError as exc:
        print(f"railscope collector: {exc}", file=sys.stderr)
        return 3
