"""``railscope completion bash|zsh``: made from the parser, so it offers every subcommand, nested action
and flag; the shells accept the scripts (``bash -n``, ``zsh -n`` where zsh is installed), and bash,
given the script, completes what a person types."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from agent.cli import COMMANDS, build_parser, walk
from tests.support import ROOT


def _script(shell: str) -> str:
    res = subprocess.run([sys.executable, "-m", "agent.cli", "completion", shell], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_script_lists_every_subcommand_and_its_flags_and_the_shell_accepts_it(shell: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _script(shell)
    for name in COMMANDS:
        assert f"|{name}" in text, name
    for path, parser in walk(build_parser()):
        here = " ".join(path)
        for action in parser._actions:
            for opt in action.option_strings:
                assert opt in text, (here, opt)
        assert (f'"{here}") words=' if shell == "bash" else f"('{here}') rs_items=") in text, here
    f = tmp_path / f"railscope.{shell}"
    f.write_text(text)
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed: the script's syntax is not checked")
    res = subprocess.run([shell, "-n", str(f)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last one being typed), with the script sourced."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    prog = (f"source {script}; COMP_WORDS=(railscope {quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); "
            f"_railscope; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    res = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return [x for x in res.stdout.splitlines() if x]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_subcommands_nested_actions_flags_and_their_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "railscope.bash"
    script.write_text(_script("bash"))
    assert _complete(str(script), "do") == ["doctor"]
    assert set(COMMANDS) <= set(_complete(str(script), ""))
    assert "--json" in _complete(str(script), "doctor", "--j")
    assert "--collector-ca-file" in _complete(str(script), "report", "--collector-")
    # a flag's value is not taken for a command word: `ls` after --collector URL is bundles' action
    assert _complete(str(script), "bundles", "--collector", "https://c:9842", "l") == ["ls"]
    assert "--json" in _complete(str(script), "bundles", "--collector", "https://c:9842", "ls", "--j")
    assert _complete(str(script), "doctor", "--lldp", "") == ["off", "lldpd", "listen"]
    assert _complete(str(script), "completion", "") [:2] == ["bash", "zsh"]
    (tmp_path / "ca.crt").write_text("")
    assert str(tmp_path / "ca.crt") in _complete(str(script), "bundles", "--collector-ca-file", str(tmp_path / "ca"))


def _zsh_offers(script: str, *words: str) -> list[str]:
    """What the zsh function offers after ``words`` (the last one being typed): its calls of zsh's
    completion functions, stubbed to print what they were given (zsh filters by the typed prefix)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    prog = ("_describe() { local arr=${@[-1]}; print -l -- \"${(@P)arr}\"; }; _files() { print -- FILES; }; "
            "compadd() { shift; print -l -- \"$@\"; }; _message() { print -- VALUE; }; "
            f"words=(railscope {quoted}); CURRENT={len(words) + 1}; source {script}")
    res = subprocess.run(["zsh", "-f", "-c", prog], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_offers_subcommands_nested_actions_flags_and_their_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "_railscope"
    script.write_text(_script("zsh"))
    top = _zsh_offers(str(script), "")
    assert set(COMMANDS) <= {x.split(":")[0] for x in top}
    assert "doctor:Diagnose this node, or a node image / bundle (--from)" in top
    assert [x.split(":")[0] for x in _zsh_offers(str(script), "bundles", "--collector", "https://c:9842", "l")][:3] \
        == ["ls", "get", "verify"]
    assert "--json" in {x.split(":")[0] for x in _zsh_offers(str(script), "bundles", "ls", "--j")}
    assert _zsh_offers(str(script), "doctor", "--lldp", "") == ["off", "lldpd", "listen"]
    assert _zsh_offers(str(script), "report", "--collector-ca-file", "") == ["FILES"]
    assert _zsh_offers(str(script), "bundles", "--collector", "") == ["VALUE"]
