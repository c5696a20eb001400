"""docs/design.md §1 for the wire format and the collector, transitively: ``proto`` imports neither ``agent``
nor ``collector``; ``collector`` never the live host, the capture runner or the agent service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import importlib, json, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
print(json.dumps(sorted(sys.modules)))
"""

FORBIDDEN_FOR_COLLECTOR = ("agent.host.live", "agent.service", "agent.capture", "pyroute2")


def loaded(*modules: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_proto_imports_neither_agent_nor_collector() -> None:
    mods = loaded("proto.frames", "proto.keys")
    assert [m for m in mods if m.split(".")[0] in ("agent", "collector")] == []


def test_collector_stays_off_the_live_node() -> None:
    mods = loaded("collector.app", "collector.storage.local", "collector.storage.s3")
    bad = [m for m in mods if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_FOR_COLLECTOR)]
    assert bad == []


def test_the_uploader_needs_no_collector() -> None:
    mods = loaded("agent.capture.upload")
    assert [m for m in mods if m.split(".")[0] == "collector"] == []


def _collector_modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted((ROOT / "collector").rglob("*.py"))}


def test_every_app_key_is_declared_in_one_module() -> None:
    """docs/design.md §11: ``web.AppKey`` declarations in one module; a handler module reads another's state
    through them, never by importing that module."""
    declared = {name for name, path in _collector_modules().items() if "AppKey(" in path.read_text()}
    assert declared == {"collector.state"}


def test_no_import_circle_among_the_collectors_modules() -> None:
    """Each module of the collector can be read (and tested) without the one that imports it."""
    import ast

    mods = _collector_modules()
    deps: dict[str, set[str]] = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        out = set()
        tree = ast.parse(path.read_text())
        for block in [n for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]:
            block.body = []  # never runs: a type annotation is no import
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                out |= {t for t in (target, *(f"{target}.{a.name}" for a in node.names)) if t in mods}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("collector"):
                out |= {t for t in (node.module, *(f"{node.module}.{a.name}" for a in node.names)) if t in mods}
        # a package that opens one of its own modules (the store picking local or S3) is no circle
        deps[name] = {d for d in out - {name, "collector"} if not d.startswith(name + ".")}

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            for d in deps[todo.pop()]:
                if d == b:
                    return True
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False

    circles = sorted((a, b) for a in mods for b in deps[a] if reaches(b, a))
    assert circles == []
