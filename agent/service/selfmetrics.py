"""The agent's own health on ``/metrics``: queues, threads, memory, the link watcher, the recorder.

These prove the resource bounds of the agent (issue "Agent daemon" item 6) where an operator
looks: a netlink storm shows as coalesced / dropped link notes, not as a growing process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from agent.service.daemon import Agent

__all__ = ["AgentMetrics", "rss_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """Resident memory of this process (``/proc/self/statm``, second field, in pages)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class AgentMetrics:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        q = a.link_events.queue
        yield _gauge("railscope_agent_link_queue_length", "Link notes waiting for the detectors.", len(q))
        yield _gauge("railscope_agent_link_queue_capacity", "Bound of the link note queue.", q.maxlen)
        yield _counter("railscope_agent_link_notes_coalesced",
                       "Link notes replaced by a newer one for the same link before the detectors saw them.",
                       q.coalesced)
        yield _counter("railscope_agent_link_notes_dropped",
                       "Link notes dropped because the queue was full (the next links sample covers them).",
                       q.dropped)
        w = a.link_events.watcher
        if w is not None:
            yield _gauge("railscope_agent_link_watcher_up", "1 while the rtnetlink link watcher runs.",
                         1 if w.alive and w.error is None else 0)
            yield _counter("railscope_agent_link_messages", "rtnetlink link messages read.", w.messages)
            yield _counter("railscope_agent_link_overruns",
                           "Times the kernel dropped link messages (ENOBUFS); each one triggers a links sample.",
                           w.overruns)
        runs = CounterMetricFamily("railscope_agent_source_runs", "Completed reads per source.", labels=["source"])
        fails = CounterMetricFamily("railscope_agent_source_failures", "Failed reads per source.", labels=["source"])
        for name, st in sorted(a.source_states.items()):
            runs.add_metric([name], st.runs)
            fails.add_metric([name], st.failures)
        yield runs
        yield fails
        yield _counter("railscope_agent_events_dropped",
                       "Events pushed out of the bounded history (they still count in railscope_events_total).",
                       a.events.dropped)
        if a.recorder is not None:
            yield _gauge("railscope_agent_recorder_samples", "Samples the flight recorder holds.", len(a.recorder))
            yield _gauge("railscope_agent_recorder_window_seconds", "How far back the flight recorder keeps samples.",
                         a.recorder.window_s)
        yield _gauge("railscope_agent_threads", "Threads of the agent process.", threading.active_count())
        rss = rss_bytes()
        if rss is not None:
            yield _gauge("railscope_agent_resident_memory_bytes", "Resident memory of the agent process.", rss)
        yield _gauge("railscope_agent_ready", "1 once the first sample has been taken.", 1 if a.ready else 0)
        calls = CounterMetricFamily(
            "railscope_agent_collector_calls",
            "Calls to the collector by call (upload, poll, done) and outcome, per attempt: ok, duplicate, the HTTP "
            "status of a refusal (403: a token bound to another node), unreachable, token_file.",
            labels=["call", "outcome"])
        for (call, outcome), n in sorted(a.collector_outcomes.counts().items()):
            calls.add_metric([call, outcome], n)
        yield calls
        spooled = CounterMetricFamily(
            "railscope_spool_uploads",
            "What became of the node spool's bundles: stored, duplicate, rejected (refused for good, moved to "
            "rejected/), deferred (a round that left bundles for later: the collector away, a token to fix).",
            labels=["outcome"])
        for outcome, n in sorted((a.uploader.outcomes if a.uploader is not None else {}).items()):
            spooled.add_metric([outcome], n)
        yield spooled


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
