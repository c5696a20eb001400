"""deploy/prometheus/METRICS.md lists every family the collector exports, with its type, labels and
HELP text; it is regenerated with RAILSCOPE_UPDATE_GOLDEN=1 and must never drift from the code."""

from __future__ import annotations

import os

from prometheus_client.parser import text_string_to_metric_families

from agent.metrics.exposition import render
from tests.support.metrics_expo import ROOT, full_state

CATALOGUE = ROOT / "deploy" / "prometheus" / "METRICS.md"

HEADER = """\
# railscope metrics

Every family the node agent serves on `/metrics` (and `railscope metrics --from IMAGE` prints). Generated
from the collector by `RAILSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/unit/metrics/test_catalogue.py`;
a test fails when this file and the code disagree.

- Series carry no `node` / `cluster` label: the ServiceMonitor's target labels add them.
- A counter the NIC does not have is absent, never 0 (a missing PFC key means PFC is off or
  unsupported on that priority). `plane` is empty on rails named without a plane.
- `device` is the rail netdev for `railscope_rail_*`, `_pfc_*`, `_prio_*`, `_port_*`, `_pause_*`, the
  rail's RDMA device for `railscope_rdma_*`, the PF netdev for the per-PF families.
- Budget (docs/design.md §5): an 8-rail node with 127 VFs per PF serves about 1,050 series by default. The
  degradation sources (`railscope_phy_*`, `_pcie_*`, `_optics_*`, `_nic_temperature_*`) add at most 40
  per rail: 39 with 8-lane modules, 8 PHY lanes and two hwmon sensors per PF (1,077 -> 1,389 series on
  the synthetic 8 x 127 node, `tests/unit/metrics/test_degradation_metrics.py`).
  `railscope_representor_*` are opt-in (`--representor-include REGEX`): two series per matched
  representor, four when the agent also read its statistics.
- `railscope_node_maintenance` comes from the agent's watch on its own Node object: served by a
  running agent that reaches an API server, never by `metrics --from`.

| name | type | labels | meaning |
|---|---|---|---|
"""


def _maintenance_families() -> list:
    from agent.service.events import EventLog
    from agent.service.maintenance import ApiConfig, MaintenanceMetrics, NodeWatch

    watch = NodeWatch(ApiConfig("http://127.0.0.1:1"), "n")
    watch.allocatable = {"nvidia.com/rail0": 1}  # what the watch read of status.allocatable
    col = MaintenanceMetrics(watch, EventLog())
    return [fam for fam in col.collect() if not fam.name.startswith("railscope_agent_")]


def catalogue_text() -> str:
    st = full_state()
    text = render(st, clock=lambda: st.snapshot.taken_at, representor_include=".")
    rows = []
    for fam in [*text_string_to_metric_families(text.decode()), *_maintenance_families()]:
        name = fam.samples[0].name
        kind = "info" if name.endswith("_info") else fam.type
        labels = sorted(set().union(*(s.labels for s in fam.samples)))
        rows.append(f"| `{name}` | {kind} | {', '.join(labels)} | {fam.documentation} |")
    return HEADER + "\n".join(rows) + "\n"


def test_catalogue_lists_every_family() -> None:
    want = catalogue_text()
    if os.environ.get("RAILSCOPE_UPDATE_GOLDEN") == "1":
        CATALOGUE.write_text(want)
    assert CATALOGUE.exists(), "run with RAILSCOPE_UPDATE_GOLDEN=1 to create it"
    assert CATALOGUE.read_text() == want, "METRICS.md is stale: RAILSCOPE_UPDATE_GOLDEN=1 regenerates it"
