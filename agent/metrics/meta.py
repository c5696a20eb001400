"""The agent itself: its build, each source's last read, hung reads, the sample's age, its budget, its
events (docs/design.md §5 ``railscope_scrape_collector_*``)."""

from __future__ import annotations

from agent import __version__
from agent.metrics.families import Families, Scrape, Subject

__all__ = ["SUBJECT", "render"]


def render(fams: Families, scrape: Scrape) -> None:
    state = scrape.state
    fams.info("railscope_build", "The railscope agent's version.", ("version",), (__version__,), {})
    for src in sorted(state.sources, key=lambda s: s.source):
        fams.gauge("railscope_scrape_collector_success",
                   "1 when the last read of this source completed, 0 when it failed or did not finish.",
                   ("source",), (src.source,), 1 if src.success else 0)
        fams.gauge("railscope_scrape_collector_duration_seconds",
                   "How long the last read of this source took.",
                   ("source",), (src.source,), src.duration_s)
    for h in sorted(state.hung, key=lambda h: (h.source, h.device)):
        fams.gauge("railscope_source_hung",
                   "1 while a read of this source on this device is stuck in the kernel; it is not retried.",
                   ("source", "device"), (h.source, h.device), 1)
    taken = state.sample_time
    if taken is not None:
        fams.gauge("railscope_sample_age_seconds", "Age of the sample this scrape serves.",
                   (), (), max(0.0, scrape.now - taken))
    b = state.budget
    if b is not None:
        if b.cpu_ratio is not None:
            fams.gauge("railscope_agent_cpu_ratio",
                       "The agent's own CPU use over the last guard interval, in cores (1 = one core busy).",
                       (), (), b.cpu_ratio)
        # resident memory is railscope_agent_resident_memory_bytes of the agent's own collector
        for what, limit in (("cpu", b.cpu_limit), ("rss", b.rss_limit)):
            if limit is not None:
                fams.gauge("railscope_agent_budget_limit",
                           "The budget the agent keeps to (--budget-cpu in cores, --budget-rss in bytes).",
                           ("resource",), (what,), limit)
                fams.gauge("railscope_agent_budget_exceeded",
                           "1 while the agent's own use of this resource is above its budget.",
                           ("resource",), (what,), 1 if what in b.over else 0)
        for src in b.paused:
            fams.gauge("railscope_source_paused",
                       "1 while this optional source is paused by the agent's budget guard.",
                       ("source",), (src,), 1)
        fams.counter("railscope_agent_budget_pauses",
                     "Times the budget guard paused the optional sources since the agent started.",
                     (), (), b.pauses)
    for code in sorted(set(state.event_codes) | set(state.event_counts)):
        fams.counter("railscope_events",
                     "Events the agent's detectors raised since it started, by event code (LinkFlapping, PfcStorm, ...).",
                     ("code",), (code,), state.event_counts.get(code, 0))


SUBJECT = Subject(10, render)
