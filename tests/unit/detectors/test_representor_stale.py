from __future__ import annotations

import pytest

from agent.config import Thresholds
from agent.detectors import representor_stale
from agent.detectors.observations import RepresentorObs
from tests.support.detector_replay import replay

PF = "pci/0000:1a:00.0"


def reps(numvfs: int | None, *vfs: int) -> RepresentorObs:
    return RepresentorObs(PF, numvfs, tuple(vfs), tuple(f"net_rail0_{i}" for i in vfs))


CASES = {
    # name: (observations, (time, stale VFs reported) per event)
    "healthy": ([(0, reps(2, 0, 1)), (120, reps(2, 0, 1))], []),
    "VFs being removed: representors follow within the grace": (
        [(0, reps(2, 0, 1)), (10, reps(0, 0, 1)), (30, reps(0, 1)), (50, reps(0))], []),
    "a representor left behind past the grace": (
        [(0, reps(2, 0, 1)), (10, reps(1, 0, 1)), (40, reps(1, 0, 1)), (70, reps(1, 0, 1)),
         (130, reps(1, 0, 1))], [(70, [1])]),
    "numvfs 0 with representors": ([(0, reps(0, 0, 1)), (60, reps(0, 0, 1))], [(60, [0, 1])]),
    "the leak grows: another event": (
        [(0, reps(1, 0, 1)), (60, reps(1, 0, 1)), (90, reps(1, 0, 1, 2)), (150, reps(1, 0, 1, 2)),
         (210, reps(1, 0, 1, 2))], [(60, [1]), (150, [1, 2])]),
    "re-arms once the PF is clean": (
        [(0, reps(0, 0)), (60, reps(0, 0)), (70, reps(0)), (80, reps(0, 0)), (140, reps(0, 0))],
        [(60, [0]), (140, [0])]),
    "numvfs unreadable: nothing judged": ([(0, reps(None, 0, 1)), (300, reps(None, 0, 1))], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_representor_stale_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(representor_stale.step, representor_stale.initial(), seq)
    assert [(e.ts, dict(e.evidence)["stale_vfs"]) for e in events] == fires
    for e in events:
        assert (e.code, e.severity, e.subject) == ("RepresentorStale", "warning", PF)
        ev = dict(e.evidence)
        assert ev["representors"] == [f"net_rail0_{i}" for i in ev["stale_vfs"]]


def test_grace_is_configurable() -> None:
    th = Thresholds(representor_grace_s=0)
    _, events = replay(representor_stale.step, representor_stale.initial(th), [(0, reps(0, 3))])
    assert [e.ts for e in events] == [0]


def test_pfs_are_independent() -> None:
    other = RepresentorObs("pci/0000:1a:00.1", 0, (0,), ("net_rail1_0",))
    seq = [(0, reps(0, 0)), (0, other), (30, reps(1, 0)), (60, reps(1, 0)), (60, other)]
    _, events = replay(representor_stale.step, representor_stale.initial(), seq)
    assert [(e.ts, e.subject) for e in events] == [(60, "pci/0000:1a:00.1")]


def test_leak_event_names_the_representors_and_how_long() -> None:
    seq = [(0, reps(1, 0, 1, 2)), (59, reps(1, 0, 1, 2)), (60, reps(1, 0, 1, 2))]
    (e,) = replay(representor_stale.step, representor_stale.initial(), seq)[1]
    assert e.ts == 60
    assert e.message == f"{PF}: 2 representor(s) for VFs beyond sriov_numvfs=1 for more than 60 s: net_rail0_1, net_rail0_2"
    assert dict(e.evidence) == {"numvfs": 1, "stale_vfs": [1, 2], "representors": ["net_rail0_1", "net_rail0_2"],
                                "representor_count": 3, "oldest_since": 0, "growing": False}


def test_a_growing_leak_says_so_and_keeps_the_oldest_time() -> None:
    seq = [(0, reps(1, 0, 1)), (60, reps(1, 0, 1)), (90, reps(1, 0, 1, 2)), (150, reps(1, 0, 1, 2))]
    e = replay(representor_stale.step, representor_stale.initial(), seq)[1][-1]
    assert "(growing): net_rail0_1, net_rail0_2" in e.message
    ev = dict(e.evidence)
    assert (ev["growing"], ev["oldest_since"]) == (True, 0)


def test_representors_without_names_are_shown_by_vf_index() -> None:
    seq = [(0, RepresentorObs(PF, 1, (0, 2, 3))), (60, RepresentorObs(PF, 1, (0, 2, 3)))]
    (e,) = replay(representor_stale.step, representor_stale.initial(), seq)[1]
    assert e.message.endswith(": vf2, vf3")
    assert dict(e.evidence)["representors"] == []


def test_a_clean_pf_is_forgotten() -> None:
    state, _ = replay(representor_stale.step, representor_stale.initial(), [(0, reps(1, 0, 1)), (10, reps(1, 0))])
    assert state.pfs == {}
    state, _ = replay(representor_stale.step, representor_stale.initial(), [(0, reps(2, 0, 1))])
    assert state.pfs == {}
