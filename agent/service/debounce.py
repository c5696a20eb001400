"""The one debouncer of the daemon: a read asked for inside the gap after the last one is deferred to
the gap's end, never dropped.

An event in the gap may be the only sign of a change (a representor removed right after another was
created) before the periodic read, seconds later; one deferred read covers every request of its gap.
The daemon has one per re-read: links after an unknown link's message, devlink after a devlink
notification, devlink and rdma after a NIC port came or went.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Debouncer", "Handle"]


class Handle(Protocol):
    def cancel(self) -> None: ...


def _loop_call_later(delay: float, fn: Callable[[], None]) -> Handle:
    return asyncio.get_running_loop().call_later(delay, fn)


class Debouncer:
    """Calls ``fire`` now, or when ``gap_s`` after the last call has passed (event-loop thread only)."""

    def __init__(self, gap_s: float, fire: Callable[[], None], *,
                 monotonic: Callable[[], float] = time.monotonic,
                 call_later: Callable[[float, Callable[[], None]], Handle] | None = None) -> None:
        self.gap_s = gap_s
        self._fire = fire
        self._monotonic = monotonic
        self._call_later = call_later or _loop_call_later
        # -inf, not 0: the monotonic clock starts at boot, and an agent started within a gap of it
        # must still read at the first request.
        self._last = float("-inf")
        self._deferred: Handle | None = None

    def poke(self, now: bool = False) -> None:
        """Ask for a call; ``now`` skips the gap (the kernel dropped messages: read at once)."""
        wait = self._last + self.gap_s - self._monotonic()
        if now or wait <= 0:
            self._run()
        elif self._deferred is None:
            self._deferred = self._call_later(wait, self._run)

    def _run(self) -> None:
        if self._deferred is not None:
            self._deferred.cancel()  # this call covers the requests it was waiting for
            self._deferred = None
        self._last = self._monotonic()
        self._fire()

    @property
    def pending(self) -> bool:
        return self._deferred is not None

    def cancel(self) -> None:
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
