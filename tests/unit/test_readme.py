"""The README's literal path: its marked blocks parse, its example exists and prints what the README
shows, and the ``test`` extra installs every module the tests import (without PyYAML, collection
aborted and zero tests ran). The commands themselves run in a fresh venv in
``tests/integration/test_readme_path.py`` and in ``.ci/run``."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import script

readme_commands = script("scripts/readme_commands.py")

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_marked_blocks_are_there_and_install_into_a_venv() -> None:
    found = readme_commands.blocks(README)
    assert {"install", "test", "example"} <= set(found)
    install = readme_commands.commands(found["install"])
    assert install[0] == "python3 -m venv .venv && .venv/bin/pip install ."
    # PEP 668: no pip outside the venv, on any line a reader copies.
    for cmd in install + readme_commands.commands(found["test"]):
        for word in re.findall(r"\S*pip\b", cmd):
            assert word.startswith(".venv/bin/"), cmd
    # The full run: pyproject's addopts make a plain `pytest` the fast loop, which CI must not be.
    assert readme_commands.commands(found["test"]) == [
        ".venv/bin/pip install '.[test]' && .venv/bin/python -m pytest -m \"\""]


def test_a_plain_pytest_is_the_fast_loop_and_the_readme_says_which_is_which() -> None:
    """pyproject's addopts deselect the kernel lab and the slow tests; the README's test command (CI's)
    undoes that with ``-m ""``, and the README names both commands."""
    opts = shlex.split(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                       ["tool"]["pytest"]["ini_options"]["addopts"])
    assert opts[opts.index("-m") + 1] == "not klab and not slow"
    (test_cmd,) = readme_commands.commands(readme_commands.blocks(README)["test"])
    argv = shlex.split(test_cmd.split("&&")[-1])
    assert argv[-2:] == ["-m", ""], "the README's test command must be the full run"
    assert "the fast loop" in README and "the full run" in README


def test_the_example_path_exists_and_its_output_is_the_real_output() -> None:
    (first, *shown) = readme_commands.blocks(README)["example"]
    assert first.startswith("$ .venv/bin/railscope ")
    argv = shlex.split(first[2:])[1:]
    path = ROOT / argv[argv.index("--from") + 1]
    assert path.is_dir(), f"the README's example image {path} does not exist"
    got = subprocess.run([sys.executable, "-m", "agent.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.rstrip("\n").splitlines() == shown


def _imports(paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _closure(requirements: list[str]) -> set[str]:
    """The distributions a list of requirements installs, with their own requirements (as installed here)."""
    todo = [re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0] for r in requirements]
    seen: set[str] = set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [re.split(r"[\s<>=!~\[;(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
    return seen


@pytest.mark.slow
def test_the_test_extra_installs_every_module_the_tests_import() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = _closure(project["dependencies"] + project["optional-dependencies"]["test"])
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {p.name for p in (ROOT / "tests").rglob("*")
                                                                  if p.is_dir()}
    local |= {p.stem for p in (ROOT / "bench").glob("*.py")} | {p.stem for p in (ROOT / "scripts").glob("*.py")}
    local |= {"agent", "collector", "proto", "tests"}
    files = [p for p in (ROOT / "tests").rglob("*.py") if "images" not in p.parts]
    third_party = _imports(files) - set(sys.stdlib_module_names) - local
    providers = md.packages_distributions()
    missing = {}
    for mod in sorted(third_party):
        dists = {d.lower().replace("_", "-") for d in providers.get(mod, [])}
        if not dists & installed:
            missing[mod] = sorted(dists) or "not installed here"
    assert not missing, f"the tests import modules the test extra does not install: {missing}"


def test_the_license_file_is_the_license_pyproject_names() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    head = " ".join((ROOT / "LICENSE").read_text(encoding="utf-8").split()[:4])
    assert head == "Apache License Version 2.0,"
