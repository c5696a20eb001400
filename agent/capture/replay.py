"""``record_image``: a node image *directory* of what the readers read, made by the capture runner
with the *replay* and *agent* plug-ins (``agent.capture.plugins.replay``); kept for the callers that
want the image as a directory and the snapshot the readers saw."""

from __future__ import annotations

from typing import Any

from agent.capture.runner import CaptureError, CaptureParams, capture_to_dir
from agent.config import ReadConfig
from agent.host import Host
from agent.model import Snapshot

__all__ = ["record_image"]


def record_image(host: Host, out_dir: str, *, node: str | None = None, cluster: str | None = None,
                 incident: str | None = None, reason: str | None = None,
                 events: list[dict[str, Any]] | None = None,
                 cfg: ReadConfig | None = None,
                 expectations: dict[str, Any] | None = None) -> tuple[Snapshot, dict[str, Any]]:
    """Read ``host`` with the snapshot readers and write what they saw as a node image in ``out_dir``
    (which must not exist or be empty). ``node`` defaults to the host's hostname. ``CaptureError``
    when the image cannot be written or the readers did not finish."""
    params = CaptureParams(node=node, cluster=cluster, incident=incident, reason=reason, events=events,
                           cfg=cfg or ReadConfig(), plugins=("replay", "agent"), recorder_gap_s=0.0, nice=0,
                           expectations=expectations)
    res = capture_to_dir(host, out_dir, params)
    if res.snapshot is None:
        raise CaptureError(f"{out_dir}: the readers did not finish ({'; '.join(res.manifest['notes'])})")
    return res.snapshot, res.manifest
