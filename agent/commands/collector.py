"""``railscope collector``: the central service that receives, verifies and stores bundles.

Every flag can also come from ``RAILSCOPE_<FLAG>``. Exit status: 0 after a clean stop, 1 when it
cannot serve (address taken), 3 for a setting that cannot work (no token source without
``--insecure-dev``, an unreadable token file, a bad ``--store``).
"""

from __future__ import annotations

import argparse
import sys

from .common import _bool_word, _duration, duration_or_zero, env_default

_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(text: str) -> int:
    """Bytes, or with a binary unit: 512k, 8M, 4G."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    mult = _SIZE_UNITS.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if t[-1:] in _SIZE_UNITS else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 8M or 4G, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError("a size must be positive")
    return n


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("expected a number of at least 0")
    return n


def register(p: argparse.ArgumentParser) -> None:
    from collector.config import DEFAULT_PORT

    g = p.add_argument_group("serving")
    g.add_argument("--listen", default=env_default("listen", "127.0.0.1"), metavar="ADDR",
                   help="The IP address to serve on (the pod IP, or 0.0.0.0 behind a Service). Default: 127.0.0.1.")
    g.add_argument("--port", type=int, default=int(env_default("port", str(DEFAULT_PORT)) or DEFAULT_PORT),
                   help=f"The TCP port to serve on. Default: {DEFAULT_PORT}.")
    g.add_argument("--store", default=env_default("store", "./railscope-data"),
                   help="Where bundles go: a directory (the embedded store) or s3://bucket/prefix (boto3, with the "
                        "usual AWS configuration: environment, profile, IRSA). Default: ./railscope-data.")
    g.add_argument("--s3-endpoint-url", default=env_default("s3-endpoint-url", None), metavar="URL",
                   help="The S3 endpoint for MinIO, Ceph RGW or SeaweedFS. Default: AWS.")
    g.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   default=env_default("log-level", "info"), help="Least severe log lines written. Default: info.")

    a = p.add_argument_group("authentication (every endpoint but /metrics, /healthz, /readyz)")
    a.add_argument("--agent-token-file", default=env_default("agent-token-file", None), metavar="FILE",
                   help="Static agent tokens, one '<node> <token> [<cluster>]' per line: each uploads as its "
                        "node only, and for its cluster only (without one, --cluster's). Default: none.")
    a.add_argument("--cluster", default=env_default("cluster", None), metavar="NAME",
                   help="The cluster this collector stores for: TokenReview'd agents and agent tokens naming no "
                        "cluster upload under this name only (403 otherwise). Default: none (any).")
    a.add_argument("--operator-token-file", default=env_default("operator-token-file", None), metavar="FILE",
                   help="Static operator tokens (list, fetch, verify), one per line. Default: none.")
    a.add_argument("--alerting-token-file", default=env_default("alerting-token-file", None), metavar="FILE",
                   help="Static alerting tokens (Alertmanager's webhook), one per line. Default: none.")
    a.add_argument("--tokenreview-url", default=env_default("tokenreview-url", None), metavar="URL",
                   help="The Kubernetes API server whose TokenReview checks agents' projected ServiceAccount "
                        "tokens (https://kubernetes.default.svc in a cluster). Default: none.")
    a.add_argument("--tokenreview-token-file", default=env_default("tokenreview-token-file", None), metavar="FILE",
                   help="The collector's own token for TokenReview. Default: none.")
    a.add_argument("--tokenreview-ca-file", default=env_default("tokenreview-ca-file", None), metavar="FILE",
                   help="The API server's CA bundle. Default: the system's.")
    a.add_argument("--tokenreview-rate", type=float, default=float(env_default("tokenreview-rate", "20") or 20),
                   help="TokenReviews per second this replica asks the API server for (tokens not in its cache; "
                        "bursts of 100); past it a request is answered 503 and the agent tries again. Only tokens "
                        "shaped as a JWT for --agent-audience are reviewed at all, and only after their signature "
                        "verifies against the cluster's ServiceAccount issuer keys. Default: 20.")
    a.add_argument("--tokenreview-peer-rate", type=float,
                   default=float(env_default("tokenreview-peer-rate", "0.5") or 0.5),
                   help="TokenReviews per second one client address may cause (bursts of 5) for tokens the "
                        "issuer's keys cannot judge (the keys unreadable, another algorithm); past it 503. "
                        "Default: 0.5.")
    a.add_argument("--agent-audience", default=env_default("agent-audience", "railscope-collector"),
                   help="The audience agents' tokens must carry. Default: railscope-collector.")
    a.add_argument("--agent-service-account", action="append", default=None, metavar="USER",
                   help="A ServiceAccount whose tokens are agents, as system:serviceaccount:<ns>:<name>. "
                        "Repeatable. Default: system:serviceaccount:railscope:railscope-agent.")
    a.add_argument("--insecure-dev", action="store_true",
                   default=_bool_word(env_default("insecure-dev", "false") or "false"),
                   help="Accept requests without a valid token, as every role. For a laptop only. Default: off "
                        "(without a token source the collector refuses to start).")

    t = p.add_argument_group("TLS")
    t.add_argument("--tls-cert-file", default=env_default("tls-cert-file", None), metavar="FILE",
                   help="The PEM certificate (with its chain) served over TLS; read again when it changes "
                        "(a cert-manager renewal). Default: none.")
    t.add_argument("--tls-key-file", default=env_default("tls-key-file", None), metavar="FILE",
                   help="The PEM private key of --tls-cert-file; read again when it changes. Default: none.")
    t.add_argument("--plain-http", action="store_true",
                   default=_bool_word(env_default("plain-http", "false") or "false"),
                   help="Serve plain HTTP because TLS ends in front of the collector (a service mesh sidecar, "
                        "an ingress). Default: off (without a certificate the collector refuses to start, "
                        "unless --insecure-dev).")

    lim = p.add_argument_group("limits")
    lim.add_argument("--max-bundle-size", type=_size, default=env_default("max-bundle-size", "4G"),
                     help="A bundle longer than this is refused (413) as its bytes pass it. Default: 4G.")
    lim.add_argument("--max-inflight", type=_count, default=env_default("max-inflight", "8"),
                     help="Uploads served at once by this replica; beyond, 429 with Retry-After. Default: 8.")
    lim.add_argument("--max-inflight-per-node", type=_count, default=env_default("max-inflight-per-node", "2"),
                     help="Uploads one node may have in flight on this replica; beyond, 429 with Retry-After. "
                          "Kept below --max-inflight (at least 1), so one node never holds every slot. Default: 2.")
    lim.add_argument("--max-uploads-per-node-hour", type=_count,
                     default=env_default("max-uploads-per-node-hour", "600"),
                     help="Uploads one node may start per hour on this replica; beyond, 429 with a Retry-After "
                          "until the oldest leaves the hour (0: no cap). Default: 600.")
    lim.add_argument("--max-upload-duration", type=_duration, default=env_default("max-upload-duration", "30m"),
                     help="An upload still receiving after this long is ended (408), however fast it trickles; "
                          "keep --stale-part-age above it. Default: 30m.")
    lim.add_argument("--retry-after", type=_count, default=env_default("retry-after", "5"),
                     help="Seconds told to agents in Retry-After. Default: 5.")
    lim.add_argument("--min-rate", type=_size, default=env_default("min-rate", "64k"),
                     help="An upload averaging fewer bytes per second than this after --min-rate-grace is ended "
                          "(408). Default: 64k.")
    lim.add_argument("--min-rate-grace", type=_duration, default=env_default("min-rate-grace", "30s"),
                     help="How long an upload may start slowly. Default: 30s.")
    lim.add_argument("--stall-timeout", type=_duration, default=env_default("stall-timeout", "60s"),
                     help="An upload that sends nothing for this long is ended (408). Default: 60s.")
    lim.add_argument("--header-timeout", type=_duration, default=env_default("header-timeout", "10s"),
                     help="A connection whose request headers are not complete by then is closed, and so is one "
                          "idle this long between requests. Default: 10s.")
    lim.add_argument("--max-conns-per-peer", type=_count, default=env_default("max-conns-per-peer", "128"),
                     help="Connections one client address may hold open; beyond, a new one is closed at once "
                          "(0: no cap). Not applied with --plain-http (every connection is the proxy's). The "
                          "total stays below the descriptor limit regardless. Default: 128.")
    lim.add_argument("--max-handshakes-per-peer", type=_count,
                     default=env_default("max-handshakes-per-peer", "16"),
                     help="TLS handshakes one client address may have in progress; beyond, a new connection is "
                          "closed at once (0: no cap). A handshake not done within --header-timeout is ended. "
                          "Default: 16.")
    lim.add_argument("--max-handshakes", type=_count, default=env_default("max-handshakes", "128"),
                     help="TLS handshakes in progress on this replica in all; beyond, a new connection is closed "
                          "at once. Default: 128.")
    lim.add_argument("--part-size", type=_size, default=env_default("part-size", "8M"),
                     help="Multipart part size for S3 (a smaller bundle is one PutObject); at least 5M. Default: 8M.")
    lim.add_argument("--part-concurrency", type=_count, default=env_default("part-concurrency", "4"),
                     help="Parts of one upload sent to S3 at once. Default: 4.")
    lim.add_argument("--parts-in-flight", type=_count, default=env_default("parts-in-flight", "8"),
                     help="Parts held in memory for S3 across all uploads of this replica: with --part-size, "
                          "the ingest memory bound. Default: 8.")
    lim.add_argument("--stale-part-age", type=_duration, default=env_default("stale-part-age", "1h"),
                     help="Temporary files and incomplete multipart uploads older than this (a replica killed "
                          "mid-upload) are removed at start. Default: 1h.")
    _alert_flags(p)


def _alert_flags(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("capture on alert (POST /v1/alerts)")
    c.add_argument("--capture-on-alert", type=_bool_word, default=_bool_word(env_default("capture-on-alert", "on") or "on"),
                   metavar="on|off",
                   help="The kill switch: off queues no capture for any alert (operators can still ask). Default: on.")
    c.add_argument("--capture-cooldown", type=duration_or_zero, default=env_default("capture-cooldown", "15m"),
                   help="A node captured this recently, for any incident, is not captured again; 0 turns the "
                        "cooldown off. Default: 15m.")
    c.add_argument("--capture-max-in-flight", type=_count, default=env_default("capture-max-in-flight", "20"),
                   help="Capture requests pending across the cluster; beyond, alerts queue nothing. Default: 20.")
    c.add_argument("--capture-incident-worst", type=_count, default=env_default("capture-incident-worst", "5"),
                   help="Per incident, the nodes with the worst severity captured first. Default: 5.")
    c.add_argument("--capture-incident-sample", type=_count, default=env_default("capture-incident-sample", "5"),
                   help="Per incident, a further sample of the other nodes (the rest on demand). Default: 5.")
    c.add_argument("--capture-rate", type=_count, default=env_default("capture-rate", "50"),
                   help="Capture requests per alert name per --capture-rate-window. Default: 50.")
    c.add_argument("--capture-rate-window", type=_duration, default=env_default("capture-rate-window", "10m"),
                   help="The window of --capture-rate. Default: 10m.")
    c.add_argument("--request-ttl", type=_duration, default=env_default("request-ttl", "30m"),
                   help="A capture request no agent picked up by then expires. Default: 30m.")
    c.add_argument("--capture-agent-recent", type=_duration, default=env_default("capture-agent-recent", "5m"),
                   help="A node whose agent polled within this long counts toward --capture-max-in-flight; "
                        "the others (agent gone or never deployed) toward --capture-no-agent-max-in-flight. "
                        "Default: 5m.")
    c.add_argument("--capture-no-agent-max-in-flight", type=_count,
                   default=env_default("capture-no-agent-max-in-flight", "3"),
                   help="Capture requests pending for nodes without a recent agent; the alert answer names "
                        "them under no_recent_agent. Default: 3.")
    c.add_argument("--capture-no-agent-ttl", type=_duration, default=env_default("capture-no-agent-ttl", "5m"),
                   help="A capture request for a node without a recent agent expires after this. Default: 5m.")


def _alert_limits(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from collector.config import AlertLimits

    return AlertLimits(enabled=bool(args.capture_on_alert), cooldown_s=float(args.capture_cooldown),
                       max_in_flight=int(args.capture_max_in_flight),
                       incident_worst=int(args.capture_incident_worst),
                       incident_sample=int(args.capture_incident_sample),
                       rate_per_alertname=int(args.capture_rate), rate_window_s=float(args.capture_rate_window),
                       request_ttl_s=float(args.request_ttl),
                       agent_recent_s=float(args.capture_agent_recent),
                       absent_max_in_flight=int(args.capture_no_agent_max_in_flight),
                       absent_ttl_s=float(args.capture_no_agent_ttl))


def settings_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from collector.config import CollectorSettings, check_listen, parse_store

    kw: dict[str, object] = {}
    if args.agent_service_account:
        kw["agent_service_accounts"] = tuple(args.agent_service_account)
    return CollectorSettings(
        listen=check_listen(args.listen), port=int(args.port), store=parse_store(args.store),
        s3_endpoint_url=args.s3_endpoint_url, agent_token_file=args.agent_token_file, cluster=args.cluster,
        alerting_token_file=args.alerting_token_file, operator_token_file=args.operator_token_file,
        tokenreview_url=args.tokenreview_url, tokenreview_token_file=args.tokenreview_token_file,
        tokenreview_ca_file=args.tokenreview_ca_file, agent_audience=args.agent_audience,
        tokenreview_rate=float(args.tokenreview_rate), tokenreview_peer_rate=float(args.tokenreview_peer_rate),
        insecure_dev=bool(args.insecure_dev), max_bundle_bytes=int(args.max_bundle_size),
        max_inflight=int(args.max_inflight), retry_after_s=int(args.retry_after), min_rate_bps=int(args.min_rate),
        max_inflight_per_node=int(args.max_inflight_per_node),
        max_uploads_per_node_hour=int(args.max_uploads_per_node_hour), max_upload_s=float(args.max_upload_duration),
        min_rate_grace_s=float(args.min_rate_grace), stall_timeout_s=float(args.stall_timeout),
        part_bytes=int(args.part_size), part_concurrency=int(args.part_concurrency),
        parts_in_flight=int(args.parts_in_flight), stale_part_s=float(args.stale_part_age),
        tls_cert_file=args.tls_cert_file, tls_key_file=args.tls_key_file, plain_http=bool(args.plain_http),
        header_timeout_s=float(args.header_timeout), max_conns_per_peer=int(args.max_conns_per_peer),
        max_handshakes_per_peer=int(args.max_handshakes_per_peer), max_handshakes=int(args.max_handshakes),
        alerts=_alert_limits(args), **kw,
    )


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
