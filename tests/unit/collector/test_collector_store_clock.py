"""A replica whose clock is ahead of the store's judges the agents' poll markers on its own clock: the
store's stamps (a file's mtime, S3's LastModified) are moved by the skew measured from the store's own
answers (a probe's mtime, the listing's Date), so a node whose agent polls a minute ago on another
replica is still a node with an agent, and the skew is exported as a gauge."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from collector.config import AlertLimits
from collector.metrics import CollectorMetrics
from collector.requests import DEFAULT_CLUSTER, RequestBoard
from collector.storage import StoreClock
from collector.storage.local import LocalStore
from tests.support.collector_helpers import local_settings

#: a replica running this far ahead of the store (and of the replica that marked the poll)
AHEAD_S = 600.0
RECENT_S = AlertLimits().agent_recent_s


def _ahead() -> float:
    return time.time() + AHEAD_S


def test_a_replica_ahead_of_the_store_still_sees_the_agents_that_poll(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)

    async def go() -> tuple[dict[str, float], float, float | None]:
        on_time = RequestBoard(LocalStore(settings))
        await on_time.mark_polled("gpu-node-001")  # the agent polls another replica, whose clock is right
        store = LocalStore(settings)
        store.clock = StoreClock(_ahead)
        ahead = RequestBoard(store, clock=_ahead)
        return await ahead.agents_seen(), ahead.clock(), store.clock.skew_s

    seen, now, skew = asyncio.run(go())
    # judged on the store's clock: polled just now, not ten minutes ago (agentless past RECENT_S)
    key = (DEFAULT_CLUSTER, "gpu-node-001")  # agents are known by (cluster, node)
    assert now - seen[key] < 5 < RECENT_S, now - seen[key]
    assert skew is not None and abs(skew - AHEAD_S) < 2


def test_the_skew_is_the_median_of_the_last_samples_and_a_gauge() -> None:
    c = StoreClock()
    assert c.skew_s is None and c.to_replica(100.0) == 100.0
    for s in (300.0, 301.0, 9000.0, 299.0, 300.5):  # one slow answer among them
        c.sample(s)
    assert c.skew_s == 300.5 and c.to_replica(100.0) == 400.5
    m = CollectorMetrics()
    m.store_clock_skew.set_function(c.gauge)
    assert "railscope_collector_store_clock_skew_seconds 300.5" in m.render().decode()
