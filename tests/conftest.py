"""Shared test helpers: where the fixtures are, and skips for environments that lack a real part."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import EXAMPLE_IMAGE

# `.venv/bin/python -m pytest` (the README's test command) does not put the venv's bin on PATH, where
# the test extra's programs are (`weed`, `ruff`) and railscope's own: without this they would skip.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, [_BIN, os.environ.get("PATH")]))

@pytest.fixture
def example_image() -> Path:
    # A missing image is a broken checkout, never a skip: it would hide every test that reads it.
    assert EXAMPLE_IMAGE.is_dir(), f"the example image is missing: {EXAMPLE_IMAGE}"
    return EXAMPLE_IMAGE


@contextmanager
def _held_elsewhere(gate: Any, key: str) -> Iterator[None]:
    """Another thread's firmware read of ``key`` (a PCI function) stuck in the driver: it holds the
    firmware gate's lock of ``key`` for the ``with`` body."""
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with gate.hold(key, 1.0):
            holding.set()
            done.wait(30)

    th = threading.Thread(target=hold, name=f"holds {key}")
    th.start()
    try:
        assert holding.wait(5), f"could not take the gate of {key}"
        yield
    finally:
        done.set()
        th.join()


@pytest.fixture
def held_elsewhere() -> Callable[[Any, str], AbstractContextManager[None]]:
    """``with held_elsewhere(gate, "0000:0c:00.0"):`` — that PF's gate is held by another thread."""
    return _held_elsewhere
