"""The latest sample the agent serves on ``/metrics`` (docs/design.md §5).

The scrape never reads the node: background samplers fill a ``MetricsState`` and swap it in whole;
the collector renders whatever state is current when Prometheus asks. Everything here is plain data,
so a state can be built by hand in a test, by the daemon from its samplers, or from a node image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.analysis.topology import Topology
    from agent.findings import Diagnosis
    from agent.model import Snapshot

__all__ = ["BudgetStatus", "HungSource", "MetricsState", "SourceStatus"]


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """The agent's own use against the limits it was given, and the optional sources it paused
    (``railscope_agent_*``, ``railscope_source_paused{source}``)."""

    cpu_ratio: float | None = None
    rss_bytes: int | None = None
    cpu_limit: float | None = None
    rss_limit: int | None = None
    #: "cpu" / "rss" while over its limit
    over: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    #: times the guard paused the optional sources since the agent started
    pauses: int = 0


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """How the last read of one source went (``railscope_scrape_collector_*{source}``).

    A source is what the agent samples on its own schedule: ``config`` (udev rules, OVS), ``links``
    (versions, link dump, PCI, rail statistics), ``devlink``, ``rdma``, ``counters`` (ethtool).
    """

    source: str
    success: bool
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class HungSource:
    """A firmware-touching read that never returned (``railscope_source_hung{source,device}``).

    A task stuck in the driver cannot be killed (docs/design.md §7): the sampler stops starting new copies of
    the read and keeps serving the last good value, and this series says so.
    """

    source: str
    device: str


@dataclass(frozen=True)
class MetricsState:
    """Everything one scrape renders. Replace it whole; never mutate it in place.

    ``topology`` (rails, PFs, representors) is built from ``snapshot``; ``diagnosis`` holds the
    findings of the same sample. Either may be None when it could
    not be built: the collector then serves what the snapshot alone says.
    """

    snapshot: Snapshot | None = None
    topology: Topology | None = None
    diagnosis: Diagnosis | None = None
    #: per-source status of the reads that made ``snapshot``
    sources: tuple[SourceStatus, ...] = ()
    #: reads stuck in the kernel right now
    hung: tuple[HungSource, ...] = ()
    #: code -> events the detectors raised since the agent started (``railscope_events_total``)
    event_counts: Mapping[str, int] = field(default_factory=dict)
    #: codes exported at 0 before their first event, so ``rate()`` / ``increase()`` see the first one
    event_codes: tuple[str, ...] = ()
    #: when the sample was taken (unix seconds); defaults to ``snapshot.taken_at``
    taken_at: float | None = None
    #: daemon -> its restarts since the agent started (``agent.detectors.daemon_restarts``)
    daemon_restarts: Mapping[str, int] = field(default_factory=dict)
    #: what the agent's budget guard did (``agent.service.budget``): None when it does not run
    budget: BudgetStatus | None = None

    @property
    def sample_time(self) -> float | None:
        if self.taken_at is not None:
            return self.taken_at
        return self.snapshot.taken_at if self.snapshot is not None else None
