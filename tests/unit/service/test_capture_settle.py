"""An event capture waits for the rails' links to settle before it snapshots the node.

``LinkFlapping`` fires at a carrier loss; captured at once, the bundle replayed to a ``RailLinkDown``
of a rail that came back 0.6 s after the capture started. The wait and the rail's last change are
in the manifest's notes.
"""

from __future__ import annotations

import asyncio
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from agent.capture.trigger import SETTLE_MAX_S, SETTLE_S, settle_wait
from agent.config import AgentSettings
from agent.host.netlink.link_events import LinkNote
from agent.host.recorded import open_image
from agent.model import Event
from agent.service.captures import Captures
from agent.service.daemon import Agent
from agent.service.events import EventLog

T0 = 1_790_000_000.0


class _Clock:
    """Fake time: ``sleep`` advances it; ``changes`` are (when, netdev, up) a link watcher would report."""

    def __init__(self, now: float, changes: list[tuple[float, str, bool]]) -> None:
        self.now = now
        self.changes = changes
        self.slept = 0

    def time(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert 0 < s <= 0.25
        self.slept += 1
        self.now += s

    def rail_change(self) -> tuple[float, str, bool] | None:
        seen = [c for c in self.changes if c[0] <= self.now]
        return seen[-1] if seen else None


def _capture(clock: _Clock) -> Captures:
    return Captures(AgentSettings(watch_links=False), lambda: None, None, EventLog(), None,  # type: ignore[arg-type,return-value]
                        clock.time, rail_change=clock.rail_change, sleep=clock.sleep)


def test_settle_wait_ends_a_quiet_spell_after_the_last_change_and_never_past_the_cap() -> None:
    assert settle_wait(None, T0, T0) == 0.0
    assert settle_wait(T0, T0 + 0.5, T0 + 0.1) == SETTLE_S - 0.5
    assert settle_wait(T0, T0 + SETTLE_S, T0) == 0.0
    assert settle_wait(T0 + 100, T0 + 100, T0) == 0.0  # waited since T0: the cap is over
    assert settle_wait(T0 + 29, T0 + 29, T0) == SETTLE_MAX_S - 29


def test_a_flap_is_waited_out_and_the_manifest_says_when_the_rail_came_back() -> None:
    # The loss at T0 raised the event; the cable is back 0.6 s later.
    clock = _Clock(T0 + 0.01, [(T0, "net_rail0", False), (T0 + 0.6, "net_rail0", True)])
    note = _capture(clock).settle()
    assert clock.now >= T0 + 0.6 + SETTLE_S  # the snapshot starts after the way back, and a quiet spell
    assert clock.now < T0 + 0.6 + SETTLE_S + 0.3
    assert note is not None and note.startswith("settle: waited 2.6s")
    assert "net_rail0 came back up at 2026-09-21T14:13:20.600Z" in note


def test_a_rail_that_never_settles_is_captured_after_the_cap_as_it_is() -> None:
    flaps = [(T0 + 0.5 * n, "net_rail0", n % 2 == 1) for n in range(200)]  # a change every 0.5 s
    clock = _Clock(T0, flaps)
    note = _capture(clock).settle()
    assert abs(clock.now - (T0 + SETTLE_MAX_S)) < 0.3
    assert note is not None and "did not settle within 30.0s" in note
    assert note.endswith("and was down at capture start")


def test_no_recent_change_captures_at_once_without_a_note() -> None:
    clock = _Clock(T0 + 60, [(T0, "net_rail0", True)])
    assert _capture(clock).settle() is None and clock.slept == 0
    clock = _Clock(T0, [])
    assert _capture(clock).settle() is None and clock.slept == 0


def _note(ts: float, carrier: int, downs: int) -> LinkNote:
    return LinkNote(ts=ts, ifindex=4, ifname="net_rail0", deleted=False, admin_up=True,
                    operstate="UP" if carrier else "DOWN", carrier=carrier, carrier_down_count=downs,
                    phys_port_name="p0", parent_dev="0000:0c:00.0")


@pytest.mark.slow
def test_the_daemons_flap_capture_starts_after_the_rail_is_back_and_notes_it(example_image: Path,
                                                                             tmp_path: Path) -> None:
    """The daemon path: a rail's link messages, a LinkFlapping at the loss, the capture in the spool."""
    spool = tmp_path / "spool"
    agent = Agent(AgentSettings(port=0, watch_links=False, node="gpu-node-7", capture_on=frozenset({"LinkFlapping"}),
                                spool_dir=str(spool), capture_deadline_s=60),
                  host_factory=lambda: open_image(str(example_image)))
    started: list[float] = []
    real_run = agent.captures.run

    def run(job: Any, out: Any, **kw: Any) -> Any:
        started.append(time.time())
        return real_run(job, out, **kw)

    agent.captures.run = run  # type: ignore[method-assign]

    async def main() -> None:
        await agent.start()
        try:
            for _ in range(500):
                if agent.ready:
                    break
                await asyncio.sleep(0.02)
            assert agent.ready
            now = agent.clock()
            agent._on_notes([_note(now, 0, 2)])  # the cable is pulled
            agent._emit(Event(ts=now, code="LinkFlapping", severity="warning", subject="net_rail0",
                              message="net_rail0: 3 carrier losses"))
            await asyncio.sleep(0.6)
            agent._on_notes([_note(agent.clock(), 1, 2)])  # and back 0.6 s later
            assert await asyncio.get_running_loop().run_in_executor(None, agent.captures.idle)
        finally:
            await agent.stop()

    asyncio.run(main())
    change = agent.links.last_rail_change
    assert change is not None and change[1:] == ("net_rail0", True)
    assert len(started) == 1
    assert started[0] >= change[0] + SETTLE_S, f"the capture started {change[0] - started[0]:.2f} s before the rail was back"
    bundles = sorted(spool.glob("*.tar.gz"))
    assert len(bundles) == 1
    with tarfile.open(bundles[0]) as tf:
        name = next(n for n in tf.getnames() if n.endswith("/manifest.json"))
        manifest = json.loads(tf.extractfile(name).read())  # type: ignore[union-attr]
    assert manifest["notes"][0].startswith("settle: waited ")
    assert "net_rail0 came back up at " in manifest["notes"][0]
