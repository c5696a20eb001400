"""A rail's RDMA port: its state and the uplink port's counters (RoCE congestion and loss, IB PMA).
Rendered with each rail (the rails subject calls it)."""

from __future__ import annotations

from agent.analysis.topology import Rail
from agent.metrics.families import RAIL, Families, label
from agent.model import RdmaDevice, RdmaLink, Snapshot

__all__ = ["RDMA_HW_COUNTERS", "RDMA_PHYS_STATES", "RDMA_PORT_COUNTERS", "RDMA_STATES", "render_rail"]

#: RoCE congestion and loss counters of ``/sys/class/infiniband/<dev>/ports/<p>/hw_counters`` that
#: the rail's uplink port exports (mlx5 ``drivers/infiniband/hw/mlx5/counters.c``; their meanings as NVIDIA's
#: "Understanding mlx5 Linux Counters and Status Parameters" gives them,
#: https://enterprise-support.nvidia.com/s/article/understanding-mlx5-linux-counters-and-status-parameters).
RDMA_HW_COUNTERS: tuple[tuple[str, str], ...] = (
    ("np_ecn_marked_roce_packets", "RoCE packets received with ECN CE set (this port is the notification point)."),
    ("np_cnp_sent", "CNPs sent back to senders after CE-marked packets (DCQCN notification point)."),
    ("rp_cnp_handled", "CNPs received and acted on by lowering the send rate (DCQCN reaction point)."),
    ("rp_cnp_ignored", "CNPs received but ignored; rising means DCQCN reaction point misconfigured."),
    ("out_of_sequence", "Packets received out of order, usually after a drop on a lossless fabric."),
    ("packet_seq_err", "NAKs for sequence errors received: the remote saw a gap."),
    ("implied_nak_seq_err", "Implied NAK sequence errors (read / atomic responses out of order)."),
    ("local_ack_timeout_err", "ACK timeouts on requester QPs (retransmissions)."),
    ("duplicate_request", "Duplicate requests received: the peer retransmitted."),
    ("rnr_nak_retry_err", "RNR NAKs received: the remote receiver had no receive posted."),
    ("out_of_buffer", "Packets dropped because a receive queue had no WQE posted."),
    ("rx_icrc_encapsulated", "RoCE packets received with a bad ICRC."),
    ("roce_adp_retrans", "Adaptive retransmission events."),
    ("roce_adp_retrans_to", "Adaptive retransmission timeouts."),
    ("roce_slow_restart", "Slow-restart events."),
    ("roce_slow_restart_cnps", "CNPs received during slow restart."),
    ("roce_slow_restart_trans", "Transitions into slow restart."),
    ("req_cqe_error", "Requester completions with an error."),
    ("resp_cqe_error", "Responder completions with an error."),
)

#: IB PMA counters (``counters/*``) of the uplink port that are not traffic volume.
RDMA_PORT_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("port_xmit_discards", "rdma_port_transmit_discards", "Packets the port discarded at transmit."),
    ("port_rcv_errors", "rdma_port_receive_errors", "Packets received with errors."),
    ("symbol_error", "rdma_port_symbol_errors", "Symbol errors on the physical link."),
    ("link_downed", "rdma_port_link_downed", "Times the link went down after error recovery failed."),
)

#: ``rdma link`` state words -> IB port state numbers (IBTA; sysfs ``ports/<p>/state`` prints them).
RDMA_STATES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
#: ``rdma link`` physical state words -> IB physical port state numbers (sysfs ``phys_state``).
RDMA_PHYS_STATES = {"SLEEP": 1, "POLLING": 2, "DISABLED": 3, "PORT_CONFIGURATION_TRAINING": 4,
                    "LINK_UP": 5, "LINK_ERROR_RECOVERY": 6, "PHY_TEST": 7}


def render_rail(fams: Families, snap: Snapshot, rail: Rail, rl: RdmaLink) -> None:
    """The rail's RDMA port: state, and the uplink port's RoCE and PMA counters."""
    base = (label(rail.rail), label(rail.plane), label(rl.dev))
    up = rl.state == "ACTIVE" and rl.physical_state in (None, "LINK_UP")
    fams.gauge("railscope_rdma_port_up",
               "1 when the rail's RDMA port is ACTIVE with the physical link up.", RAIL, base, 1 if up else 0)
    if rl.state in RDMA_STATES:
        fams.gauge("railscope_rdma_port_state",
                   "IB port state of the rail's RDMA port (1 down, 2 init, 3 armed, 4 active).",
                   RAIL, base, RDMA_STATES[rl.state])
    if rl.physical_state in RDMA_PHYS_STATES:
        fams.gauge("railscope_rdma_port_physical_state",
                   "IB physical port state (2 polling, 3 disabled, 5 link up, 6 error recovery).",
                   RAIL, base, RDMA_PHYS_STATES[rl.physical_state])
    dev: RdmaDevice | None = rail.rdma_device if rail.rdma_device is not None and \
        rail.rdma_device.name == rl.dev else next((d for d in snap.rdma_devices if d.name == rl.dev), None)
    if dev is None:
        return
    # Only the uplink port: in switchdev the PF's RDMA device has one port per representor.
    c = {name: val for port, name, val in dev.counters if port == rl.port}
    for key, doc in RDMA_HW_COUNTERS:
        if key in c:
            fams.counter(f"railscope_rdma_{key}", doc, RAIL, base, c[key])
    for d, key in (("rx", "port_rcv_data"), ("tx", "port_xmit_data")):
        if key in c:
            # IB PMA data counters count 4-byte words.
            fams.counter("railscope_rdma_port_bytes", "Bytes through the rail's RDMA port.",
                         (*RAIL, "direction"), (*base, d), c[key] * 4)
    for d, key in (("rx", "port_rcv_packets"), ("tx", "port_xmit_packets")):
        if key in c:
            fams.counter("railscope_rdma_port_packets", "Packets through the rail's RDMA port.",
                         (*RAIL, "direction"), (*base, d), c[key])
    for key, name, doc in RDMA_PORT_COUNTERS:
        if key in c:
            fams.counter(f"railscope_{name}", doc, RAIL, base, c[key])
