"""Detectors are pure (DESIGN §1): no netlink, no processes, no files, no clock of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agent.detectors

DETECTORS = sorted(Path(agent.detectors.__file__).parent.glob("*.py"))
FORBIDDEN_MODULES = {"pyroute2", "subprocess", "os", "time", "datetime", "socket", "pathlib", "shutil", "io",
                     "aiohttp", "prometheus_client", "threading", "asyncio", "random"}
FORBIDDEN_AGENT = ("agent.host", "agent.readers", "agent.metrics", "agent.service", "agent.commands")
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def _imports(tree: ast.AST, module: str) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.rsplit(".", node.level)[0]
                out.append(f"{base}.{node.module}" if node.module else base)
            else:
                out.append(node.module or "")
    return out


@pytest.mark.parametrize("path", DETECTORS, ids=lambda p: p.name)
def test_detector_module_is_pure(path: Path) -> None:
    module = f"agent.detectors.{path.stem}"
    tree = ast.parse(path.read_text(), str(path))
    for name in _imports(tree, module):
        assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"
        assert not name.startswith(FORBIDDEN_AGENT), f"{path.name} imports {name}"
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & FORBIDDEN_CALLS, f"{path.name} calls {calls & FORBIDDEN_CALLS}"


def test_every_detector_module_is_checked() -> None:
    names = {p.stem for p in DETECTORS}
    assert {"link_flapping", "config_flapping", "representor_stale", "pfc_storm", "lossless_drops",
            "driver_reload", "engine", "feed", "observations"} <= names
