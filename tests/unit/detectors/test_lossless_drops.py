from __future__ import annotations

import pytest

from agent.config import Thresholds
from agent.detectors import lossless_drops
from agent.detectors.observations import CountersObs
from tests.support.detector_replay import replay

BASE = {"rx_prio3_discards": 48211, "rx_prio3_buf_discard": 0, "rx_prio3_cong_discard": 0,
        "rx_prio0_discards": 0, "rx_discards_phy": 48211}


def s(**over: int) -> CountersObs:
    return CountersObs("net_rail1", {**BASE, **over}, subject="net_rail1")


CASES = {
    # name: (observations, times of LosslessDrops events)
    "cumulative discards that do not rise": ([(0, s()), (1, s()), (2, s())], []),
    "prio-3 discards rose": ([(0, s()), (1, s(rx_prio3_discards=48212))], [1]),
    "buffer discards rose": ([(0, s()), (1, s(rx_prio3_buf_discard=7))], [1]),
    "congestion discards rose": ([(0, s()), (1, s(rx_prio3_cong_discard=1))], [1]),
    "a lossy priority's discards are not lossless drops": ([(0, s()), (1, s(rx_prio0_discards=900))], []),
    "port-level discards alone are evidence only": ([(0, s()), (1, s(rx_discards_phy=99999))], []),
    "counter reset never fires": ([(0, s()), (1, s(rx_prio3_discards=0)), (2, s(rx_prio3_discards=0))], []),
    "rising on: one event per episode": (
        [(t, s(rx_prio3_discards=48211 + t)) for t in range(0, 50)], [1]),
    "re-arms after a quiet minute": (
        [(0, s()), (1, s(rx_prio3_discards=48300)), (100, s(rx_prio3_discards=48300)),
         (101, s(rx_prio3_discards=48301))], [1, 101]),
    "a counter that appears is a baseline": (
        [(0, CountersObs("net_rail1", {})), (1, s())], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_lossless_drops_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(lossless_drops.step, lossless_drops.initial(), seq)
    assert [e.ts for e in events] == fires
    for e in events:
        assert (e.code, e.severity, e.subject) == ("LosslessDrops", "critical", "net_rail1")
        assert all(v > 0 for v in dict(e.evidence)["deltas"].values())


def test_other_lossless_prio() -> None:
    seq = [(0, s()), (1, s(rx_prio0_discards=5))]
    _, events = replay(lossless_drops.step, lossless_drops.initial(Thresholds(lossless_prio=0)), seq)
    assert [dict(e.evidence)["deltas"] for e in events] == [{"rx_prio0_discards": 5}]


def test_drops_event_names_each_rising_counter() -> None:
    _, events = replay(lossless_drops.step, lossless_drops.initial(),
                       [(0, s()), (1, s(rx_prio3_discards=48212, rx_prio3_cong_discard=3, rx_discards_phy=48300))])
    (e,) = events
    assert e.message == "net_rail1: drops on lossless prio 3: rx_prio3_discards +1, rx_prio3_cong_discard +3"
    assert dict(e.evidence) == {"netdev": "net_rail1", "prio": 3,
                                "deltas": {"rx_prio3_discards": 1, "rx_prio3_cong_discard": 3}, "rx_discards_phy": 48300}


def test_drops_re_arm_exactly_after_the_quiet_time() -> None:
    th = Thresholds(drops_quiet_s=60)
    seq = [(0, s()), (1, s(rx_prio3_discards=48212)), (61, s(rx_prio3_discards=48213))]
    assert [e.ts for e in replay(lossless_drops.step, lossless_drops.initial(th), seq)[1]] == [1, 61]
    seq = [(0, s()), (1, s(rx_prio3_discards=48212)), (60, s(rx_prio3_discards=48213))]
    assert [e.ts for e in replay(lossless_drops.step, lossless_drops.initial(th), seq)[1]] == [1]


@pytest.mark.parametrize("t0", [0, 1_764_000_000])  # from the epoch, and on a real clock
def test_a_rail_unseen_for_an_hour_is_forgotten_and_rails_are_apart(t0: float) -> None:
    other = CountersObs("net_rail0", {"rx_prio3_discards": 5}, subject="net_rail0")
    state, _ = replay(lossless_drops.step, lossless_drops.initial(), [(t0, s()), (t0 + 3599, other)])
    assert set(state.ports) == {"net_rail0", "net_rail1"}
    state, events = replay(lossless_drops.step, lossless_drops.initial(), [(t0, s()), (t0 + 3600, other)])
    assert set(state.ports) == {"net_rail0"} and events == []
