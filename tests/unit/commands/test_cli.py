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
