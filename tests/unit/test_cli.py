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
    # Flags are documented with their default (STYLE: flags are documentation).
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
