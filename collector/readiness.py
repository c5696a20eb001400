"""``/readyz``'s answer, cached: the probe is open to all, and each uncached answer is a call to the
store with the collector's credentials (a HeadBucket on S3). One check runs at a time, every caller
in the meantime shares it, and its answer stands for ``READY_TTL_S``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .storage import Store, StoreError

__all__ = ["READY_TTL_S", "Readiness"]

#: how long one answer of the store stands (kubelet probes every 10 s by default)
READY_TTL_S = 3.0
#: a check not answered by then is a failure (the call itself may go on in its thread)
READY_TIMEOUT_S = 5.0


class Readiness:
    def __init__(self, ttl_s: float = READY_TTL_S, timeout_s: float = READY_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.timeout_s, self.clock = ttl_s, timeout_s, clock
        self._at = float("-inf")
        self._error: str | None = None
        self._task: asyncio.Task[str | None] | None = None
        #: checks that reached the store (the others were answered from the last one)
        self.checks = 0

    async def check(self, store: Store) -> tuple[str | None, bool]:
        """``(None, fresh)`` when the store answers, ``(error, fresh)`` when not; ``fresh``: this call
        made the check (so a failure is counted once, not once per caller)."""
        if self.clock() - self._at < self.ttl_s:
            return self._error, False
        if self._task is not None:
            return await asyncio.shield(self._task), False
        self._task = asyncio.get_running_loop().create_task(self._run(store))
        return await asyncio.shield(self._task), True

    async def _run(self, store: Store) -> str | None:
        self.checks += 1
        try:
            await asyncio.wait_for(store.ready(), self.timeout_s)
            error = None
        except (StoreError, TimeoutError) as exc:
            error = str(exc) or "timeout"
        finally:
            self._task = None
        self._at, self._error = self.clock(), error
        return error
