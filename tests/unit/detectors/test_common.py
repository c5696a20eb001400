"""The counter arithmetic the detectors share."""

from __future__ import annotations

from agent.detectors.common import counter_deltas


def test_only_counters_that_rose_are_kept_by_how_much() -> None:
    names = ("a", "b", "c", "d", "e")
    # a rose, b did not move, c was reset (a recreated netdev), d appeared, e vanished
    assert counter_deltas(names, (1, 5, 9, None, 3), (4, 5, 2, 7, None)) == {"a": 3}


def test_without_a_previous_sample_nothing_rose() -> None:
    assert counter_deltas(("a",), None, (10,)) == {}
