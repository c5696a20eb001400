"""A bounded queue that keeps only the newest item per key, between a thread and the event loop.

A netlink event storm (thousands of representors created at once) must not grow memory without
bound: items for the same link replace each other (the newest carries the cumulative carrier
counters, so no flap is lost by coalescing), and when the queue is full the oldest key is dropped
and counted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["CoalescingQueue"]

V = TypeVar("V")


class CoalescingQueue(Generic[V]):
    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self.put_count = 0
        self.coalesced = 0
        self.dropped = 0
        self.high_water = 0

    def put(self, key: Hashable, item: V) -> bool:
        """Queue ``item`` under ``key``; True when the queue was empty (the reader must be woken)."""
        with self._lock:
            self.put_count += 1
            was_empty = not self._items
            if key in self._items:
                self._items[key] = item
                self.coalesced += 1
                return False
            if len(self._items) >= self.maxlen:
                self._items.popitem(last=False)
                self.dropped += 1
            self._items[key] = item
            if len(self._items) > self.high_water:
                self.high_water = len(self._items)
            return was_empty

    def drain(self, limit: int | None = None) -> list[V]:
        """Take up to ``limit`` items, oldest first."""
        with self._lock:
            if limit is None or limit >= len(self._items):
                out = list(self._items.values())
                self._items.clear()
                return out
            out = []
            for _ in range(limit):
                out.append(self._items.popitem(last=False)[1])
            return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
