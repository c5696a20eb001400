"""The chart binds the collector's agent tokens to the agents' cluster: agent tokens are bound to a
cluster (the collector's ``--cluster``, else ``default``), so a release whose agents run with
``agent.cluster`` gives the collector the same name, and one whose two values differ does not render."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart import COLLECTOR_ON as ON
from tests.support.chart import render


def _collector_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    (dep,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in c["env"]}


def test_the_collector_takes_the_agents_cluster_unless_set(chart: Any) -> None:
    env = _collector_env(render(chart, {**ON, "agent": {"cluster": "prod-east"}}))
    assert env["RAILSCOPE_CLUSTER"] == "prod-east"
    env = _collector_env(render(chart, {"collector": {**ON["collector"], "flags": {"cluster": "prod-east"}},
                                        "agent": {"cluster": "prod-east"}}))
    assert [k for k in env if k == "RAILSCOPE_CLUSTER"] == ["RAILSCOPE_CLUSTER"] and env["RAILSCOPE_CLUSTER"] == "prod-east"
    assert "RAILSCOPE_CLUSTER" not in _collector_env(render(chart, ON))


def test_a_collector_cluster_other_than_the_agents_does_not_render(chart: Any) -> None:
    with pytest.raises(Exception, match=r"collector\.flags\.cluster \(prod-west\) and agent\.cluster \(prod-east\) differ"):
        render(chart, {"collector": {**ON["collector"], "flags": {"cluster": "prod-west"}},
                       "agent": {"cluster": "prod-east"}})
