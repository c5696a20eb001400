"""Every reader has the same shape: pure parsers with a sample in the docstring and a thin read_*
function. What the readers may import is tests/unit/test_import_rules.py's (DESIGN §1)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agent.readers

#: modules of the package that are not a reader of the node: shared helpers, the snapshot runner, the
#: history parser, the registry, the agent's own kernel table, the firmware scope
NOT_SOURCES = {"common", "snapshot", "history", "sources", "kernel_table", "scope"}
READERS = sorted(m.name for m in pkgutil.iter_modules(agent.readers.__path__) if m.name not in NOT_SOURCES)


def test_every_source_has_a_reader() -> None:
    assert READERS == ["devlink", "ethtool", "firmware", "gpus", "health", "links", "optics", "ovs", "pci", "pcie",
                       "processes", "rdma", "thermal", "udev", "versions"]


@pytest.mark.parametrize("name", READERS)
def test_shape(name: str) -> None:
    mod = importlib.import_module(f"agent.readers.{name}")
    funcs = {n: f for n, f in inspect.getmembers(mod, inspect.isfunction) if f.__module__ == mod.__name__}
    readers = [n for n in funcs if n.startswith("read_")]
    parsers = [n for n in funcs if n.startswith("parse_")]
    assert readers, f"{name}: no read_* function"
    assert parsers, f"{name}: no parse_* function"
    for n in parsers:
        doc = inspect.getdoc(funcs[n]) or ""
        assert doc, f"{name}.{n}: no docstring"
    # the main parser of each reader shows a sample of its raw input
    assert any("ample" in (inspect.getdoc(funcs[n]) or "") for n in parsers), f"{name}: no raw sample"
    for n in readers:
        assert "host" in inspect.signature(funcs[n]).parameters, f"{name}.{n} takes no host"
    assert set(mod.__all__) <= set(dir(mod))
