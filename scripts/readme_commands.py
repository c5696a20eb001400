"""Print the commands of one of the README's marked code blocks, one a line, comments stripped.

A block is marked by an HTML comment on the line before its fence, ``<!-- readme: NAME -->``, so the
README is the only copy of the commands that CI (``.ci/run``) and ``tests/integration/test_readme_path.py``
run: they cannot drift from what a reader types.

    python3 scripts/readme_commands.py install     # the set-up commands
    python3 scripts/readme_commands.py test        # the test command
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
_MARK = re.compile(r"^<!-- readme: ([a-z-]+) -->$")


def blocks(text: str) -> dict[str, list[str]]:
    """Every marked block's lines, by name (the fence lines excluded)."""
    found: dict[str, list[str]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _MARK.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"README line {i + 1}: the mark {m.group(1)!r} is not followed by a code fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"README line {i + 2}: the block {m.group(1)!r} is never closed")
        found[m.group(1)] = lines[i + 2:end]
    return found


def commands(block: list[str]) -> list[str]:
    """The shell commands of a block: each line without its trailing ``# comment``."""
    out = []
    for line in block:
        # A comment is two or more spaces then '#': none of the commands holds that sequence itself.
        cmd = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: readme_commands.py BLOCK", file=sys.stderr)
        return 3
    found = blocks(README.read_text(encoding="utf-8"))
    if argv[0] not in found:
        print(f"README.md has no block marked {argv[0]!r} (has: {', '.join(sorted(found))})", file=sys.stderr)
        return 3
    for cmd in commands(found[argv[0]]):
        print(cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
