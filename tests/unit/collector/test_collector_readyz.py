"""``/readyz`` is open to all, so it must not be a store call per request: its answer is cached a few
seconds, one check runs at a time, and on S3 the HeadBucket runs in a thread of its own, never in
the upload pool."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from collector.config import CollectorSettings, StoreURL
from collector.storage import StoreError
from tests.support.collector_helpers import get, local_settings, run, running


def test_readyz_asks_the_store_once_for_a_burst(tmp_path: Path) -> None:
    calls: list[int] = []

    async def go() -> tuple[list[int], int, int]:
        async with running(local_settings(tmp_path)) as (url, col):
            async def slow_ready() -> None:
                calls.append(1)
                await asyncio.sleep(0.2)

            col.store.ready = slow_ready  # type: ignore[method-assign]
            burst = await asyncio.gather(*(get(url, "/readyz", token=None) for _ in range(200)))
            during = len(calls)
            more = [(await get(url, "/readyz", token=None))[0] for _ in range(50)]
            return [b[0] for b in burst] + more, during, len(calls)

    statuses, during, cached = run(go())
    assert set(statuses) == {200}
    assert during == 1, f"{during} store checks for 200 concurrent /readyz"
    assert cached == 1, f"{cached} store checks for 250 /readyz within a few seconds"


def test_a_readiness_answer_stands_a_few_seconds_and_failures_too() -> None:
    from collector.readiness import READY_TTL_S, Readiness

    now = [0.0]
    ready = Readiness(clock=lambda: now[0])
    answers = [None, StoreError("bucket gone")]

    class Store:
        async def ready(self) -> None:
            answer = answers[0]
            if answer is not None:
                raise answer

    async def go() -> list[tuple[str | None, bool]]:
        out = [await ready.check(Store()), await ready.check(Store())]  # type: ignore[arg-type]
        answers.pop(0)
        now[0] = READY_TTL_S - 0.1
        out.append(await ready.check(Store()))  # type: ignore[arg-type]
        now[0] = READY_TTL_S + 0.1
        out += [await ready.check(Store()), await ready.check(Store())]  # type: ignore[arg-type]
        return out

    assert run(go()) == [(None, True), (None, False), (None, False), ("bucket gone", True), ("bucket gone", False)]
    assert ready.checks == 2


def test_s3_readiness_runs_off_the_upload_pool() -> None:
    from collector.storage.s3 import S3Store

    settings = CollectorSettings(store=StoreURL(kind="s3", bucket="b", prefix="p"),
                                 s3_endpoint_url="http://127.0.0.1:9")
    threads: list[str] = []

    async def go() -> None:
        store = S3Store(settings)
        store.client.head_bucket = lambda **kw: threads.append(threading.current_thread().name)  # type: ignore[method-assign]
        await store.ready()
        await store.close()

    run(go())
    assert len(threads) == 1 and threads[0].startswith("railscope-s3-ready"), threads
