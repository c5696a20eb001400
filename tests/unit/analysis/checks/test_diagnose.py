"""The doctor document around the checks: ``rails[]`` by the value rules, the node line, the pipeline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.analysis import pipeline
from agent.analysis.checks import merge
from agent.analysis.checks.versions import KernelRow
from agent.analysis.diagnose import diagnose, rail_rows, with_unavailable
from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.findings import Finding, RailRow
from agent.model import Event
from agent.readers.history import History
from tests.support import nodes

EXP = Expectations()


def rows(snap):
    return diagnose(snap, EXP, kernel_table=()).rails


def test_healthy_rail_row_has_every_column():
    snap = nodes.replace_link(nodes.node(), "net_rail0", speed_mbps=400000)
    assert rows(snap)[0] == RailRow(
        rail=0, plane=None, netdev="net_rail0", rdma="rdma_rail0", pci=nodes.PCIS[0], oper="up",
        speed_mbps=400000, mtu=9000, rdma_state="ACTIVE", driver="mlx5_core", driver_version="25.10-1.7.1",
        firmware="28.42.1000", psid="MT_0000000838", eswitch_mode="switchdev", esw_multiport=False,
        numvfs=1, representors=1)


@pytest.mark.parametrize(("sysfs", "want"), [(-1, None), (0, None), (None, None), (1, 1), (200000, 200000)])
def test_speed_is_null_unless_sysfs_gives_a_positive_rate(sysfs, want):
    snap = nodes.replace_link(nodes.node(), "net_rail0", speed_mbps=sysfs)
    assert rows(snap)[0].speed_mbps == want


def test_firmware_is_the_drivers_and_the_rdma_devices_only_without_ethtool():
    snap = nodes.node()
    snap = replace(snap, rdma_devices=tuple(replace(d, fw_ver="28.39.2048 (MT_0000000838)")
                                            for d in snap.rdma_devices))
    assert rows(snap)[0].firmware == "28.42.1000"
    no_ethtool = replace(snap, drivers=())
    row = rows(no_ethtool)[0]
    # The version token only: the PSID in parentheses is not part of the firmware version.
    assert (row.firmware, row.driver, row.driver_version, row.psid) == ("28.39.2048", None, None, None)


def test_rdma_name_from_the_rdma_link_without_sysfs_devices():
    snap = replace(nodes.node(), rdma_devices=())
    assert [r.rdma for r in rows(snap)] == ["rdma_rail0", "rdma_rail1"]


def test_rdma_name_from_the_sysfs_device_without_rdma_links():
    snap = nodes.node()
    snap = replace(snap, rdma_links=(), rdma_devices=tuple(replace(d, ports=()) for d in snap.rdma_devices))
    row = rows(snap)[0]
    assert (row.rdma, row.rdma_state) == ("rdma_rail0", None)


def test_multiplane_rows_keep_their_plane_with_and_without_a_netdev():
    snap = nodes.replace_link(nodes.node(), "net_rail0", ifname="eth2")
    snap = nodes.drop_link(snap, "net_rail1")
    snap = replace(snap, rules=(
        nodes.RailRule(nodes.PCIS[0], "net_rail0_plane0", "net", nodes.NET_RULES, 4),
        nodes.RailRule(nodes.PCIS[1], "net_rail0_plane1", "net", nodes.NET_RULES, 5),
    ))
    assert [(r.rail, r.plane, r.netdev) for r in rows(snap)] == [(0, 0, "eth2"), (0, 1, None)]


def test_rows_sort_by_rail_then_plane_a_rail_without_plane_first():
    snap = nodes.node(rails=4)
    topo = build_topology(snap, EXP)
    r0, r1, r2, r3 = topo.rails
    shuffled = (replace(r3, rail=1, plane=None), replace(r0, rail=0, plane=1), replace(r1, rail=0, plane=None),
                replace(r2, rail=0, plane=0))
    got = rail_rows(snap, replace(topo, rails=shuffled))
    assert [(r.rail, r.plane) for r in got] == [(0, None), (0, 0), (0, 1), (1, None)]


def test_a_rail_the_topology_has_no_pf_for_reads_numvfs_from_sysfs():
    # rail_rows takes any topology: without a PF the PF columns are null, but sysfs still gives the
    # function's sriov_numvfs.
    snap = nodes.set_numvfs(nodes.node(), nodes.PCIS[0], 4)
    topo = build_topology(snap, EXP)
    no_pf = replace(topo, rails=tuple(replace(r, pf=None) for r in topo.rails))
    row = rail_rows(snap, no_pf)[0]
    assert (row.numvfs, row.eswitch_mode, row.esw_multiport, row.representors) == (4, None, None, None)
    gone = replace(no_pf, rails=tuple(replace(r, netdev=None) for r in no_pf.rails))
    assert rail_rows(snap, gone)[0].numvfs == 4
    no_sysfs = replace(snap, pci=())
    assert rail_rows(no_sysfs, gone)[0].numvfs is None


def test_numvfs_comes_from_the_pf():
    snap = nodes.set_numvfs(nodes.node(), nodes.PCIS[1], 0)
    assert [r.numvfs for r in rows(snap)] == [1, 0]


def test_node_is_the_snapshot_node_else_the_hostname_stripped():
    snap = nodes.node(kernel="6.8.0-60-generic")
    diag = diagnose(snap, EXP, kernel_table=())
    assert (diag.node, diag.kernel) == ("gpu-node-017", "6.8.0-60-generic")
    by_host = replace(snap, node=None, versions=replace(snap.versions, hostname=" gpu-node-018\n"))
    assert diagnose(by_host, EXP, kernel_table=()).node == "gpu-node-018"
    nameless = replace(by_host, versions=replace(by_host.versions, hostname=None))
    assert diagnose(nameless, EXP, kernel_table=()).node is None


def test_the_shipped_kernel_table_is_what_judges_by_default():
    # diagnose reads no file: the callers pass the shipped table (load_kernel_table() without --kernel-table)
    from agent.readers.kernel_table import load_kernel_table

    snap = nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-101-generic")
    codes = [(f.code, f.severity) for f in diagnose(snap, EXP, kernel_table=load_kernel_table()).findings]
    assert codes == [("DriverKernelUnvalidated", "warning")]
    assert diagnose(snap, EXP, kernel_table=()).findings == ()


def test_with_unavailable_adds_reasons():
    diag = diagnose(nodes.node(), EXP, kernel_table=())
    more = with_unavailable(diag, (("history/events.json", "not JSON"),))
    assert more.unavailable == (*diag.unavailable, ("history/events.json", "not JSON"))
    assert with_unavailable(diag, ()) == diag


def test_merge_keeps_the_first_of_equally_severe_findings():
    first = Finding("PfcStorm", "critical", "net_rail0", "from the event")
    second = Finding("PfcStorm", "critical", "net_rail0", "from the snapshot")
    assert [f.message for f in merge([first, second])] == ["from the event"]
    info = Finding("PfcStorm", "info", "net_rail0", "since the driver loaded")
    assert [f.message for f in merge([info, second])] == ["from the snapshot"]


# The pipeline: what doctor, metrics --from and the daemon share.

EVENT = Event(nodes.TAKEN_AT - 100, "LinkFlapping", "warning", "net_rail0", "4 carrier losses in 300 s")


def test_pipeline_returns_the_snapshot_its_topology_and_diagnosis():
    snap = nodes.node()
    out = pipeline.run(snap, EXP, ())
    assert out.snapshot is snap
    assert out.topology == build_topology(snap, EXP)
    assert out.diagnosis == diagnose(snap, EXP, kernel_table=())


def test_pipeline_ends_the_event_window_at_the_history_capture_time():
    hist = History(events=(EVENT,), capture_time=nodes.TAKEN_AT)
    out = pipeline.run(nodes.node(), EXP, (), history=hist)
    (f,) = out.diagnosis.findings
    assert (f.code, f.subject) == ("LinkFlapping", "net_rail0")
    assert "100 s before the capture" in f.message


def test_pipeline_capture_time_overrides_the_historys():
    hist = History(events=(EVENT,), capture_time=nodes.TAKEN_AT)
    later = nodes.TAKEN_AT + EXP.event_window_s + 1
    assert pipeline.run(nodes.node(), EXP, (), history=hist, capture_time=later).diagnosis.findings == ()
    out = pipeline.run(nodes.node(), EXP, (), history=hist, capture_time=nodes.TAKEN_AT + 50)
    assert "150 s before the capture" in out.diagnosis.findings[0].message


def test_pipeline_uses_the_kernel_table_it_is_given():
    snap = nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-101-generic")
    assert pipeline.run(snap, EXP, ()).diagnosis.findings == ()
    wider = (KernelRow("26.01", "generic", "6.8.0", "6.8.0-100", "test"),)
    assert [f.code for f in pipeline.run(snap, EXP, wider).diagnosis.findings] == ["DriverKernelUnvalidated"]


def test_pipeline_reports_what_the_history_could_not_read():
    hist = History(unavailable=(("history/recorder.jsonl", "line 3: not JSON"),))
    out = pipeline.run(nodes.node(), EXP, (), history=hist)
    assert out.diagnosis.unavailable[-1] == ("history/recorder.jsonl", "line 3: not JSON")
