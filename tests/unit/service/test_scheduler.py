"""Background sources: a hung read is reported, never started twice, and its last value stays."""

from __future__ import annotations

import asyncio
import threading

from agent.service.scheduler import Lane, SourceState, SourceTimer


def test_a_source_past_its_deadline_is_hung_and_not_restarted() -> None:
    release = threading.Event()
    started = []
    applied = []

    def read() -> str:
        started.append(1)
        if len(started) == 2:
            release.wait(10)  # the second read gets stuck
        return f"sample{len(started)}"

    async def main() -> None:
        st = SourceState("devlink", interval_s=0.05)
        lane = Lane("test-devlink")
        timer = SourceTimer(st, lane, read, applied.append, deadline_s=0.2, current_device=lambda: "pci/0000:0c:00.0")
        task = asyncio.create_task(timer.drive())
        for _ in range(200):
            await asyncio.sleep(0.02)
            if st.hung:
                break
        assert st.hung == {"pci/0000:0c:00.0"}
        await asyncio.sleep(0.4)  # many intervals: still one stuck read, no second copy
        assert len(started) == 2
        assert applied == ["sample1"]  # the last good value is what the agent keeps serving
        release.set()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if not st.hung and len(applied) >= 3:
                break
        assert not st.hung
        assert applied[:2] == ["sample1", "sample2"]
        task.cancel()
        lane.close()

    asyncio.run(main())


def test_a_failing_source_counts_failures_and_keeps_running() -> None:
    calls = []

    def read() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("netlink: EBUSY")
        return len(calls)

    async def main() -> None:
        st = SourceState("links", interval_s=0.01)
        lane = Lane("test-links")
        got: list[int] = []
        timer = SourceTimer(st, lane, read, got.append, deadline_s=5)
        task = asyncio.create_task(timer.drive())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if got:
                break
        task.cancel()
        lane.close()
        assert st.failures == 1
        assert st.runs >= 2
        assert got and got[0] == 2
        assert st.last_success is True

    asyncio.run(main())


def test_poke_runs_the_source_again_before_its_interval() -> None:
    calls = []

    async def main() -> None:
        st = SourceState("links", interval_s=3600)
        lane = Lane("test-poke")
        timer = SourceTimer(st, lane, lambda: calls.append(1), lambda _r: None, deadline_s=5)
        task = asyncio.create_task(timer.drive())
        await timer.first_done.wait()
        timer.poke()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(calls) >= 2:
                break
        task.cancel()
        lane.close()

    asyncio.run(main())
    assert len(calls) == 2


def test_a_paused_source_starts_no_read_until_it_is_resumed() -> None:
    calls: list[int] = []

    async def main() -> None:
        st = SourceState("processes", interval_s=0.01)
        lane = Lane("test-pause")
        timer = SourceTimer(st, lane, lambda: calls.append(1), lambda _r: None, deadline_s=5)
        task = asyncio.create_task(timer.drive())
        await timer.first_done.wait()
        st.paused = True
        await asyncio.sleep(0.05)  # a read already started may finish
        seen = len(calls)
        await asyncio.sleep(0.2)  # twenty intervals: none starts
        assert len(calls) == seen
        st.paused = False
        timer.poke()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(calls) > seen:
                break
        assert len(calls) > seen
        task.cancel()
        lane.close()

    asyncio.run(main())
