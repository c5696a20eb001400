"""The custom collector on a synthetic big node and on hand-made samples (docs/design.md §5)."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.findings import Diagnosis, Finding
from agent.metrics.exporter import NodeMetrics
from agent.metrics.exposition import render
from agent.metrics.state import HungSource, MetricsState, SourceStatus
from agent.model import EthtoolStats
from tests.support.metrics_expo import names, series, state_for, value
from tests.support.metrics_synth import (
    HEALTHY_ETHTOOL,
    ethtool_fixture,
    rail_link,
    synthetic_snapshot,
)

BUDGET = 1500


@pytest.fixture(scope="module")
def big() -> MetricsState:
    return state_for(synthetic_snapshot(8, 127))


@pytest.fixture(scope="module")
def big_text(big: MetricsState) -> bytes:
    return render(big, clock=lambda: big.snapshot.taken_at)


# -- cardinality budget ---------------------------------------------------------------------------


def test_default_series_for_8_rails_x_127_vfs_stay_within_budget(big_text: bytes) -> None:
    got = series(big_text)
    assert 0 < len(got) <= BUDGET, len(got)
    # No series is per representor by default: 1,016 representors must not show up one by one.
    assert not [s for s in got if s[1].get("device", "").startswith("net_rail") and "_" in s[1]["device"][9:]]
    assert not any("representor_" in n for n, _, _ in got)


def test_include_filter_adds_exactly_the_matched_representors(big: MetricsState, big_text: bytes) -> None:
    base = set(_keys(series(big_text)))
    text = render(big, clock=lambda: big.snapshot.taken_at, representor_include=r"^net_rail(0|3)_1\d$")
    got = series(text)
    added = [s for s, k in zip(got, _keys(got), strict=True) if k not in base]
    want = {f"net_rail{r}_{v}" for r in (0, 3) for v in range(10, 20)}
    assert {lab["device"] for _, lab, _ in added} == want
    # Each matched representor adds one series per per-representor family, nothing else changes.
    per_rep = {n for n, _, _ in added}
    assert per_rep == {"railscope_representor_up", "railscope_representor_stale"}
    assert len(added) == len(want) * len(per_rep)
    assert len(got) == len(base) + len(added)
    assert value(text, "railscope_representor_up", device="net_rail3_15", pci="0000:4a:00.0") == 1


def _keys(samples: list[tuple[str, dict[str, str], float]]) -> list[tuple]:
    return [(n, tuple(sorted(lab.items())), v) for n, lab, v in samples]


def test_no_node_or_cluster_label(big_text: bytes) -> None:
    for _, lab, _ in series(big_text):
        assert "node" not in lab and "cluster" not in lab


def test_representor_traffic_only_when_its_statistics_were_read() -> None:
    snap = synthetic_snapshot(1, 3)
    stats = (("rx_bytes", 11), ("tx_bytes", 22), ("rx_packets", 1), ("tx_packets", 2))
    links = tuple(dataclasses.replace(lk, stats64=stats) if lk.ifname == "net_rail0_1" else lk for lk in snap.links)
    st = state_for(dataclasses.replace(snap, links=links))
    assert "railscope_representor_bytes_total" not in names(render(st, clock=lambda: 0.0))
    text = render(st, clock=lambda: 0.0, representor_include="_[12]$")
    assert value(text, "railscope_representor_bytes_total", device="net_rail0_1", direction="tx") == 22
    assert value(text, "railscope_representor_packets_total", device="net_rail0_1", direction="rx") == 1
    assert {lab["device"] for n, lab, _ in series(text) if n == "railscope_representor_bytes_total"} == \
        {"net_rail0_1"}


# -- fresh families: nothing stale survives a sample ----------------------------------------------


def test_representor_removed_between_scrapes_leaves_no_series() -> None:
    current: list[MetricsState] = [state_for(synthetic_snapshot(2, 4))]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeMetrics(lambda: current[0], clock=lambda: 0.0, representor_include="."))
    first = generate_latest(registry)
    assert 'device="net_rail1_2"' in first.decode()
    assert value(first, "railscope_representors", pci="0000:2a:00.0") == 4

    current[0] = state_for(synthetic_snapshot(2, 4, drop_reps=frozenset({(1, 2)})))
    second = generate_latest(registry)
    assert "net_rail1_2" not in second.decode()
    assert value(second, "railscope_representors", pci="0000:2a:00.0") == 3
    assert value(second, "railscope_representors", pci="0000:1a:00.0") == 4


def test_stale_and_down_representors_are_per_pf_aggregates() -> None:
    snap = synthetic_snapshot(2, 6, numvfs=4)
    links = tuple(dataclasses.replace(lk, operstate="DOWN", carrier=0) if lk.ifname == "net_rail0_1" else lk
                  for lk in snap.links)
    text = render(state_for(dataclasses.replace(snap, links=links)), clock=lambda: 0.0)
    assert value(text, "railscope_representors", pci="0000:1a:00.0", device="net_rail0") == 6
    assert value(text, "railscope_representors_stale", pci="0000:1a:00.0") == 2  # VFs 4 and 5
    assert value(text, "railscope_representors_down", pci="0000:1a:00.0") == 1
    assert value(text, "railscope_representors_down", pci="0000:2a:00.0") == 0
    assert value(text, "railscope_sriov_vfs", pci="0000:1a:00.0") == 4
    assert value(text, "railscope_sriov_vfs_max", pci="0000:1a:00.0") == 127


# -- rails, PFC, RDMA -----------------------------------------------------------------------------


def test_rail_link_and_statistics(big_text: bytes) -> None:
    r = {"rail": "2", "plane": "", "device": "net_rail2"}
    assert value(big_text, "railscope_rail_up", **r) == 1
    assert value(big_text, "railscope_rail_oper_state", **r) == 6
    assert value(big_text, "railscope_rail_carrier", **r) == 1
    assert value(big_text, "railscope_rail_carrier_changes_total", **r) == 4
    assert value(big_text, "railscope_rail_carrier_down_changes_total", **r) == 2
    assert value(big_text, "railscope_rail_mtu_bytes", **r) == 9000
    assert value(big_text, "railscope_rail_speed_bytes", **r) == 400_000 * 1_000_000 / 8  # Mb/s -> bytes/s
    assert value(big_text, "railscope_rail_bytes_total", direction="rx", **r) == 1002
    assert value(big_text, "railscope_rail_bytes_total", direction="tx", **r) == 2002
    assert value(big_text, "railscope_rail_dropped_total", direction="rx", **r) == 1
    assert value(big_text, "railscope_rail_info", pci="0000:3a:00.0", rdma="rdma_rail2", **r) == 1


def test_pfc_only_for_priorities_whose_counters_exist(big_text: bytes) -> None:
    prios = {lab["prio"] for n, lab, _ in series(big_text) if n.startswith("railscope_pfc_")}
    assert prios == {"3"}
    c = dict(ethtool_fixture(HEALTHY_ETHTOOL))
    r = {"rail": "0", "device": "net_rail0", "prio": "3"}
    assert value(big_text, "railscope_pfc_pause_frames_total", direction="tx", **r) == c["tx_prio3_pause"]
    # The driver counts pause duration in microseconds; the metric is in seconds.
    assert value(big_text, "railscope_pfc_pause_duration_seconds_total", direction="tx", **r) == \
        pytest.approx(c["tx_prio3_pause_duration"] / 1e6)
    assert value(big_text, "railscope_pfc_pause_transitions_total", direction="rx", **r) == \
        c["rx_prio3_pause_transition"]
    assert value(big_text, "railscope_pause_storm_error_events_total", rail="0", device="net_rail0") == 0
    assert value(big_text, "railscope_prio_ecn_marked_packets_total", **r) == c["rx_prio3_marked"]
    assert value(big_text, "railscope_prio_bytes_total", direction="rx", **r) == c["rx_prio3_bytes"]
    assert not {n for n in names(big_text) if "global_pause" in n}


def _one_rail_with(counters: tuple[tuple[str, int], ...]) -> bytes:
    snap = synthetic_snapshot(1, 0)
    snap = dataclasses.replace(snap, ethtool=(EthtoolStats("net_rail0", counters),))
    return render(state_for(snap), clock=lambda: 0.0)


def test_global_pause_node_has_no_pfc_series_but_global_pause_series() -> None:
    text = _one_rail_with(ethtool_fixture("ethtool-S-mlx5-cx4lx-grep-discard-pause.txt"))
    assert not {n for n in names(text) if n.startswith("railscope_pfc_")}
    assert value(text, "railscope_global_pause_frames_total", direction="tx") == 1266552
    assert value(text, "railscope_global_pause_duration_seconds_total", direction="tx") == pytest.approx(555.665182)
    assert {lab["prio"] for n, lab, _ in series(text) if n == "railscope_prio_discards_total"} == \
        {str(p) for p in range(8)}


def test_older_driver_without_discard_counters_exports_no_discards() -> None:
    text = _one_rail_with(ethtool_fixture("ethtool-S-mlx5-grep-prio-older-kernel.txt"))
    assert "railscope_prio_bytes_total" in names(text)
    assert not {n for n in names(text) if n.startswith(("railscope_prio_discards", "railscope_prio_buffer_discards",
                                                        "railscope_prio_congestion", "railscope_pfc_"))}


def test_rdma_counters_for_the_uplink_port_only(big_text: bytes) -> None:
    r = {"rail": "5", "device": "rdma_rail5"}
    assert value(big_text, "railscope_rdma_np_cnp_sent_total", **r) == 880
    assert value(big_text, "railscope_rdma_rp_cnp_handled_total", **r) == 1204
    # port 2 (a representor's) has out_of_sequence 999999; port 1 (the uplink) has 3.
    assert value(big_text, "railscope_rdma_out_of_sequence_total", **r) == 3
    assert value(big_text, "railscope_rdma_local_ack_timeout_err_total", **r) == 2
    assert value(big_text, "railscope_rdma_port_bytes_total", direction="tx", **r) == 8000  # 4-byte words
    assert value(big_text, "railscope_rdma_port_up", **r) == 1
    assert value(big_text, "railscope_rdma_port_state", **r) == 4
    assert len([1 for n, _, _ in series(big_text) if n == "railscope_rdma_port_up"]) == 8


def test_missing_rail_is_down_with_no_link_series() -> None:
    snap = synthetic_snapshot(2, 0)
    snap = dataclasses.replace(snap, links=tuple(lk for lk in snap.links if lk.ifname != "net_rail1"))
    text = render(state_for(snap), clock=lambda: 0.0)
    assert value(text, "railscope_rail_up", rail="1", device="net_rail1") == 0
    assert not [1 for n, lab, _ in series(text) if lab.get("device") == "net_rail1" and n != "railscope_rail_up"
                and n != "railscope_rail_info"]
    assert value(text, "railscope_rail_up", rail="0", device="net_rail0") == 1


def test_rail_down_without_carrier() -> None:
    snap = synthetic_snapshot(1, 0)
    down = dataclasses.replace(rail_link(0, 2), operstate="LOWERLAYERDOWN", carrier=0)
    snap = dataclasses.replace(snap, links=tuple(down if lk.ifname == "net_rail0" else lk for lk in snap.links))
    text = render(state_for(snap), clock=lambda: 0.0)
    assert value(text, "railscope_rail_up", rail="0") == 0
    assert value(text, "railscope_rail_carrier", rail="0") == 0
    assert value(text, "railscope_rail_oper_state", rail="0") == 3
    # mlx5 reports speed -1 without a link; the readers give None: no speed series, never a 0 or -1.
    snap = dataclasses.replace(snap, links=tuple(dataclasses.replace(lk, speed_mbps=None) for lk in snap.links))
    assert "railscope_rail_speed_bytes" not in names(render(state_for(snap), clock=lambda: 0.0))


# -- node facts, findings and the agent's own series ----------------------------------------------


def test_info_families(big_text: bytes) -> None:
    assert value(big_text, "railscope_kernel_info", release="6.8.0-60-generic") == 1
    assert value(big_text, "railscope_driver_info", driver="mlx5_core", version="25.10-1.7.1",
                 srcversion="7A2D9B04C1E55F0A3B4C2D1") == 1
    assert value(big_text, "railscope_firmware_info", rail="1", version="28.43.1014", psid="MT_0000000838") == 1
    assert value(big_text, "railscope_rdma_netns_info", mode="exclusive") == 1
    assert value(big_text, "railscope_devlink_eswitch_info", pci="0000:1a:00.0", mode="switchdev") == 1
    assert value(big_text, "railscope_devlink_param_info", pci="0000:1a:00.0", param="esw_multiport",
                 value="false") == 1
    assert value(big_text, "railscope_devlink_param_info", pci="0000:1a:00.0", param="flow_steering_mode",
                 value="smfs") == 1


def test_findings_meta_hung_events_and_sample_age() -> None:
    snap = synthetic_snapshot(1, 0, taken_at=1000.0)
    diag = Diagnosis(node="n", kernel="k", rails=(), findings=(
        Finding("RepresentorStale", "warning", "pci/0000:1a:00.0", "leak"),
        Finding("PfcStorm", "critical", "net_rail0", "storm"),
    ))
    st = state_for(snap, diagnosis=diag,
                   sources=(SourceStatus("links", True, 0.25), SourceStatus("ethtool", False, 10.0)),
                   hung=(HungSource("ethtool", "net_rail0"),),
                   event_counts={"LinkFlapping": 3}, event_codes=("LinkFlapping", "PfcStorm"))
    text = render(st, clock=lambda: 1012.5)
    assert value(text, "railscope_finding", code="PfcStorm", severity="critical", subject="net_rail0") == 1
    assert value(text, "railscope_finding", code="RepresentorStale", subject="pci/0000:1a:00.0") == 1
    assert value(text, "railscope_scrape_collector_success", source="links") == 1
    assert value(text, "railscope_scrape_collector_success", source="ethtool") == 0
    assert value(text, "railscope_scrape_collector_duration_seconds", source="links") == 0.25
    assert value(text, "railscope_source_hung", source="ethtool", device="net_rail0") == 1
    assert value(text, "railscope_events_total", code="LinkFlapping") == 3
    assert value(text, "railscope_events_total", code="PfcStorm") == 0
    assert value(text, "railscope_sample_age_seconds") == 12.5

    # A finding that clears is gone at the next scrape.
    cleared = dataclasses.replace(st, diagnosis=dataclasses.replace(diag, findings=diag.findings[:1]))
    assert "PfcStorm" not in {lab.get("code") for n, lab, _ in series(render(cleared, clock=lambda: 1012.5))
                              if n == "railscope_finding"}


def test_no_sample_yet_serves_only_the_agent_series() -> None:
    text = render(MetricsState(sources=(SourceStatus("links", False),)), clock=lambda: 5.0)
    assert names(text) == {"railscope_build_info", "railscope_scrape_collector_success",
                           "railscope_scrape_collector_duration_seconds"}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeMetrics(lambda: None))
    assert names(generate_latest(registry)) == {"railscope_build_info"}


# -- naming conformance (docs/design.md §5) ---------------------------------------------------------------

#: Labels that identify a series; anything else is a fact and belongs on an ``_info`` family.
IDENTITY_LABELS = {"device", "rail", "plane", "prio", "direction", "pci", "code", "severity", "subject",
                   "source", "param",
                   "reporter"}  # devlink health: a handful per PF (fw, fw_fatal, tx, rx, vnic)


def test_every_family_follows_the_naming_rules() -> None:
    snap = synthetic_snapshot(2, 3, numvfs=2)
    st = state_for(snap, diagnosis=Diagnosis("n", "k", (), (Finding("RailMissing", "critical", "net_rail3", ""),)),
                   sources=(SourceStatus("links", True, 0.1),), hung=(HungSource("ethtool", "net_rail0"),),
                   event_codes=("LinkFlapping",))
    text = render(st, clock=lambda: snap.taken_at, representor_include=".")
    families = list(text_string_to_metric_families(text.decode()))
    assert len(families) > 50
    for fam in families:
        assert fam.name.startswith("railscope_"), fam.name
        assert fam.documentation, f"{fam.name} has no HELP"
        for s in fam.samples:
            if fam.type == "counter":
                assert s.name.endswith("_total"), s.name
            else:
                assert not s.name.endswith("_total"), s.name
            if s.name.endswith("_info"):
                assert s.value == 1, s.name
            else:
                assert set(s.labels) <= IDENTITY_LABELS, (s.name, set(s.labels) - IDENTITY_LABELS)
            # Base units only: seconds and bytes, never ms / µs / bits.
            assert not any(u in s.name for u in ("_ms", "_us", "_micro", "_milli", "_bits", "_mbps")), s.name


def test_a_rail_listed_twice_does_not_duplicate_series() -> None:
    st = state_for(synthetic_snapshot(2, 1))
    topo = st.topology
    twice = dataclasses.replace(st, topology=dataclasses.replace(topo, rails=(*topo.rails, topo.rails[0])))
    got = series(render(twice, clock=lambda: 0.0))
    keys = [(n, tuple(sorted(lab.items()))) for n, lab, _ in got]
    assert len(keys) == len(set(keys))
    assert got == series(render(st, clock=lambda: 0.0))


def test_every_metrics_subject_module_is_found_and_rendered_in_its_order() -> None:
    """The exporter names no subject: every module of agent/metrics that declares SUBJECT is in the
    loop, in order, and the plumbing modules are not."""
    import importlib
    import pkgutil

    import agent.metrics
    from agent.metrics.exporter import SUBJECTS
    from agent.metrics.families import Subject, discover

    declared = []
    for m in pkgutil.iter_modules(agent.metrics.__path__):
        mod = importlib.import_module(f"agent.metrics.{m.name}")
        if isinstance(getattr(mod, "SUBJECT", None), Subject):
            declared.append(mod.SUBJECT)
    assert set(SUBJECTS) == set(declared) and len(SUBJECTS) == len(declared)
    assert [s.order for s in SUBJECTS] == sorted(s.order for s in SUBJECTS)
    assert discover() == SUBJECTS


def test_two_subjects_of_one_order_are_refused(tmp_path) -> None:
    import sys

    import pytest

    pkg = tmp_path / "fakemetrics"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("a", "b"):
        (pkg / f"{name}.py").write_text("from agent.metrics.families import Subject\n"
                                         "SUBJECT = Subject(5, lambda fams, scrape: None)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        from agent.metrics.families import discover

        with pytest.raises(RuntimeError, match="share one order"):
            discover(str(pkg), "fakemetrics")
    finally:
        sys.path.remove(str(tmp_path))
        for m in [m for m in sys.modules if m.startswith("fakemetrics")]:
            del sys.modules[m]
