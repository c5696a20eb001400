"""Small things of the command line: bundles' options after the action, one name for the operator's
token file, the agent's usage and --capture-on's help."""

from __future__ import annotations

import argparse

import pytest

from agent.cli import build_parser, main
from agent.findings import EVENT_CODES


def _sub(command: str) -> argparse.ArgumentParser:
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("argv", [
    ["bundles", "--collector", "http://c:9842", "--token-file", "ops.txt", "ls", "--incident", "inc-1"],
    ["bundles", "ls", "--collector", "http://c:9842", "--token-file", "ops.txt", "--incident", "inc-1"],
    ["bundles", "--collector", "http://other:1", "ls", "--collector", "http://c:9842", "--token-file", "ops.txt",
     "--incident", "inc-1"],
])
def test_bundles_options_before_or_after_the_action(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAILSCOPE_COLLECTOR", raising=False)
    monkeypatch.delenv("RAILSCOPE_TOKEN_FILE", raising=False)
    args = build_parser(only="bundles").parse_args(argv)
    assert (args.action, args.collector, args.token_file, args.incident) == ("ls", "http://c:9842", "ops.txt", "inc-1")


def test_get_and_verify_take_the_options_after_the_action_too() -> None:
    p = build_parser(only="bundles")
    for action in ("get", "verify"):
        args = p.parse_args(["bundles", action, "k/2026-12-01/i/n.tar.gz", "--collector", "http://c", "--token-file", "t"])
        assert (args.collector, args.token_file) == ("http://c", "t")


def test_the_operator_token_file_is_token_file_in_every_client_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAILSCOPE_TOKEN_FILE", "RAILSCOPE_OPERATOR_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for command in ("bundles", "report", "capture"):
        assert "--token-file" in {o for a in _sub(command)._actions for o in a.option_strings}, command
    p = build_parser(only="capture")
    assert p.parse_args(["capture", "--token-file", "a"]).operator_token_file == "a"
    assert p.parse_args(["capture", "--operator-token-file", "b"]).operator_token_file == "b"  # the older name
    monkeypatch.setenv("RAILSCOPE_TOKEN_FILE", "from-env")
    assert build_parser(only="capture").parse_args(["capture"]).operator_token_file == "from-env"


def test_the_agent_usage_shows_listen_as_required(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RAILSCOPE_LISTEN", raising=False)
    usage = _sub("agent").format_usage()
    assert " --listen ADDR " in usage and "[--listen ADDR]" not in usage
    assert main(["agent"]) == 3  # still the clear error, not argparse's
    assert "--listen ADDR is required" in capsys.readouterr().err


def test_capture_on_lists_the_codes_it_takes() -> None:
    text = " ".join(_sub("agent").format_help().split())
    for code in EVENT_CODES:
        assert code in text[text.index("--capture-on CODES Detector"):][:600], code
