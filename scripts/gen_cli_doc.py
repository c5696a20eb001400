"""Write docs/cli.md, the command-line reference, from railscope's parser (``agent.cli.build_parser``).

    python3 scripts/gen_cli_doc.py           # rewrite docs/cli.md
    python3 scripts/gen_cli_doc.py --check   # exit 1 when docs/cli.md is not what the parser gives

Each (sub)command's section is its ``--help`` as the program prints it, 100 columns wide, with no
``RAILSCOPE_*`` variable of the machine it runs on in the defaults it shows.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.cli import build_parser, walk  # noqa: E402

DOC = ROOT / "docs" / "cli.md"
WIDTH = 100


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=WIDTH, max_help_position=30)


def render() -> str:
    """docs/cli.md as the parser gives it."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("RAILSCOPE_") or k == "COLUMNS"}
    for k in saved:
        del os.environ[k]  # a variable's value would become a documented default
    # argparse wraps to the terminal's width (COLUMNS), the subcommands' usage lines among them
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        return _render(build_parser())
    finally:
        del os.environ["COLUMNS"]
        os.environ.update(saved)


def _render(parser: argparse.ArgumentParser) -> str:
    out = [
        "# railscope command-line reference",
        "",
        "Generated from the parser by `python3 scripts/gen_cli_doc.py` (a test checks it is current): each",
        "section is the command's `--help`. Every flag can also come from `RAILSCOPE_<FLAG>` where its help",
        "says so; `railscope completion bash|zsh` prints a shell completion script made from the same parser.",
        "",
    ]
    sections = list(walk(parser))
    for path, _p in sections:
        name = " ".join(("railscope", *path))
        out.append(f"- [{name}](#{name.replace(' ', '-')})")
    out.append("")
    for path, p in sections:
        p.formatter_class = _formatter
        out += [f"## {' '.join(('railscope', *path))}", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: python3 scripts/gen_cli_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
