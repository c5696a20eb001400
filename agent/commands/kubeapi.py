"""The Kubernetes API server flags of ``rollout``, ``snapshot --cluster`` and ``preflight``, declared once (a
settings table, ``agent.settings``), and the client configuration they make.

Without ``--api-server`` the pod's in-cluster configuration is used (``KUBERNETES_SERVICE_HOST``, the
ServiceAccount's token and CA). The CLI's own: the chart runs none of these commands, so no row has a chart
value (the collector's cluster view has its own rows, ``--cluster-api-*``, on its table).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from agent.settings import Setting, add_flags

__all__ = ["API_TABLE", "DEFAULT_NAMESPACE", "add_api_flags", "api_config", "api_given"]

DEFAULT_NAMESPACE = "nvidia-network-operator"
_GROUP = "Kubernetes API (the operators' objects, read-only)"

API_TABLE: tuple[Setting, ...] = (
    Setting("--api-server", "The Kubernetes API server (https://HOST:PORT), with --api-token-file. Default: the "
            "pod's in-cluster configuration (KUBERNETES_SERVICE_HOST, the ServiceAccount's token and CA).",
            metavar="URL", group=_GROUP, chart="none"),
    Setting("--api-token-file", "A file holding a bearer token for --api-server, read on every request. "
            "Default: none.", metavar="FILE", group=_GROUP, chart="none"),
    Setting("--api-ca-file", "The CA bundle that signed --api-server's certificate. Default: the system's.",
            metavar="FILE", group=_GROUP, chart="none"),
    Setting("--namespace", "The operators' namespace (DaemonSets, pods, NicDevices, SR-IOV states, pools). "
            f"Default: {DEFAULT_NAMESPACE}.", default=DEFAULT_NAMESPACE, metavar="NS", group=_GROUP,
            chart="none"),
)


def add_api_flags(p: argparse.ArgumentParser) -> None:
    add_flags(p, API_TABLE)


def api_given(args: argparse.Namespace) -> bool:
    """Whether an API server is given or the pod's in-cluster configuration may be there (no client loaded)."""
    return bool(args.api_server or os.environ.get("KUBERNETES_SERVICE_HOST"))


def api_config(args: argparse.Namespace, owner_only: bool = True) -> Any:
    """The ``KubeConfig`` of the flags, else the pod's own. ``ValueError`` for flags that do not go together,
    ``KubeError`` (status 0) where there is no API server at all. ``owner_only``: the token file's mode rule
    (``proto.tokens``); ``preflight`` keeps the rule it always had, none (the agent's token is group-readable
    where the chart sets no mode)."""
    from agent.clients.kubernetes import KubeConfig

    if args.api_server:
        if not args.api_server.startswith(("https://", "http://")):
            raise ValueError(f"--api-server {args.api_server!r}: expected https://HOST:PORT")
        return KubeConfig(args.api_server, args.api_token_file, args.api_ca_file, owner_only=owner_only)
    if args.api_token_file or args.api_ca_file:
        raise ValueError("--api-token-file and --api-ca-file go with --api-server")
    return KubeConfig.in_cluster()
