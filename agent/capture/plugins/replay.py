"""replay: everything the readers read, recorded through ``RecordingHost`` as they read it, so that
``railscope doctor --from`` the bundle reaches the diagnosis the readers reached live (docs/design.md §7).

Its one step is the snapshot itself; the runner runs it first, into the bundle's staging tree.
"""

from __future__ import annotations

from agent.capture.context import CaptureContext
from agent.capture.plugin import Plugin
from agent.host.recording import RecordingHost
from agent.model import Snapshot
from agent.readers.ovs import OVS_ARGV
from agent.readers.snapshot import take_snapshot

PLUGIN = Plugin("replay", 1, (), "the readers' doors, recorded as they read them")


def record(ctx: CaptureContext, rec: RecordingHost) -> Snapshot:
    snap = take_snapshot(rec, ctx.cfg)
    ovs_why = next((why for source, why in snap.unavailable if source == "ovs"), None)
    if ovs_why:
        # Live, the OVS reader skips ovs-vsctl when there is no db socket; an image keeps no
        # sockets, so the manifest says why the command is absent (docs/design.md §2: skipped + reason).
        rec.note_skipped(OVS_ARGV, ovs_why)
    return snap
