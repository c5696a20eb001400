"""The queue between the link watcher thread and the event loop stays bounded under a storm."""

from __future__ import annotations

import threading

import pytest

from agent.service.coalesce import CoalescingQueue


def test_newest_item_per_key_wins_and_keeps_its_place() -> None:
    q: CoalescingQueue[str] = CoalescingQueue(8)
    assert q.put(1, "a1") is True  # was empty: the reader must be woken
    assert q.put(2, "b1") is False
    assert q.put(1, "a2") is False
    assert q.drain() == ["a2", "b1"]
    assert q.coalesced == 1
    assert len(q) == 0


def test_full_queue_drops_the_oldest_key_and_counts_it() -> None:
    q: CoalescingQueue[int] = CoalescingQueue(3)
    for k in range(5):
        q.put(k, k)
    assert q.drain() == [2, 3, 4]
    assert q.dropped == 2
    assert q.high_water == 3


def test_drain_with_a_limit_takes_the_oldest_first() -> None:
    q: CoalescingQueue[int] = CoalescingQueue(10)
    for k in range(5):
        q.put(k, k)
    assert q.drain(2) == [0, 1]
    assert q.drain() == [2, 3, 4]


def test_a_storm_from_threads_never_exceeds_the_bound() -> None:
    q: CoalescingQueue[int] = CoalescingQueue(100)

    def storm(base: int) -> None:
        for i in range(5000):
            q.put(base + i % 700, i)

    threads = [threading.Thread(target=storm, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(q) <= 100
    assert q.high_water <= 100
    assert q.put_count == 20000
    assert q.dropped + q.coalesced + len(q) == 20000


def test_zero_capacity_is_refused() -> None:
    with pytest.raises(ValueError):
        CoalescingQueue(0)
