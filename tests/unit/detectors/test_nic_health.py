from __future__ import annotations

import pytest

from agent.detectors import nic_health
from agent.detectors.observations import HealthObs
from tests.support.detector_replay import replay

PF = "pci/0000:1a:00.0"


def fw(error: int | None, state: str | None = "healthy", reporter: str = "fw") -> HealthObs:
    return HealthObs(PF, reporter, PF, state, error)


def test_a_new_error_between_two_samples_is_an_event_even_when_recovered() -> None:
    _, events = replay(nic_health.step, nic_health.initial(), [(0, fw(2)), (60, fw(5))])
    (e,) = events
    assert (e.ts, e.code, e.severity, e.subject) == (60, "NicHealthError", "warning", PF)
    assert e.message == f"{PF}: devlink health reporter fw counted 3 new error(s) (now healthy)"
    assert dict(e.evidence) == {"reporter": "fw", "reporter_handle": PF, "rise": 3, "error": 5, "state": "healthy"}


def test_the_first_sample_is_a_baseline_and_a_fall_re_baselines() -> None:
    seq = [(0, fw(7)), (60, fw(7)), (120, fw(0)), (180, fw(1, "error"))]
    _, events = replay(nic_health.step, nic_health.initial(), seq)
    assert [(e.ts, dict(e.evidence)["rise"]) for e in events] == [(180, 1)]
    assert events[0].message.endswith("counted 1 new error(s) (now error)")


def test_a_reporter_without_a_count_is_not_judged() -> None:
    _, events = replay(nic_health.step, nic_health.initial(), [(0, fw(1)), (60, fw(None)), (120, fw(2))])
    assert [e.ts for e in events] == [120]
    (e,) = replay(nic_health.step, nic_health.initial(), [(0, fw(1, None)), (60, fw(2, None))])[1]
    assert e.message.endswith("(now state unknown)")


def test_reporters_are_counted_apart() -> None:
    seq = [(0, fw(1)), (10, fw(4, reporter="fw_fatal")), (20, fw(1)), (30, fw(5, reporter="fw_fatal"))]
    _, events = replay(nic_health.step, nic_health.initial(), seq)
    assert [(e.ts, dict(e.evidence)["reporter"]) for e in events] == [(30, "fw_fatal")]


@pytest.mark.parametrize("t0", [0, 1_764_000_000])  # from the epoch, and on a real clock
def test_a_reporter_unseen_for_an_hour_is_forgotten(t0: float) -> None:
    state, events = replay(nic_health.step, nic_health.initial(), [(t0, fw(1)), (t0 + 3599, fw(0, reporter="tx")),
                                                                   (t0 + 3599, fw(9))])
    assert set(state.seen) == {(PF, "fw"), (PF, "tx")}
    assert [e.ts for e in events] == [t0 + 3599]
    state, events = replay(nic_health.step, nic_health.initial(), [(t0, fw(1)), (t0 + 3600, fw(0, reporter="tx")),
                                                                   (t0 + 3660, fw(9))])
    assert events == []
