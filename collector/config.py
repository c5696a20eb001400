"""The collector's configuration, parsed once into one frozen dataclass.

``agent/commands/collector.py`` maps flags (and ``RAILSCOPE_*`` variables) onto these fields one to one.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from proto.keys import KeyPartError, check_part, check_prefix
from proto.requests import DEFAULT_PLAN, PLANS

__all__ = ["DEFAULT_PORT", "AlertLimits", "CollectorSettings", "SettingsError", "StoreURL", "parse_store"]

DEFAULT_PORT = 9842
MiB = 1 << 20
#: S3 refuses parts below 5 MiB except the last one.
MIN_PART = 5 * MiB


class SettingsError(ValueError):
    """A setting that cannot work; the message is one line for the operator."""


@dataclass(frozen=True, slots=True)
class StoreURL:
    kind: str  # "local" or "s3"
    path: str = ""  # local directory
    bucket: str = ""
    prefix: str = ""


def parse_store(text: str) -> StoreURL:
    """``./dir`` or ``file:///dir`` for the local store; ``s3://bucket/prefix`` for S3."""
    if text.startswith("s3://"):
        u = urlsplit(text)
        if not u.netloc:
            raise SettingsError(f"--store {text}: no bucket")
        try:
            prefix = check_prefix(u.path)
        except KeyPartError as exc:
            raise SettingsError(f"--store {text}: {exc}") from None
        return StoreURL(kind="s3", bucket=u.netloc, prefix=prefix)
    if "://" in text and not text.startswith("file://"):
        raise SettingsError(f"--store {text}: expected a directory or s3://bucket/prefix")
    path = text[len("file://"):] if text.startswith("file://") else text
    if not path:
        raise SettingsError("--store: empty path")
    return StoreURL(kind="local", path=path)


@dataclass(frozen=True, slots=True)
class AlertLimits:
    """The bounds of capture on alert. Defaults: what a 1,000-node cluster can absorb in a storm."""

    #: the kill switch: False queues nothing
    enabled: bool = True
    #: a node captured (for any incident) this recently is not captured again
    cooldown_s: float = 900.0
    #: requests pending across the cluster
    max_in_flight: int = 20
    #: per incident: the worst nodes by severity, plus a sample of the rest
    incident_worst: int = 5
    incident_sample: int = 5
    #: requests per alert name per window
    rate_per_alertname: int = 50
    rate_window_s: float = 600.0
    #: a request not picked up by then is dropped
    request_ttl_s: float = 1800.0
    #: a node whose agent polled within this long counts as having one (agents hold a poll under a
    #: minute and mark it in the store at most once a minute)
    agent_recent_s: float = 300.0
    #: nodes without such an agent (gone, never deployed) get a cap and a TTL of their own, so their
    #: alerts never hold ``max_in_flight`` from the nodes that can capture
    absent_max_in_flight: int = 3
    absent_ttl_s: float = 300.0
    #: the capture plan alert requests name (one of ``proto.requests.PLANS``)
    plan: str = DEFAULT_PLAN
    #: fabric correlation (``collector.fabric``): rail alerts that name their leaf (``peer_system``)
    #: within this window are one fabric event; a rail alert waits ``fabric_hold_s`` before its capture
    #: is decided, so the alerts of one event (Alertmanager sends one group per node) are all seen
    #: first; 0 decides at once
    fabric_window_s: float = 300.0
    fabric_hold_s: float = 30.0
    #: a leaf is named when this many of its nodes degraded together; a plane when this many of its
    #: leaves did
    leaf_min_nodes: int = 4
    plane_min_leaves: int = 3

    def __post_init__(self) -> None:
        for name in ("cooldown_s", "rate_window_s", "request_ttl_s", "agent_recent_s", "absent_ttl_s",
                     "fabric_hold_s"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative")
        for name in ("max_in_flight", "incident_worst", "incident_sample", "rate_per_alertname",
                     "absent_max_in_flight"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative")
        if self.request_ttl_s < 60:
            raise SettingsError("request_ttl_s must be at least 60 s (agents poll for up to 55 s)")
        if self.absent_ttl_s < 60:
            raise SettingsError("absent_ttl_s must be at least 60 s (agents poll for up to 55 s)")
        if self.agent_recent_s < 120:
            raise SettingsError("agent_recent_s must be at least 120 s (a poll is marked at most once a minute)")
        if self.fabric_window_s < 10:
            raise SettingsError("fabric_window_s must be at least 10 s")
        if self.leaf_min_nodes < 2 or self.plane_min_leaves < 2:
            raise SettingsError("leaf_min_nodes and plane_min_leaves must be at least 2 (one node alone is no fabric event)")
        if self.plan not in PLANS:
            raise SettingsError(f"unknown capture plan {self.plan!r} (known: {', '.join(sorted(PLANS))})")


@dataclass(frozen=True, slots=True)
class CollectorSettings:
    listen: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    store: StoreURL = StoreURL(kind="local", path="./railscope-data")
    s3_endpoint_url: str | None = None
    #: static tokens: files of one token per line (agent: ``<node> <token> [<cluster>]``)
    agent_token_file: str | None = None
    #: the cluster this collector stores for: an agent token that names no cluster of its own (and
    #: every TokenReview'd agent) uploads under this one only; None: any
    cluster: str | None = None
    alerting_token_file: str | None = None
    operator_token_file: str | None = None
    #: TokenReview: the API server's URL, the collector's own token and CA, the audience agents ask for
    tokenreview_url: str | None = None
    tokenreview_token_file: str | None = None
    tokenreview_ca_file: str | None = None
    agent_audience: str = "railscope-collector"
    #: TokenReviews per second this replica may ask for (a token not in its cache), bursts of
    #: ``tokenreview_burst``; past it a request is answered 503 and tried again
    tokenreview_rate: float = 20.0
    tokenreview_burst: int = 100
    #: TokenReviews per second one client address may cause for tokens the issuer's keys cannot
    #: judge (bursts of 5): a flood of minted tokens from one address never empties the replica's
    tokenreview_peer_rate: float = 0.5
    #: ServiceAccounts whose tokens are agents (``system:serviceaccount:<ns>:<name>``)
    agent_service_accounts: tuple[str, ...] = ("system:serviceaccount:railscope:railscope-agent",)
    insecure_dev: bool = False
    #: TLS: the certificate (chain) and key served; plain HTTP only with ``insecure_dev`` or ``plain_http``
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: plain HTTP because TLS ends in front of the collector (a mesh sidecar, an ingress)
    plain_http: bool = False
    #: with ``plain_http``: the proxies (addresses or CIDR networks) whose connections begin with a
    #: PROXY protocol header (v1 or v2) naming their client; a connection from one without a valid
    #: header is refused. The client it names is the peer of the caps per address. Empty: none.
    proxy_protocol_from: tuple[str, ...] = ()
    max_bundle_bytes: int = 4 << 30
    max_inflight: int = 8
    #: uploads one node may have in flight on this replica
    max_inflight_per_node: int = 2
    #: uploads one node may start per hour on this replica (0: no cap); past it 429 with Retry-After
    max_uploads_per_node_hour: int = 600
    #: bundle bytes one node may send per hour on this replica; past it 429 with Retry-After (one token
    #: must not fill the store with a few huge bundles any more than with many small ones)
    max_upload_bytes_per_node_hour: int = 32 << 30
    #: an upload still receiving after this long is ended (408), however fast it trickles
    max_upload_s: float = 1800.0
    retry_after_s: int = 5
    #: the slow-client floor: after ``min_rate_grace_s``, an upload averaging less is ended (408)
    min_rate_bps: int = 64 * 1024
    min_rate_grace_s: float = 30.0
    #: no byte at all for this long ends an upload (408)
    stall_timeout_s: float = 60.0
    part_bytes: int = 8 * MiB
    #: parts uploading at once per ingest, and across all ingests of this replica (memory bound)
    part_concurrency: int = 4
    parts_in_flight: int = 8
    max_header_bytes: int = 8190
    #: a connection whose request headers are not complete by then is closed; also the idle time
    #: between two requests of one connection
    header_timeout_s: float = 10.0
    #: connections one peer address may hold open (0: no cap); the replica's total stays below its
    #: descriptor limit whatever this says
    max_conns_per_peer: int = 128
    #: TLS handshakes in progress one peer address may have, and the replica in all (0: no cap per
    #: peer); past either a new connection is closed at once. A handshake holds ~300 KiB of buffers
    #: and must end within ``header_timeout_s``.
    max_handshakes_per_peer: int = 16
    max_handshakes: int = 128
    #: temporary files of the local store older than this are removed at start (a replica killed mid-ingest)
    stale_part_s: float = 3600.0
    #: capture on alert (POST /v1/alerts)
    alerts: AlertLimits = field(default_factory=AlertLimits)
    #: the cluster view (``collector.cluster.watch``): auto | on | off; its API server (None: in-cluster),
    #: the operators' namespace, the Lease that elects the one replica that watches
    cluster_view: str = "auto"
    cluster_api_server: str | None = None
    cluster_api_token_file: str | None = None
    cluster_api_ca_file: str | None = None
    operator_namespace: str = "nvidia-network-operator"
    cluster_lease: str = "railscope-collector-cluster-view"

    def __post_init__(self) -> None:
        if self.max_inflight < 1:
            raise SettingsError("--max-inflight must be at least 1")
        if self.part_bytes < MIN_PART:
            raise SettingsError(f"--part-size must be at least {MIN_PART} bytes (S3's smallest part)")
        if self.part_concurrency < 1 or self.parts_in_flight < 1:
            raise SettingsError("part concurrency must be at least 1")
        if self.max_bundle_bytes < 1:
            raise SettingsError("--max-bundle-size must be positive")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingsError("--tls-cert-file and --tls-key-file go together")
        if self.header_timeout_s <= 0:
            raise SettingsError("--header-timeout must be positive")
        if self.max_handshakes_per_peer < 0 or self.max_handshakes < 1:
            raise SettingsError("--max-handshakes must be at least 1 (--max-handshakes-per-peer: 0 or more)")
        if self.max_inflight_per_node < 1:
            raise SettingsError("--max-inflight-per-node must be at least 1")
        if self.max_uploads_per_node_hour < 0:
            raise SettingsError("--max-uploads-per-node-hour must not be negative")
        if self.max_upload_bytes_per_node_hour < 1:
            raise SettingsError("--max-upload-bytes-per-node-hour must be at least 1 byte")
        if self.max_upload_s <= 0:
            raise SettingsError("--max-upload-duration must be positive")
        if self.cluster is not None:
            try:
                check_part("cluster", self.cluster)
            except KeyPartError as exc:
                raise SettingsError(f"--cluster: {exc}") from None
        if self.tokenreview_rate <= 0 or self.tokenreview_burst < 1:
            raise SettingsError("--tokenreview-rate must be positive")
        if self.proxy_protocol_from:
            if not self.plain_http:
                raise SettingsError("--proxy-protocol-from needs --plain-http (the header comes from the proxy "
                                    "that ends TLS)")
            for net in self.proxy_protocol_from:
                try:
                    ipaddress.ip_network(net.strip(), strict=False)
                except ValueError:
                    raise SettingsError(f"--proxy-protocol-from {net!r}: not an address or a CIDR network") from None
        if self.tokenreview_peer_rate <= 0:
            raise SettingsError("--tokenreview-peer-rate must be positive")
        if self.cluster_view not in ("auto", "on", "off"):
            raise SettingsError("--cluster-view is auto, on or off")
        if self.cluster_api_server and not self.cluster_api_server.startswith(("https://", "http://")):
            raise SettingsError(f"--cluster-api-server {self.cluster_api_server!r}: expected https://HOST:PORT")
        if (self.cluster_api_token_file or self.cluster_api_ca_file) and not self.cluster_api_server:
            raise SettingsError("--cluster-api-token-file and --cluster-api-ca-file go with --cluster-api-server")
        ns, _, name = self.cluster_lease.rpartition("/")
        for part in ([ns] if ns else []) + [name, self.operator_namespace]:
            if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?", part):
                raise SettingsError(f"--cluster-lease / --operator-namespace: {part!r} is not a Kubernetes name")

    @property
    def peer_conn_cap(self) -> int:
        """Connections one peer address may hold (0: no cap). Behind the proxy ``plain_http`` is for
        (a mesh sidecar, an ingress) every connection comes from the proxy's address, and a cap per
        address would cap the whole fleet: none then, unless the proxy names each client (PROXY
        protocol, ``proxy_protocol_from``); the replica's total stays."""
        return self.max_conns_per_peer if self.peers_named else 0

    @property
    def peers_named(self) -> bool:
        """Whether a connection's peer address is its client's: served directly, or behind a proxy
        that names its clients (PROXY protocol). Caps per address apply only then."""
        return not self.plain_http or bool(self.proxy_protocol_from)

    @property
    def node_inflight_cap(self) -> int:
        """Uploads one node may have in flight: ``max_inflight_per_node`` kept below ``max_inflight``
        (but at least 1), so that one node never holds every slot of a replica."""
        return max(1, min(self.max_inflight_per_node, self.max_inflight - 1))

    def check_transport(self) -> None:
        """Serving refuses plain HTTP unless asked: tokens and bundles would cross the network in clear."""
        if not self.tls_cert_file and not (self.insecure_dev or self.plain_http):
            raise SettingsError("no TLS: set --tls-cert-file and --tls-key-file (plain HTTP only with "
                                "--insecure-dev, or --plain-http when TLS ends in front of the collector)")


def check_listen(addr: str) -> str:
    text = addr.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise SettingsError(f"--listen {addr!r}: not an IP address") from None
