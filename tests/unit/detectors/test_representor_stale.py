from __future__ import annotations

import pytest
from detector_replay import replay

from agent.config import Thresholds
from agent.detectors import representor_stale
from agent.detectors.observations import RepresentorObs

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
