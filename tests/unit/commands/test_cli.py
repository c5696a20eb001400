"""The CLI dispatcher: every subcommand's --help renders, bad usage exits 3."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.cli import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: railscope " + command)
    # Flags are documented with their default (docs/design.md §11: flags are documentation).
    assert "Default" in out


def test_unknown_flag_is_bad_usage_exit_3() -> None:
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--no-such-flag"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "unrecognized arguments: --no-such-flag" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_subcommand_prints_help_and_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 3
    assert "doctor" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "shown", "extra"), [
    ("--collector-token-file", "--collector-token-file", []),
    ("--token-file", "--token-file", ["--node", "n1", "--incident", "inc-1"]),
    ("--operator-token-file", "--token-file", ["--node", "n1", "--incident", "inc-1"])])
def test_capture_refuses_a_token_file_others_may_read_before_it_captures(
        flag: str, shown: str, extra: list[str], tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    token = tmp_path / "token"
    token.write_text("a-token\n")
    token.chmod(0o644)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["capture", "-o", str(out) + "/", "--collector", "http://127.0.0.1:9", flag, str(token), *extra]) == 3
    err = capsys.readouterr().err
    assert f"{shown} {token}: readable by its group and others (mode 0644)" in err and f"chmod 600 {token}" in err
    assert list(out.iterdir()) == []  # nothing captured for an upload that could never be sent


@pytest.mark.parametrize(("argv", "usage"), [
    (["doctor", "--jsn"], "usage: railscope doctor"),
    (["bundles", "--collector", "http://127.0.0.1:9", "ls", "--jsn"], "usage: railscope bundles ls"),
    (["capture", "--no-such-flag"], "usage: railscope capture")])
def test_a_misspelled_flag_prints_the_usage_of_its_subcommand(argv: list[str], usage: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(usage + " "), proc.stderr
    assert f"{usage.removeprefix('usage: ')}: error: unrecognized arguments: {argv[-1]}" in proc.stderr


def test_events_without_the_agents_socket_says_how_to_make_it(tmp_path, monkeypatch,  # type: ignore[no-untyped-def]
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from agent.commands import agent as agent_cmd
    from agent.commands.events import DEFAULT_SOCKET

    monkeypatch.delenv("RAILSCOPE_DATA_SOCKET", raising=False)
    parser = agent_cmd.argparse.ArgumentParser()
    agent_cmd.register(parser)
    # the default events reads is the one the agent serves where it serves one (the chart's agent.dataSocket)
    assert parser.get_default("data_socket") in (None, DEFAULT_SOCKET)
    missing = tmp_path / "agent.sock"
    assert main(["events", "--agent", f"unix:{missing}"]) == 1
    err = capsys.readouterr().err
    assert f"no agent data socket at {missing}" in err
    assert "--data-socket" in err and "agent.dataSocket" in err and "--agent http://" in err


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS), "bundles ls"])
def test_every_command_answers_version_with_the_packages_version(command: str | None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as exc:
        main([*(command.split() if command else []), "--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"railscope {importlib.metadata.version('railscope')}\n"


def test_the_version_falls_back_to_the_sources_without_an_installed_package(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata

    import agent
    from agent import cli

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert cli.version() == agent.__version__
