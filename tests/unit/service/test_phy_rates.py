"""LinkDegrading and the rising forms judged live: the daemon's flight recorder gives the first and last
PHY sample of each rail within --ber-window to the checks (docs/design.md §4 "Degradation needs rates")."""

from __future__ import annotations

from pathlib import Path

from agent.capture.recorder import FlightRecorder, incident_counters
from agent.config import AgentSettings, Expectations
from agent.host.recorded import RecordedHost
from agent.readers.snapshot import take_snapshot
from agent.service.daemon import Agent

IMAGE = Path(__file__).resolve().parents[2] / "images" / "degradation-sources-healthy"
LINE = 400_000_000_000  # bits a second at 400 Gb/s


def _agent(window_s: float = 300.0) -> Agent:
    exp = Expectations(ber_window_s=window_s)
    return Agent(AgentSettings(watch_links=False, recorder_window_s=900, expectations=exp),
                 host_factory=lambda: None)  # type: ignore[arg-type,return-value]


def _feed(agent: Agent, ratio: float, seconds: int, symbol_errors: int = 0) -> None:
    assert agent.recorder is not None
    for t in range(seconds + 1):
        for nd in ("net_rail0", "net_rail1"):
            bad = nd == "net_rail1"
            agent.recorder.add(1000.0 + t, nd, {
                "rx_bits_phy": LINE * t, "rx_corrected_bits_phy": int(LINE * t * ratio) if bad else 0,
                "rx_err_lane_0_phy": 10 * t, "rx_err_lane_1_phy": int(LINE * t * ratio) if bad else 10 * t,
                "rx_err_lane_2_phy": 10 * t, "rx_err_lane_3_phy": 10 * t,
                "rx_pcs_symbol_err_phy": symbol_errors if bad and t == seconds else 0})


def _codes(agent: Agent) -> list[tuple[str, str, str]]:
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    out = agent.analysis.work(snap, ())
    return [(f.code, f.severity, f.subject) for f in out.diagnosis.findings]


def test_a_rising_corrected_bit_ratio_is_a_warning_with_its_worst_lane() -> None:
    agent = _agent()
    _feed(agent, 5e-5, 120)  # above --ber-warning (1e-5), below the FEC's 2.4e-4 limit
    assert _codes(agent) == [("LinkDegrading", "warning", "net_rail1")]
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    f = agent.analysis.work(snap, ()).diagnosis.findings[0]
    # lane 1 carries the corrected bits, the other lanes 10 a second each
    assert f.evidence["worst_lane"] == 1 and f.evidence["worst_lane_to_best"] > 1000
    assert f.evidence["worst_lane_share"] > 0.99
    assert f.evidence["window_s"] == 120.0


def test_the_two_tiers_live_warning_below_the_fec_limit_critical_at_it() -> None:
    """docs/design.md §4: a warning well below the RS(544,514) FEC's limit, critical at / above it (2.4e-4)."""
    for ratio, want in ((5e-6, []), (2e-5, [("LinkDegrading", "warning", "net_rail1")]),
                        (2.4e-4, [("LinkDegrading", "critical", "net_rail1")]),
                        (5e-4, [("LinkDegrading", "critical", "net_rail1")])):
        agent = _agent()
        _feed(agent, ratio, 120)
        assert _codes(agent) == want, ratio
    # the agent's --ber-warning / --ber-critical are the edges
    agent = Agent(AgentSettings(watch_links=False, recorder_window_s=900,
                                expectations=Expectations(ber_warning=1e-4, ber_critical=1e-3)),
                  host_factory=lambda: None)  # type: ignore[arg-type,return-value]
    _feed(agent, 5e-4, 120)
    assert _codes(agent) == [("LinkDegrading", "warning", "net_rail1")]


def test_below_the_threshold_or_too_few_bits_is_quiet() -> None:
    agent = _agent()
    _feed(agent, 5e-6, 120)
    assert _codes(agent) == []
    agent = _agent()
    _feed(agent, 5e-4, 1)  # 4e11 bits: too few to judge
    assert _codes(agent) == []


def test_symbol_errors_within_the_window_are_critical() -> None:
    agent = _agent()
    _feed(agent, 0.0, 30, symbol_errors=3)
    assert _codes(agent) == [("LinkDegrading", "critical", "net_rail1")]


def test_the_window_is_ber_window() -> None:
    agent = _agent(window_s=10.0)
    _feed(agent, 5e-5, 120)
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    f = agent.analysis.work(snap, ()).diagnosis.findings[0]
    assert f.evidence["window_s"] == 10.0


def test_edges_are_the_first_and_last_sample_in_the_window_of_the_asked_keys() -> None:
    rec = FlightRecorder(incident_counters(), window_s=900)
    for t in range(100):
        rec.add(float(t), "r0", {"rx_bits_phy": t, "tx_prio3_pause": t})
    assert rec.edges(30.0, ("rx_bits_phy",)) == {"r0": [(69.0, {"rx_bits_phy": 69}), (99.0, {"rx_bits_phy": 99})]}
    rec.add(0.0, "r1", {"rx_bits_phy": 1})
    assert "r1" not in rec.edges(30.0, ("rx_bits_phy",))  # one sample: no rate


def test_a_rate_finding_is_one_event_per_episode() -> None:
    agent = _agent()
    _feed(agent, 5e-5, 120)
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    agent._apply_analysis(agent.analysis.work(snap, ()))
    evs = [(e.code, e.severity, e.subject) for e in agent.events.recent(0.0)]
    assert evs == [("LinkDegrading", "warning", "net_rail1")]
    # the next analysis sees the event read back and the rate finding still there: no second event
    agent._apply_analysis(agent.analysis.work(snap, tuple(agent.events.recent(0.0))))
    assert len(agent.events.recent(0.0)) == 1
    assert agent.events.counts() == {"LinkDegrading": 1}


def test_recorded_counter_sequences_through_the_sampler() -> None:
    """The counters source's parts, as the scheduler hands them to the daemon one a second: the sampler
    files them in the flight recorder, and the next analysis judges the window."""
    from dataclasses import replace

    from agent.model import EthtoolStats
    from agent.readers.sources import Part

    agent = _agent()
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    agent.snapshot = snap
    agent._apply_analysis(agent.analysis.work(snap, ()))  # the topology the sampler keys rails by
    base = {st.netdev: st.as_dict() for st in snap.ethtool}
    for t in range(0, 121, 1):
        stats = []
        for nd, c in base.items():
            c = dict(c)
            c["rx_bits_phy"] = c.get("rx_bits_phy", 0) + LINE * t
            if nd == "net_rail0":
                c["rx_corrected_bits_phy"] += LINE * t // 50_000  # 2e-5, between 1e-5 and 2.4e-4: the warning tier
                c["rx_err_lane_3_phy"] += LINE * t // 50_000
            stats.append(EthtoolStats(nd, tuple(sorted(c.items()))))
        agent._apply_counters(Part("counters", taken_at=5000.0 + t, fields={"ethtool": tuple(stats)}))
    out = agent.analysis.work(replace(agent.snapshot, taken_at=5120.0), ())  # type: ignore[arg-type]
    (f,) = out.diagnosis.findings
    assert (f.code, f.severity, f.subject) == ("LinkDegrading", "warning", "net_rail0")
    assert f.evidence["worst_lane"] == 3 and f.evidence["corrected_bit_ratio"] == 2e-5


def test_aer_errors_that_rise_between_two_samples_are_a_warning() -> None:
    """A rail PF's correctable AER total is info from one snapshot (docs/design.md §4); the pcie source's reads
    (every minute) ride on each rail's recorder line, so a rise within --ber-window is a warning."""
    from dataclasses import replace

    from agent.model import EthtoolStats
    from agent.readers.sources import Part

    agent = _agent()
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    agent.snapshot = snap
    agent._apply_analysis(agent.analysis.work(snap, ()))
    rail0 = next(link for link in snap.pcie if link.bdf == "0000:0c:00.0")
    stats = tuple(EthtoolStats(st.netdev, st.counters) for st in snap.ethtool)
    for t in range(0, 121):
        if t % 60 == 0:  # the pcie source's interval: 3, then 5, then 5 correctable errors
            cor = {0: 3, 60: 5, 120: 5}[t]
            pcie = tuple(replace(link, aer_correctable=cor) if link.bdf == rail0.bdf else link
                         for link in snap.pcie)
            agent.sampling.parts["pcie"] = Part("pcie", taken_at=5000.0 + t, fields={"pcie": pcie})
            agent.snapshot = replace(agent.snapshot, pcie=pcie)  # type: ignore[arg-type]
        agent._apply_counters(Part("counters", taken_at=5000.0 + t, fields={"ethtool": stats}))
    out = agent.analysis.work(agent.snapshot, ())  # type: ignore[arg-type]
    # the rising form (warning) takes the place of the one-snapshot info for the same PF
    (f,) = out.diagnosis.findings
    assert (f.code, f.severity, f.subject) == ("PcieErrors", "warning", "pci/0000:0c:00.0")
    assert f.evidence["increase"] == {"aer_dev_correctable": 2} and f.evidence["netdev"] == "net_rail0"
    # the recorder keeps the totals under their sysfs names: a bundle's recorder.jsonl carries them
    assert agent.recorder is not None
    assert agent.recorder.edges(900.0, ("aer_dev_correctable",))["net_rail0"][-1][1] == {"aer_dev_correctable": 5}


def test_aer_totals_that_do_not_move_are_not_a_rate() -> None:
    from dataclasses import replace

    from agent.model import EthtoolStats
    from agent.readers.sources import Part

    agent = _agent()
    with RecordedHost(str(IMAGE)) as host:
        snap = take_snapshot(host)
    pcie = tuple(replace(link, aer_correctable=7) for link in snap.pcie)
    agent.snapshot = replace(snap, pcie=pcie)
    agent._apply_analysis(agent.analysis.work(agent.snapshot, ()))
    stats = tuple(EthtoolStats(st.netdev, st.counters) for st in snap.ethtool)
    for t in range(0, 121):
        agent._apply_counters(Part("counters", taken_at=5000.0 + t, fields={"ethtool": stats}))
    out = agent.analysis.work(agent.snapshot, ())  # type: ignore[arg-type]
    assert {(f.code, f.severity) for f in out.diagnosis.findings} == {("PcieErrors", "info")}
