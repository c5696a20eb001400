"""MtuMismatch, the rising form: rx_oversize_pkts_phy or rx_out_of_range_len_phy rose between two samples
of a rail (the peer sends larger frames); one event per episode; a reset re-baselines; history alone is
quiet."""

from __future__ import annotations

from agent.detectors import engine
from agent.detectors.mtu_oversize import QUIET_S, initial, step
from agent.detectors.observations import CountersObs


def obs(oversize: int | None, out_of_range: int | None = 0, subject: str = "net_rail1") -> CountersObs:
    c = {k: v for k, v in (("rx_oversize_pkts_phy", oversize), ("rx_out_of_range_len_phy", out_of_range))
         if v is not None}
    return CountersObs("net_rail1", c, subject=subject)


def run(seq):
    st, out = initial(), []
    for t, o in seq:
        st, evs = step(st, o, t)
        out.extend((e.ts, e.code, e.severity, e.subject, dict(e.evidence)["deltas"]) for e in evs)
    return out


def test_history_alone_is_quiet_and_a_rise_fires_once_per_episode():
    assert run([(0.0, obs(500)), (1.0, obs(500))]) == []  # 500 since the driver loaded: history
    got = run([(0.0, obs(500)), (1.0, obs(520)), (2.0, obs(530)), (2.0 + QUIET_S + 1, obs(531, 4))])
    assert got == [(1.0, "MtuMismatch", "warning", "net_rail1", {"rx_oversize_pkts_phy": 20}),
                   (2.0 + QUIET_S + 1, "MtuMismatch", "warning", "net_rail1",
                    {"rx_oversize_pkts_phy": 1, "rx_out_of_range_len_phy": 4})]


def test_a_reset_re_baselines_and_a_missing_counter_is_not_judged():
    assert run([(0.0, obs(500)), (1.0, obs(3)), (2.0, obs(3))]) == []
    assert run([(0.0, obs(None, None)), (1.0, obs(None, None))]) == []


def test_the_engine_runs_it_on_every_counters_sample():
    st = engine.initial()
    st, ev0 = engine.step(st, obs(10), 0.0)
    st, ev1 = engine.step(st, obs(12), 1.0)
    assert ev0 == () and [(e.code, e.subject) for e in ev1] == [("MtuMismatch", "net_rail1")]
