"""The Kubernetes API client of the CLI and the agent: :mod:`proto.kube` (kept there because the collector's
cluster watch speaks to the API server too, and the collector may not import the agent's clients)."""

from proto.kube import (
    PAGE,
    SA_DIR,
    Gone,
    Informer,
    KubeClient,
    KubeConfig,
    KubeError,
    LeaseLock,
    discover,
    resource_path,
    slim,
    watch_kinds,
)

__all__ = ["PAGE", "SA_DIR", "Gone", "Informer", "KubeClient", "KubeConfig", "KubeError", "LeaseLock", "discover",
           "resource_path", "slim", "watch_kinds"]
