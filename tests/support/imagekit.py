"""Build small node images (docs/design.md §2 layout) in a temporary directory for reader tests.

The readers then run against the real ``RecordedHost``, not a mock: files under ``fs/``, commands
under ``cmd/<slug>``, the link dump under ``netlink/links.json``, and a manifest when asked.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from agent.host import slug
from agent.host.recorded import RecordedHost, open_image

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "public"


def public(rel: str) -> str:
    return (PUBLIC / rel).read_text(encoding="utf-8")


def recorded_body(rel: str) -> tuple[str, int]:
    """A netdevsim recording (``$ cmd`` first line, ``[rc=N]`` last line) -> (output, rc)."""
    lines = public(rel).splitlines()
    assert lines[0].startswith("$ ")
    m = re.fullmatch(r"\[rc=(\d+)\]", lines[-1].strip())
    assert m, rel
    return "\n".join(lines[1:-1]) + "\n", int(m.group(1))


def make_image(
    root: Path,
    files: dict[str, str | bytes] | None = None,
    symlinks: dict[str, str] | None = None,
    cmds: dict[tuple[str, ...], tuple[str, int] | tuple[str, int, str]] | None = None,
    links: list[dict[str, Any]] | None = None,
    manifest: dict[str, Any] | None = None,
) -> RecordedHost:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fs").mkdir(exist_ok=True)
    for path, content in (files or {}).items():
        p = root / "fs" / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    for path, target in (symlinks or {}).items():
        p = root / "fs" / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, p)
    if cmds:
        (root / "cmd").mkdir(exist_ok=True)
        for argv, spec in cmds.items():
            stem = root / "cmd" / slug(list(argv))
            stem.with_name(stem.name + ".stdout").write_text(spec[0], encoding="utf-8")
            stem.with_name(stem.name + ".rc").write_text(f"{spec[1]}\n", encoding="ascii")
            if len(spec) > 2:
                stem.with_name(stem.name + ".stderr").write_text(str(spec[2]), encoding="utf-8")
    if links is not None:
        (root / "netlink").mkdir(exist_ok=True)
        (root / "netlink" / "links.json").write_text(json.dumps({"links": links}), encoding="utf-8")
    if manifest is not None:
        (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return open_image(str(root))
