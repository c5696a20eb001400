"""``agent.settings``: one parser of each kind for every program, and the tables that declare the flags."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from agent.cli import build_parser
from agent.commands import agent as agent_command
from agent.commands import collector as collector_command
from agent.commands.common import SCOPE
from agent.config import EXPECTATION_FLAGS, AgentSettings, Expectations, ReadConfig, Thresholds
from agent.expectations import TABLE as EXPECTATIONS
from agent.settings import Setting, add_flags, count, read, size
from collector.config import AlertLimits, CollectorSettings


def _parse(command: str, argv: list[str]) -> argparse.Namespace:
    return build_parser(only=command).parse_args([command, *argv])


@pytest.mark.parametrize("text, want", [
    ("8M", 8 << 20), ("4G", 4 << 30), ("64k", 64 << 10), ("512Mi", 512 << 20), ("192Mi", 192 << 20),
    ("1GiB", 1 << 30), ("1G", 1 << 30), ("16m", 16 << 20), ("0.5Gi", 512 << 20), ("536870912", 536870912),
])
def test_the_agent_and_the_collector_read_a_size_alike(text: str, want: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # They had two syntaxes: the agent read 1G as 10^9 bytes and the collector as 2^30; the collector
    # refused 512Mi, the form of the pod limits the chart gives the agent.
    for name in ("RAILSCOPE_BUDGET_RSS", "RAILSCOPE_PART_SIZE", "RAILSCOPE_MAX_BUNDLE_SIZE"):
        monkeypatch.delenv(name, raising=False)
    agent = _parse("agent", ["--listen", "127.0.0.1", "--budget-rss", text])
    collector = _parse("collector", ["--max-bundle-size", text])
    assert agent.budget_rss == collector.max_bundle_size == want


@pytest.mark.parametrize("text", ["8 MB", "-1", "0", "Mi", "12x", "1e3"])
def test_a_size_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size(text)


def test_a_count_has_its_settings_lower_bound() -> None:
    assert count(0)("0") == 0 and count(1)("1") == 1
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        count(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        count(0)("1.5")


def test_a_table_makes_the_flags_and_reads_them_back(monkeypatch: pytest.MonkeyPatch) -> None:
    table = (Setting("--a-b", "x", type=count(1), default="3", field="a"),
             Setting("--on", "x", kind="switch", default=False, group="g", field="g.on"),
             Setting("--names", "x", kind="list", field="g.names", convert=lambda v: tuple(v or ())),
             Setting("--quiet", "x", kind="list", env=False, field="quiet"))
    for var in ("RAILSCOPE_A_B", "RAILSCOPE_ON", "RAILSCOPE_NAMES", "RAILSCOPE_QUIET"):
        monkeypatch.delenv(var, raising=False)
    p = argparse.ArgumentParser()
    add_flags(p, table)
    assert read(table, p.parse_args([])) == {"a": 3, "g": {"on": False, "names": ()}, "quiet": None}
    monkeypatch.setenv("RAILSCOPE_A_B", "7")
    monkeypatch.setenv("RAILSCOPE_ON", "yes")
    monkeypatch.setenv("RAILSCOPE_NAMES", "x, y z")
    monkeypatch.setenv("RAILSCOPE_QUIET", "never")
    p = argparse.ArgumentParser()
    add_flags(p, table)
    assert read(table, p.parse_args([])) == {"a": 7, "g": {"on": True, "names": ("x", "y", "z")}, "quiet": None}
    # the flag wins over its variable
    assert read(table, p.parse_args(["--a-b", "1", "--names", "w"]))["g"]["names"] == ("w",)
    monkeypatch.setenv("RAILSCOPE_ON", "maybe")
    with pytest.raises(SystemExit, match="RAILSCOPE_ON: expected true or false"):
        add_flags(argparse.ArgumentParser(), table)
    assert (table[0].variable, table[0].helm_key, table[3].variable) == ("RAILSCOPE_A_B", "aB", None)


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_field_a_setting_names_is_one_of_its_settings() -> None:
    groups = {"agent": (AgentSettings, {"read": ReadConfig, "thresholds": Thresholds, "intervals": None}),
              "collector": (CollectorSettings, {"alerts": AlertLimits})}
    tables = {"agent": (*agent_command.own_table(), SCOPE),
              "collector": collector_command.TABLE}
    for program, table in tables.items():
        top, nested = groups[program]
        for s in table:
            if s.field is None:
                continue
            head, _, name = s.field.partition(".")
            if name:
                assert head in nested and (nested[head] is None or name in _fields(nested[head])), s.flag
            else:
                assert head in _fields(top), s.flag
    assert all(s.field in _fields(Expectations) for s in EXPECTATIONS)


def test_every_judging_flag_is_declared_once() -> None:
    """The judging flags a manifest records (``EXPECTATION_FLAGS``) are the judging table's, and the agent's
    three detector thresholds that judge too."""
    by_flag = {s.flag: s for s in agent_command.table()}
    assert len(by_flag) == len(agent_command.table())
    for name, flag in EXPECTATION_FLAGS.items():
        s = by_flag[flag]
        assert s.field in (name, f"thresholds.{name}"), flag
    assert {s.field for s in EXPECTATIONS} == set(EXPECTATION_FLAGS) - {"flap_count", "flap_window_s", "storm_ratio"}
