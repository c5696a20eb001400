"""Every reader has the same shape: pure parsers with a sample in the docstring and a thin read_*
function. What the readers may import is tests/unit/test_import_rules.py's (docs/design.md §1)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agent.readers
from agent.readers.source import Source
from agent.readers.sources import SOURCES, discover

#: modules of the package that are not a reader of the node: shared helpers, the snapshot runner, the
#: history parser, the registry, the agent's own kernel table, the firmware scope
NOT_READERS = {"common", "snapshot", "history", "source", "sources", "kernel_table", "scope"}
READERS = sorted(m.name for m in pkgutil.iter_modules(agent.readers.__path__) if m.name not in NOT_READERS)


def test_every_source_is_declared_by_the_module_of_its_name() -> None:
    assert SOURCES, "the registry found no source"
    for src in SOURCES:
        mod = importlib.import_module(f"agent.readers.{src.name}")
        assert mod.SOURCE is src
        assert src.read.__module__ == mod.__name__, f"{src.name}: its read function lives in {src.read.__module__}"
    # and every module that declares a SOURCE is in the registry
    declared = {n for n in READERS if isinstance(getattr(importlib.import_module(f"agent.readers.{n}"), "SOURCE", None),
                                                 Source)}
    assert declared == {s.name for s in SOURCES}
    assert discover() == SOURCES


@pytest.mark.parametrize("name", READERS)
def test_shape(name: str) -> None:
    mod = importlib.import_module(f"agent.readers.{name}")
    funcs = {n: f for n, f in inspect.getmembers(mod, inspect.isfunction) if f.__module__ == mod.__name__}
    source = getattr(mod, "SOURCE", None)
    own = source.read.__name__ if isinstance(source, Source) else None
    readers = [n for n in funcs if n.startswith("read_") and n != own]
    parsers = [n for n in funcs if n.startswith("parse_")]
    if own is not None:
        assert "host" in inspect.signature(funcs[own]).parameters, f"{name}.{own} takes no host"
        if not readers and not parsers:
            return  # a source that composes other readers (config: rules + OVS; counters: ethtool + sysfs)
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
