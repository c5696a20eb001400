"""``railscope completion bash|zsh``: a completion script made from the parser itself, so every
subcommand, nested action (``bundles ls``) and flag is offered as ``--help`` shows it, and a new
flag needs nothing here.

    railscope completion bash > /etc/bash_completion.d/railscope    # or: source <(railscope completion bash)
    railscope completion zsh > "${fpath[1]}/_railscope"             # a directory on $fpath, then compinit

A flag whose value is a file or a directory (its metavar says FILE, DIR or PATH) completes file
names; a flag with choices completes them; any other value is left to the person.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

__all__ = ["Level", "levels", "register", "render_bash", "render_zsh", "run"]

SHELLS = ("bash", "zsh")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, metavar="{bash,zsh}",
                   help="The shell to print the completion script for. Default: none, name one.")


@dataclass
class Level:
    """One (sub)command of the parser: what may follow it."""

    path: tuple[str, ...]
    #: every option string, with the first sentence of its help
    flags: list[tuple[str, str]] = field(default_factory=list)
    #: the nested commands (``ls``, ``get``, ``verify`` of ``bundles``), with their help
    commands: list[tuple[str, str]] = field(default_factory=list)
    #: the names of the nested commands (a word that moves completion one level down)
    nested: list[str] = field(default_factory=list)
    #: value flags that complete file names
    file_flags: list[str] = field(default_factory=list)
    #: value flags with a fixed set of values
    choice_flags: dict[str, list[str]] = field(default_factory=dict)
    #: every flag that takes a value (its value is not a command word)
    value_flags: list[str] = field(default_factory=list)


_FILEISH = re.compile(r"FILE|DIR|PATH")


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    if text == argparse.SUPPRESS:
        return ""
    m = re.match(r"(.+?[.:;])(\s|$)", text)
    return (m.group(1) if m else text)[:100].rstrip(".:;")


def levels() -> list[Level]:
    """Every level of ``railscope``'s parser, the top first."""
    from agent.cli import build_parser, walk

    out = []
    for path, parser in walk(build_parser()):
        lvl = Level(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                lvl.commands = [(name, _first_sentence(helps.get(name))) for name in action.choices]
                lvl.nested = list(action.choices)
                continue
            braced = re.fullmatch(r"\{([^{}]+)\}", str(action.metavar or ""))
            choices = [str(c) for c in action.choices] if action.choices else (
                braced.group(1).split(",") if braced else [])
            if not action.option_strings:
                # a positional with fixed values (completion's shell) is offered as the commands are
                lvl.commands += [(c, "") for c in choices]
                continue
            for opt in action.option_strings:
                lvl.flags.append((opt, _first_sentence(action.help)))
                if action.nargs == 0:
                    continue
                lvl.value_flags.append(opt)
                if choices:
                    lvl.choice_flags[opt] = choices
                elif _FILEISH.search(str(action.metavar or "")):
                    lvl.file_flags.append(opt)
        out.append(lvl)
    return out


def _bash_words(words: list[str]) -> str:
    return " ".join(words)


def render_bash() -> str:
    lv = levels()
    known = [lvl for lvl in lv if lvl.nested]
    lines = [
        "# bash completion for railscope, made by `railscope completion bash` from its parser.",
        "# Install: railscope completion bash > /etc/bash_completion.d/railscope, or source <(railscope completion bash)",
        "_railscope() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local path="" w i skip=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        if [[ -n "$skip" ]]; then skip=""; continue; fi',
        '        case "$path|$w" in',
    ]
    for lvl in lv:
        if lvl.value_flags:
            pats = "|".join(f'"{" ".join(lvl.path)}|{f}"' for f in lvl.value_flags)
            lines.append(f"            {pats}) skip=1 ;;")
    for lvl in known:
        here = " ".join(lvl.path)
        pats = "|".join(f'"{here}|{name}"' for name in lvl.nested)
        step = 'path="$w"' if not lvl.path else 'path="$path $w"'
        lines.append(f"            {pats}) {step} ;;")
    lines += ["        esac", "    done", '    case "$path|$prev" in']
    for lvl in lv:
        here = " ".join(lvl.path)
        if lvl.file_flags:
            pats = "|".join(f'"{here}|{f}"' for f in lvl.file_flags)
            lines.append(f'        {pats}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
        for flag, choices in lvl.choice_flags.items():
            lines.append(f'        "{here}|{flag}") COMPREPLY=($(compgen -W "{_bash_words(choices)}" -- "$cur")); return ;;')
        rest = [f for f in lvl.value_flags if f not in lvl.file_flags and f not in lvl.choice_flags]
        if rest:
            pats = "|".join(f'"{here}|{f}"' for f in rest)
            lines.append(f"        {pats}) return ;;")
    lines += ["    esac", "    local words=\"\"", '    case "$path" in']
    for lvl in lv:
        words = [name for name, _ in lvl.commands] + [f for f, _ in lvl.flags]
        lines.append(f'        "{" ".join(lvl.path)}") words="{_bash_words(words)}" ;;')
    lines += [
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _railscope railscope",
        "",
    ]
    return "\n".join(lines)


def _zq(text: str) -> str:
    """``text`` inside single quotes in zsh."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zitem(name: str, desc: str) -> str:
    """One ``_describe`` item, ``name:description``, each part's own ``:`` escaped."""
    name, desc = name.replace(":", "\\:"), desc.replace(":", "\\:")
    return _zq(f"{name}:{desc}" if desc else name)


def render_zsh() -> str:
    lv = levels()
    known = [lvl for lvl in lv if lvl.nested]
    lines = [
        "#compdef railscope",
        "# zsh completion for railscope, made by `railscope completion zsh` from its parser.",
        '# Install: railscope completion zsh > "${fpath[1]}/_railscope" (a directory on $fpath), then compinit.',
        "_railscope() {",
        '    local rs_path="" w i skip="" cur="${words[CURRENT]}" prev="${words[CURRENT-1]}"',
        "    local -a rs_items",
        "    for (( i = 2; i < CURRENT; i++ )); do",
        '        w="${words[i]}"',
        '        if [[ -n "$skip" ]]; then skip=""; continue; fi',
        '        case "$rs_path|$w" in',
    ]
    for lvl in lv:
        if lvl.value_flags:
            pats = "|".join(f"'{' '.join(lvl.path)}|{f}'" for f in lvl.value_flags)
            lines.append(f"            ({pats}) skip=1 ;;")
    for lvl in known:
        here = " ".join(lvl.path)
        pats = "|".join(f"'{here}|{name}'" for name in lvl.nested)
        step = 'rs_path="$w"' if not lvl.path else 'rs_path="$rs_path $w"'
        lines.append(f"            ({pats}) {step} ;;")
    lines += ["        esac", "    done", '    case "$rs_path|$prev" in']
    for lvl in lv:
        here = " ".join(lvl.path)
        if lvl.file_flags:
            pats = "|".join(f"'{here}|{f}'" for f in lvl.file_flags)
            lines.append(f"        ({pats}) _files; return ;;")
        for flag, choices in lvl.choice_flags.items():
            lines.append(f"        ('{here}|{flag}') compadd -- {' '.join(_zq(c) for c in choices)}; return ;;")
        rest = [f for f in lvl.value_flags if f not in lvl.file_flags and f not in lvl.choice_flags]
        if rest:
            pats = "|".join(f"'{here}|{f}'" for f in rest)
            lines.append(f"        ({pats}) _message 'a value'; return ;;")
    lines += ["    esac", '    case "$rs_path" in']
    for lvl in lv:
        items = [*lvl.commands, *lvl.flags]
        body = " ".join(_zitem(name, desc) for name, desc in items)
        lines.append(f"        ('{' '.join(lvl.path)}') rs_items=({body}) ;;")
    lines += [
        "    esac",
        "    _describe -t railscope 'railscope' rs_items",
        '    [[ "$cur" == -* ]] || _files',
        "}",
        '_railscope "$@"',
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(render_bash() if args.shell == "bash" else render_zsh())
    return 0
