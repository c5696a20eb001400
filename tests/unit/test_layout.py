"""The tests' own layout (README, "Run the tests"): ``tests/unit/<part>/`` mirrors a part of the tree,
every folder of tests is a package, and what tests share is in ``tests.support``: no test module
imports another test module or a conftest, and none puts a folder of the repository on ``sys.path``.

A test folder that is no package makes pytest put it on ``sys.path``, where its files' bare names
import as top-level modules: test modules then import each other by accident, and two files of one
name in two such folders collide. Read from the files' text (``ast``), so nothing here is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
UNIT = TESTS / "unit"
#: Data, not tests: node images (with looping sysfs symlinks), fixtures, golden files.
DATA = ("images", "fixtures", "golden", "__pycache__")


def _python_files() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if not any(part in DATA for part in path.relative_to(TESTS).parts):
            yield path


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def test_every_unit_folder_mirrors_a_part_of_the_tree() -> None:
    """``tests/unit/readers`` is ``agent/readers``; ``collector``, ``proto`` and ``deploy`` are the
    repository's own folders."""
    strays = []
    for folder in sorted(p for p in UNIT.rglob("*") if p.is_dir()):
        rel = folder.relative_to(UNIT)
        if any(part in DATA for part in rel.parts):
            continue
        if not ((ROOT / "agent" / rel).is_dir() or (ROOT / rel).is_dir()):
            strays.append(str(rel))
    assert not strays, f"tests/unit folders that mirror no folder of the tree: {strays}"


def test_every_folder_of_tests_is_a_package() -> None:
    missing = sorted({str(folder.relative_to(ROOT)) for path in _python_files()
                      for folder in [path.parent, *path.parent.parents]
                      if folder.is_relative_to(TESTS) and not (folder / "__init__.py").is_file()})
    assert not missing, f"test folders without an __init__.py: {missing}"


def test_no_test_module_imports_another_and_none_edits_sys_path() -> None:
    found = []
    for path in _python_files():
        name = _module(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported: list[str] = []
            if isinstance(node, ast.ImportFrom):
                # relative to the module's package (``from .kit import x``, ``from . import kit``)
                base = ".".join([*name.split(".")[:-node.level], *filter(None, [node.module])]) if node.level \
                    else node.module or ""
                imported = [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                imported = [a.name for a in node.names]
            for mod in imported:
                # a test module or conftest, by dotted name or by a bare name off sys.path
                if _is_test_module(mod) and (mod.startswith("tests.") or "." not in mod):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {mod}")
            # sys.path.insert / append: only a test's own scratch folder (tmp_path), undone by it
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"insert", "append"} and ast.unparse(node.func.value).endswith("sys.path")
                    and "tmp_path" not in ast.unparse(node)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "share through tests.support instead:\n" + "\n".join(found)
