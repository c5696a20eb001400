"""The replay plug-in: run the snapshot readers through a ``RecordingHost`` into a node image, so that
``railscope doctor --from`` the image reaches the diagnosis the readers reached live (DESIGN §7).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.host.recording import RecordError, RecordingHost
from agent.model import Snapshot
from agent.readers.ovs import OVS_ARGV
from agent.readers.snapshot import take_snapshot

__all__ = ["RecordError", "record_image"]


def _check_out_dir(out_dir: str) -> None:
    if os.path.lexists(out_dir):
        if not os.path.isdir(out_dir):
            raise RecordError(f"{out_dir}: exists and is not a directory")
        if os.listdir(out_dir):
            raise RecordError(f"{out_dir}: directory is not empty, refusing to overwrite")


def record_image(host: Host, out_dir: str, *, node: str | None = None, cluster: str | None = None,
                 incident: str | None = None, reason: str | None = None,
                 events: list[dict[str, Any]] | None = None,
                 cfg: ReadConfig | None = None) -> tuple[Snapshot, dict[str, Any]]:
    """Read ``host`` with the snapshot readers and write what they saw as a node image in ``out_dir``.

    ``out_dir`` must not exist or be empty. The image is built beside it and moved into place at
    the end, so a failure leaves no half image behind. ``node`` defaults to the host's hostname.
    """
    out_dir = os.path.abspath(out_dir)
    _check_out_dir(out_dir)
    parent = os.path.dirname(out_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", dir=parent)
    except OSError as exc:
        raise RecordError(f"{out_dir}: cannot write here ({exc.strerror or exc})") from None
    try:
        rec = RecordingHost(host, work)
        snap = take_snapshot(rec, cfg or ReadConfig())
        ovs_why = next((why for source, why in snap.unavailable if source == "ovs"), None)
        if ovs_why:
            # Live, the OVS reader skips ovs-vsctl when there is no db socket; an image keeps no
            # sockets, so the manifest says why the command is absent (DESIGN §2: skipped + reason).
            rec.note_skipped(OVS_ARGV, ovs_why)
        manifest = rec.finish(node=node or snap.node, cluster=cluster, incident=incident,
                              reason=reason, events=events)
        os.chmod(work, 0o755)
        _check_out_dir(out_dir)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        os.rename(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return snap, manifest
