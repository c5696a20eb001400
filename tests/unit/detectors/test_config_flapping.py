from __future__ import annotations

from typing import Any

import pytest

from agent.config import Thresholds
from agent.detectors import config_flapping
from agent.detectors.observations import ConfigObs
from tests.support.detector_replay import replay

PF = "pci/0000:1a:00.0"


def numvfs(*pairs: tuple[float, Any]) -> list[tuple[float, ConfigObs]]:
    return [(t, ConfigObs(PF, "sriov_numvfs", v)) for t, v in pairs]


CASES = {
    # name: (observations, times at which ConfigFlapping fires)
    "unchanged": (numvfs((0, 8), (60, 8), (120, 8)), []),
    "a numvfs change that stays": (numvfs((0, 0), (60, 8), (120, 8), (900, 8)), []),
    "a resize (numvfs passes through zero)": (numvfs((0, 8), (60, 0), (120, 16), (180, 16)), []),
    "a policy re-applied: 8 -> 0 -> 8": (numvfs((0, 8), (60, 0), (120, 8), (180, 0), (240, 8)), []),
    "VFs removed, and later back": (numvfs((0, 8), (60, 0), (300, 0), (400, 8)), []),
    "a progression": (numvfs((0, 8), (60, 0), (70, 16), (130, 0), (140, 32)), []),
    "back and forth within the window": (numvfs((0, 8), (60, 0), (70, 16), (120, 0), (130, 8)), [130]),
    "back and forth without the zero step in between samples": (numvfs((0, 8), (60, 16), (120, 8)), [120]),
    "back and forth slower than the window": (numvfs((0, 8), (60, 16), (700, 8)), []),
    "an unreadable value is not a change": (numvfs((0, 8), (60, None), (120, 8), (180, None), (240, 8)), []),
    "a fight is one event per episode": (
        numvfs((0, 8), (60, 16), (120, 8), (180, 16), (240, 8), (300, 16)), [120]),
    "re-arms after a quiet window": (
        numvfs((0, 8), (60, 16), (120, 8), (800, 16), (860, 8)), [120, 860]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_config_flapping_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(config_flapping.step, config_flapping.initial(), seq)
    assert [e.ts for e in events] == fires
    for e in events:
        assert (e.code, e.severity, e.subject) == ("ConfigFlapping", "warning", PF)
        assert dict(e.evidence)["name"] == "sriov_numvfs"


def test_eswitch_mode_and_params_are_separate_values() -> None:
    seq = [
        (0, ConfigObs(PF, "eswitch_mode", "switchdev")),
        (0, ConfigObs(PF, "param:esw_multiport", True)),
        (30, ConfigObs(PF, "eswitch_mode", "legacy")),
        (40, ConfigObs(PF, "param:esw_multiport", False)),
        (60, ConfigObs(PF, "eswitch_mode", "switchdev")),
        (90, ConfigObs("pci/0000:1a:00.1", "param:esw_multiport", True)),
    ]
    _, events = replay(config_flapping.step, config_flapping.initial(), seq)
    assert [(e.ts, dict(e.evidence)["name"]) for e in events] == [(60, "eswitch_mode")]
    assert dict(events[0].evidence)["values"] == ["switchdev", "legacy", "switchdev"]
    assert "switchdev -> legacy -> switchdev" in events[0].message


def test_threshold_is_configurable() -> None:
    th = Thresholds(config_flap_changes=4)
    state = config_flapping.initial(th)
    state, events = replay(config_flapping.step, state, numvfs((0, 8), (10, 4), (20, 8)))
    assert events == []
    _, events = replay(config_flapping.step, state, numvfs((30, 4), (40, 8)))
    assert [e.ts for e in events] == [40]


def test_threshold_must_allow_a_return() -> None:
    with pytest.raises(ValueError, match="config_flap_changes"):
        Thresholds(config_flap_changes=1)


def test_forgive_takes_the_reload_and_the_grace_as_the_new_baseline() -> None:
    def modes(*pairs):
        return [(t, ConfigObs(PF, "eswitch_mode", v)) for t, v in pairs]

    state, _ = replay(config_flapping.step, config_flapping.initial(), modes((0, "switchdev"), (50, "legacy")))
    state = config_flapping.forgive(state, now=60)
    state, events = replay(config_flapping.step, state, modes((70, "switchdev"), (80, "switchdev")))
    assert events == []
    # the operator put switchdev back during the grace: that is the baseline now
    _, events = replay(config_flapping.step, state, modes((200, "legacy"), (260, "switchdev")))
    assert [e.ts for e in events] == [260]


def test_flap_event_shows_the_values_in_order_and_when_they_changed() -> None:
    seq = [(t, ConfigObs(PF, "param:esw_multiport", v)) for t, v in ((0, True), (60, False), (120, True))]
    (e,) = replay(config_flapping.step, config_flapping.initial(), seq)[1]
    assert e.message == f"{PF} param:esw_multiport changed back and forth 2 times within 600 s: true -> false -> true"
    assert dict(e.evidence) == {"name": "param:esw_multiport", "values": [True, False, True], "change_ts": [60, 120],
                                "window_s": 600.0}


def test_a_change_exactly_a_window_old_has_left_it() -> None:
    th = Thresholds(config_flap_window_s=100)
    assert [e.ts for e in replay(config_flapping.step, config_flapping.initial(th),
                                 numvfs((0, 8), (10, 16), (109, 8)))[1]] == [109]
    assert replay(config_flapping.step, config_flapping.initial(th), numvfs((0, 8), (10, 16), (110, 8)))[1] == []


def test_the_changes_needed_are_a_threshold() -> None:
    th = Thresholds(config_flap_changes=3)
    assert replay(config_flapping.step, config_flapping.initial(th), numvfs((0, 8), (10, 16), (20, 8)))[1] == []
    assert [e.ts for e in replay(config_flapping.step, config_flapping.initial(th),
                                 numvfs((0, 8), (10, 16), (20, 8), (30, 16)))[1]] == [30]


def test_a_long_fight_keeps_a_bounded_history() -> None:
    seq = numvfs(*((10 * i, 8 if i % 2 else 16) for i in range(50)))
    state, events = replay(config_flapping.step, config_flapping.initial(), seq)
    assert [e.ts for e in events] == [20]
    (value,) = state.values.values()
    assert len(value.changes) == 32
    # the start is the value before the oldest change kept
    assert value.start == (8 if value.changes[0][1] == 16 else 16)


def test_forgive_makes_the_reload_grace_a_new_baseline() -> None:
    th = Thresholds(reload_grace_s=30)
    state, _ = replay(config_flapping.step, config_flapping.initial(th), numvfs((0, 8), (10, 16)))
    state = config_flapping.forgive(state, now=100)
    # during the grace the operator puts values back: no fight
    state, events = replay(config_flapping.step, state, numvfs((110, 8), (129, 16)))
    assert events == []
    # after it, changes count from what the grace left
    _, events = replay(config_flapping.step, state, numvfs((130, 8), (140, 16)))
    assert [e.ts for e in events] == [140]
    assert config_flapping.forgive(config_flapping.forgive(state, 100), 50).suppress_until == 130


@pytest.mark.parametrize(("seq", "fires"), [
    # the change at 10 leaves the window at 110; the one at 80 is still in it: 16 -> 32 -> 16
    (numvfs((0, 8), (10, 16), (80, 32), (115, 16)), [115]),
    # a sample of the same value also moves the window on: from 115 the fight starts at 16, so
    # 16 -> 8 -> 32 is a progression ...
    (numvfs((0, 8), (10, 16), (115, 16), (120, 8), (130, 32)), []),
    # ... and 16 -> 8 -> 16 a fight
    (numvfs((0, 8), (10, 16), (115, 16), (120, 8), (130, 16)), [130]),
])
def test_the_window_drops_only_the_changes_older_than_it(seq, fires) -> None:
    th = Thresholds(config_flap_window_s=100)
    assert [e.ts for e in replay(config_flapping.step, config_flapping.initial(th), seq)[1]] == fires


def test_a_long_progression_never_fires_past_the_history_kept() -> None:
    # 39 distinct values within the window: more changes than are kept, none back to an earlier value
    seq = numvfs(*((10 * i, i + 1) for i in range(40)))
    state, events = replay(config_flapping.step, config_flapping.initial(), seq)
    assert events == []
    (value,) = state.values.values()
    assert (value.start, value.changes[0][1]) == (8, 9)


@pytest.mark.parametrize(("during_grace", "after", "fires"), [
    # nothing changed during the grace: the value at the reload is the baseline
    ((), ((140, 8), (150, 16)), [150]),
    ((), ((140, 8), (150, 32)), []),
    # a value put back during the grace is the baseline
    (((110, 8),), ((140, 16), (150, 8)), [150]),
    (((110, 8),), ((140, 16), (150, 32)), []),
])
def test_after_a_reload_changes_count_from_the_value_the_grace_left(during_grace, after, fires) -> None:
    th = Thresholds(reload_grace_s=30)
    state, _ = replay(config_flapping.step, config_flapping.initial(th), numvfs((0, 8), (10, 16)))
    state = config_flapping.forgive(state, now=100)
    _, events = replay(config_flapping.step, state, numvfs(*during_grace, *after))
    assert [e.ts for e in events] == fires
    for e in events:
        assert dict(e.evidence)["values"] == [(during_grace or ((100, 16),))[-1][1], *(v for _, v in after)]
