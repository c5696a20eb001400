"""The agent's metrics exporter (a Prometheus custom collector, in client_python's words; "collector" in
railscope is the central service): fresh families from the latest sample at every scrape.

One module per subject (``agent.metrics.families``: each declares its ``SUBJECT``); the exporter is a
loop over them. Follows client_python's ``process_collector.py``: ``collect()`` builds new metric families from the
current ``MetricsState`` each time, so a representor (or a rail, or a finding) that is gone from the
sample is gone from ``/metrics`` — no labelled global gauge keeps a stale series alive (maintainers'
answer in https://github.com/prometheus/client_python/issues/532).

Naming and budget follow docs/design.md §5: prefix ``railscope_``, base units, ``_total`` on counters,
``_info`` gauges = 1 with facts as labels, and never a ``node`` / ``cluster`` label (Prometheus target
labels carry those). A counter the NIC does not have is left out, never exported as 0: a missing PFC
key means PFC is off or unsupported on that priority.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric

from agent.metrics.families import Families, Scrape, Subject, discover
from agent.metrics.rdma import RDMA_HW_COUNTERS
from agent.metrics.state import MetricsState

__all__ = ["RDMA_HW_COUNTERS", "SUBJECTS", "NodeMetrics"]

#: every metrics subject module of this package, in the order of the exposition
SUBJECTS: tuple[Subject, ...] = discover()


class NodeMetrics:
    """The node's metrics (a Prometheus custom collector; inside railscope "collector" is the central
    service, so the agent's Prometheus collectors are ``...Metrics``): renders the current ``MetricsState``.

    ``get_state`` returns the latest state (the daemon swaps it whole after each sample);
    ``clock`` gives "now" for ``railscope_sample_age_seconds``; ``representor_include`` is a regex on
    representor netdev names that turns on per-representor series (off by default: a node of
    8 PFs x 127 VFs would add a thousand series per family).
    """

    def __init__(self, get_state: Callable[[], MetricsState | None], *,
                 clock: Callable[[], float] = time.time,
                 representor_include: str | re.Pattern[str] | None = None) -> None:
        self._get_state = get_state
        self._clock = clock
        if isinstance(representor_include, str):
            representor_include = re.compile(representor_include)
        self._rep_include = representor_include

    def describe(self) -> list[Metric]:
        # Registering must not render a sample: the family set depends on the node.
        return []

    def collect(self) -> Iterator[Metric]:
        scrape = Scrape(self._get_state() or MetricsState(), self._clock(), self._rep_include)
        fams = Families()
        for subject in SUBJECTS:
            subject.render(fams, scrape)
        yield from fams
