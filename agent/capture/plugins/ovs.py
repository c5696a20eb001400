"""ovs: the switch, its interfaces, bridges and datapath counts (when the OVS db socket exists).
``ovs-appctl`` always with ``--timeout=5`` (its ``-t`` names the target daemon), and never a flow dump (the deny-list)."""

from agent.capture.context import CaptureContext
from agent.capture.plugin import Command, Plugin
from agent.readers.ovs import db_sockets

PLUGIN = Plugin("ovs", 2, (
    Command(("ovs-vsctl", "--timeout=5", "show")),
    Command(("ovs-vsctl", "--timeout=5", "--format=json", "list", "Interface")),
    Command(("ovs-vsctl", "--timeout=5", "--format=json", "list", "Bridge")),
    Command(("ovs-vsctl", "--timeout=5", "--format=json", "list", "Open_vSwitch")),
    Command(("ovs-appctl", "--timeout=5", "dpctl/show", "-s")),
    Command(("ovs-appctl", "--timeout=5", "upcall/show")),
    Command(("ovs-appctl", "--timeout=5", "coverage/show")),
), "ovs-vsctl show and lists, datapath, upcall and coverage counts")


def skip(ctx: CaptureContext) -> str | None:
    socks = db_sockets()
    if any(ctx.host.exists(s) for s in socks):
        return None
    return f"no OVS db socket at {' or '.join(socks)}"
