"""The API-server flags of rollout, snapshot --cluster and preflight: declared once, on one settings table
(agent/commands/kubeapi.py), each command's parser carrying exactly those rows."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from agent.cli import build_parser
from agent.commands.kubeapi import API_TABLE

COMMANDS = Path(__file__).resolve().parents[3] / "agent" / "commands"


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices[name]


@pytest.mark.parametrize("command", ["rollout", "snapshot", "preflight"])
def test_each_command_carries_the_tables_rows(command: str) -> None:
    opts = {o: a for a in _sub(command)._actions for o in a.option_strings}
    for s in API_TABLE:
        assert s.flag in opts, f"{command} lacks {s.flag}"
        assert opts[s.flag].help == s.help, f"{command} {s.flag}: not the table's row"
        assert opts[s.flag].default == s.default


def test_no_command_declares_an_api_flag_of_its_own() -> None:
    flags = "|".join(re.escape(s.flag) for s in API_TABLE)
    own = re.compile(rf"add_argument\(\s*[\"']({flags})[\"']")
    bad = [f"{p.name}: {m[1]}" for p in sorted(COMMANDS.glob("*.py")) for m in own.finditer(p.read_text())]
    assert not bad, bad
