"""The chart against the settings tables (``agent.settings``): every setting with a Helm value is a key of
``values.yaml``, a property of ``values.schema.json`` and, once set, the container's variable or repeated
flag; nothing in the chart's values, schema, arguments or environment that a table lacks. A flag added
to a table without its value (or a value without its flag) fails here, naming it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from agent.commands import agent as agent_command
from agent.commands import collector as collector_command
from agent.expectations import TABLE as EXPECTATIONS
from agent.settings import Setting, duration, duration_or_zero, size
from tests.support.chart import CHART, FULL_AGENT, container, render

ON = {"enabled": True, "store": "s3://railscope-bundles/prod", "tokenSecret": "railscope-tokens",
      "tokenRoles": ["agent", "operator", "alerting"], "tls": {"secret": "railscope-collector-tls"}}
#: Every collector.flags value set.
FULL_COLLECTOR = {
    "fabricWindow": "10m", "fabricHold": "20s", "tokenreviewPeerRate": 1, "maxHandshakesPerPeer": 8,
    "maxHandshakes": 64, "proxyProtocolFrom": ["10.0.0.0/24", "127.0.0.6"],
    "port": 9900, "s3EndpointUrl": "http://seaweedfs:8333", "agentAudience": "rs",
    "cluster": "gpu-east-1",  # the agents' (FULL_AGENT): the chart refuses two names
    "tokenreviewRate": 5, "maxBundleSize": "2G", "maxInflight": 16, "maxInflightPerNode": 3,
    "maxUploadsPerNodeHour": 100, "maxUploadBytesPerNodeHour": "16G", "maxUploadDuration": "20m", "retryAfter": 3, "minRate": "128k",
    "minRateGrace": "20s", "stallTimeout": "2m", "partSize": "16Mi", "partConcurrency": 6, "partsInFlight": 12,
    "stalePartAge": "2h", "headerTimeout": "5s", "maxConnsPerPeer": 64, "logLevel": "debug",
    "captureOnAlert": False, "captureCooldown": "5m", "captureMaxInFlight": 40, "captureIncidentWorst": 3,
    "captureIncidentSample": 0, "captureRate": 10, "captureRateWindow": "1h", "requestTtl": "10m",
    "captureAgentRecent": "10m", "captureNoAgentMaxInFlight": 1, "captureNoAgentTtl": "2m",
}


def agent_table() -> tuple[Setting, ...]:
    return agent_command.table()


def collector_table() -> tuple[Setting, ...]:
    return collector_command.TABLE


#: program -> (its table, where its values sit in values.yaml)
PROGRAMS = {"agent": (agent_table, ("agent",)), "collector": (collector_table, ("collector", "flags"))}


def _section(doc: dict[str, Any], path: tuple[str, ...], schema: bool = False) -> dict[str, Any]:
    for key in path:
        doc = doc["properties"][key] if schema else doc[key]
    return doc["properties"] if schema else doc


def _helm(table: tuple[Setting, ...]) -> dict[str, Setting]:
    return {s.helm_key: s for s in table if s.helm_key}


def _containers(chart: Any, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = render(chart, values)
    out = {"agent": container(docs)}
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    if deployments:
        (out["collector"],) = deployments[0]["spec"]["template"]["spec"]["containers"]
    return out


def _variables(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def _flags(c: dict[str, Any]) -> list[str]:
    return [a for a in c["args"][1:] if a.startswith("--")]


def test_the_tables_are_well_formed() -> None:
    for name, (table, _path) in PROGRAMS.items():
        flags = [s.flag for s in table()]
        assert len(flags) == len(set(flags)), f"{name}: a flag declared twice"
        for s in table():
            # a value reaches the program as its variable, a list as the repeated flag: either way it needs one
            assert s.chart != "value" or s.env or s.kind == "list", s.flag


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_values_yaml_holds_exactly_the_tables_helm_values(chart: Any, program: str) -> None:
    table, path = PROGRAMS[program]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    keys = set(_section(values, path))
    want = set(_helm(table()))
    assert sorted(want - keys) == [], f"settings without a value in values.yaml {'.'.join(path)}"
    assert sorted(keys - want) == [], f"values of {'.'.join(path)} no setting declares"
    assert set(_section(chart.values, path)) == keys


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_schema_holds_exactly_the_tables_helm_values(program: str) -> None:
    table, path = PROGRAMS[program]
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = _section(schema, path, schema=True)
    want = _helm(table())
    assert sorted(set(want) - set(props)) == [], "settings without a schema property"
    assert sorted(set(props) - set(want)) == [], "schema properties no setting declares"
    node = schema
    for key in path:
        node = node["properties"][key]
    assert node["additionalProperties"] is False  # a misspelt value fails at install
    # the shared parsers have one schema definition each: what the schema lets through, the flag reads
    for key, s in want.items():
        refs = json.dumps(props[key])
        if s.type is duration:
            assert '"#/definitions/duration"' in refs, key
        if s.type is size:
            assert props[key]["$ref"] == "#/definitions/size", key
        if s.type is duration_or_zero:
            assert '"#/definitions/duration"' in refs and "0" in refs, key


def test_the_sample_values_set_every_value() -> None:
    assert set(FULL_AGENT) == set(_helm(agent_table()))
    assert set(FULL_COLLECTOR) == set(_helm(collector_table()))


def test_every_value_reaches_its_container_as_the_tables_variable_or_flag(chart: Any) -> None:
    got = _containers(chart, {"agent": FULL_AGENT, "collector": {**ON, "flags": FULL_COLLECTOR}})
    for program, (table, _path) in PROGRAMS.items():
        env, flags = _variables(got[program]), _flags(got[program])
        sample = FULL_AGENT if program == "agent" else FULL_COLLECTOR
        for key, s in _helm(table()).items():
            if s.kind == "list":
                assert flags.count(s.flag) == len(sample[key]), (program, key)
            else:
                assert s.variable in env, (program, key, s.variable)


@pytest.mark.parametrize("values", [
    {},
    {"agent": FULL_AGENT, "collector": {**ON, "flags": FULL_COLLECTOR}},
    {"collector": {**ON, "tls": {"plainHttp": True, "secret": ""}, "tokenReview": True,
                   "agentServiceAccounts": ["system:serviceaccount:gpu:other-agent"]}},
], ids=["defaults", "everything", "plain-http-tokenreview"])
def test_nothing_in_the_containers_that_the_tables_lack(chart: Any, values: dict[str, Any]) -> None:
    got = _containers(chart, values)
    # the collector judges bundles with the agents' expectations: the judging table is its too
    tables = {"agent": agent_table(), "collector": (*collector_table(), *EXPECTATIONS)}
    for program, c in got.items():
        by_variable = {s.variable: s for s in tables[program] if s.variable}
        by_flag = {s.flag: s for s in tables[program]}
        for var in _variables(c):
            assert var in by_variable, f"{program}: {var} is no setting's variable"
            assert by_variable[var].chart != "none", f"{program}: the chart gives {var}, declared not in the chart"
        for flag in _flags(c):
            assert flag in by_flag and by_flag[flag].chart != "none", f"{program}: {flag}"


def test_the_settings_the_chart_fixes_are_set_by_it(chart: Any) -> None:
    got = _containers(chart, {"collector": {**ON, "tokenReview": True}})
    plain = _containers(chart, {"collector": {**ON, "tls": {"plainHttp": True, "secret": ""}}})["collector"]
    for program, (table, _path) in PROGRAMS.items():
        given = {*_variables(got[program]), *_flags(got[program])}
        if program == "collector":
            given |= set(_variables(plain))
        for s in table():
            if s.chart == "fixed":
                assert s.variable in given or s.flag in given, f"{program}: the chart never sets {s.flag}"


def test_the_collector_judges_with_the_judging_tables_values() -> None:
    """``railscope.expectationKeys`` (the agent values the collector's pod is given) is the judging table's
    values that a variable states; ``kernelTable`` is the file both pods mount."""
    found = re.search(r'define "railscope.expectationKeys" -}}\s*(.*?)\s*{{-',
                      (CHART / "templates" / "_helpers.tpl").read_text(), re.S)
    assert found is not None
    want = [s.helm_key for s in EXPECTATIONS if s.chart == "value" and s.variable and s.kind != "list"]
    assert found.group(1).split(" ") == want
