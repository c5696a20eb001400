"""One snapshot (plus the image's history) -> the ``railscope.doctor/v1`` diagnosis (docs/design.md §4).

``diagnose`` builds the topology, runs every check and fills the ``rails[]`` table by the value rules:
``firmware`` is the version token and the PSID goes to ``psid``; ``speed_mbps`` is null when sysfs
says ``-1`` or nothing; a rail without a netdev has null for everything but ``rail``, ``plane``,
``pci`` and what sysfs still says of its function (``numvfs``).
"""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.checks import KernelRow, run_checks
from agent.analysis.gpu_topology import gpu_for
from agent.analysis.topology import Rail, Topology, build_topology
from agent.config import Expectations
from agent.findings import Diagnosis, Finding, PeerRow, RailRow
from agent.model import Event, Snapshot
from agent.readers.history import Recorder

__all__ = ["diagnose", "rail_rows", "with_unavailable"]


def _speed(snap: Snapshot, ifname: str) -> int | None:
    # mlx5 says -1 (SPEED_UNKNOWN) while the link is down; the reader keeps that as None.
    link = snap.link(ifname)
    val = link.speed_mbps if link is not None else None
    return val if val is not None and val > 0 else None


def _peer(snap: Snapshot, netdev: str | None) -> PeerRow | None:
    n = snap.neighbor_of(netdev)
    if n is None:
        return None
    return PeerRow(system=n.leaf, port=n.port, mfs=n.mfs, pfc=n.pfc, seen=n.seen)


def _row(snap: Snapshot, rail: Rail) -> RailRow:
    numvfs = rail.pf.numvfs if rail.pf is not None else None
    if numvfs is None and rail.pci:
        fn = snap.pci_function(rail.pci)
        numvfs = fn.sriov_numvfs if fn is not None else None
    gpu, gpu_link = gpu_for(rail.pci, snap.gpus)
    if rail.netdev is None:
        return RailRow(rail=rail.rail, plane=rail.plane, netdev=None, rdma=None, pci=rail.pci, numvfs=numvfs,
                       gpu=gpu, gpu_link=gpu_link)
    name = rail.netdev.ifname
    drv = snap.driver_of(name)
    firmware = drv.firmware if drv is not None else None
    if firmware is None and rail.rdma_device is not None and rail.rdma_device.fw_ver:
        firmware = rail.rdma_device.fw_ver.split()[0]
    pf = rail.pf
    return RailRow(
        rail=rail.rail, plane=rail.plane, netdev=name, pci=rail.pci,
        rdma=rail.rdma.dev if rail.rdma else rail.rdma_device.name if rail.rdma_device else None,
        oper="up" if rail.netdev.is_oper_up else "down",
        speed_mbps=_speed(snap, name),
        mtu=rail.netdev.mtu,
        rdma_state=rail.rdma.state if rail.rdma else None,
        driver=drv.driver if drv is not None else None,
        driver_version=drv.version if drv is not None else None,
        firmware=firmware,
        psid=drv.psid if drv is not None else None,
        eswitch_mode=pf.eswitch_mode if pf is not None else None,
        esw_multiport=pf.esw_multiport if pf is not None else None,
        numvfs=numvfs,
        representors=len(pf.representors) if pf is not None else None,
        gpu=gpu, gpu_link=gpu_link, peer=_peer(snap, name),
    )


def rail_rows(snap: Snapshot, topo: Topology) -> tuple[RailRow, ...]:
    """``rails[]``: sorted by rail then plane (a rail without a plane first)."""
    rows = [_row(snap, r) for r in topo.rails]
    return tuple(sorted(rows, key=lambda r: (r.rail, -1 if r.plane is None else r.plane)))


def diagnose(snap: Snapshot, exp: Expectations, *, kernel_table: tuple[KernelRow, ...],
             events: tuple[Event, ...] = (), recorder: Recorder | None = None,
             capture_time: float | None = None, topology: Topology | None = None) -> Diagnosis:
    """The diagnosis of one node snapshot; ``events`` / ``recorder`` come from a node image's history.

    ``kernel_table`` is the caller's (``agent.readers.kernel_table.load_kernel_table``, read once at
    start): this function reads no file, so it has no table of its own to fall back to.
    """
    topo = topology or build_topology(snap, exp)
    findings: tuple[Finding, ...] = run_checks(snap, topo, exp, kernel_table=kernel_table, events=events,
                                               recorder=recorder, capture_time=capture_time)
    node = snap.node or snap.versions.hostname
    return Diagnosis(node=node.strip() if node else None, kernel=snap.versions.kernel,
                     rails=rail_rows(snap, topo), findings=findings, unavailable=snap.unavailable,
                     notes=topo.notes)


def with_unavailable(diag: Diagnosis, extra: tuple[tuple[str, str], ...]) -> Diagnosis:
    """The diagnosis with more "could not read" reasons (history files, for instance)."""
    return replace(diag, unavailable=diag.unavailable + extra) if extra else diag
