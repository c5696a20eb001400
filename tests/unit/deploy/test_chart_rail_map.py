"""``agent.railMap`` (``--rail-map``) in the chart: given to the agents and the collector as the variable, a value
the agent would refuse fails at install; ``agent.captureOn`` without ``agent.spool`` fails at install as the
agent refuses it at start."""

from __future__ import annotations

import re
from typing import Any

import pytest

helm = pytest.importorskip("helm_python")

from tests.support.chart import env_of, only, render  # noqa: E402

MAP = "0=0000:0c:00.0,1=0000:8d:00.0"


def test_the_rail_map_reaches_the_agents_and_the_collector_as_its_variable(chart: Any) -> None:
    collector = {"enabled": True, "store": "s3://railscope-bundles/prod", "tokenSecret": "railscope-tokens",
                 "tls": {"secret": "railscope-collector-tls"}}
    docs = render(chart, {"agent": {"railMap": MAP}, "collector": collector})
    assert env_of(docs)["RAILSCOPE_RAIL_MAP"]["value"] == MAP
    (coll,) = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in coll["env"]}["RAILSCOPE_RAIL_MAP"] == MAP
    assert "RAILSCOPE_RAIL_MAP" not in env_of(render(chart, None))


@pytest.mark.parametrize("value", ["0=0c:00.0", "0=0000:0c:00.0;1=0000:8d:00.0", "rail0=0000:0c:00.0",
                                   "0=0000:0c:00.0,", 3])
def test_a_rail_map_the_agent_would_refuse_fails_at_install(chart: Any, value: object) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape("/agent/railMap")):
        render(chart, {"agent": {"railMap": value}})


def test_capture_on_without_a_spool_fails_at_install(chart: Any) -> None:
    with pytest.raises(helm.HelmValuesError, match="spool"):
        render(chart, {"agent": {"captureOn": "LinkFlapping", "spool": None}})
    # the chart's default spool takes the captures
    assert render(chart, {"agent": {"captureOn": "LinkFlapping"}})
