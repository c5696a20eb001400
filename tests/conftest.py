"""Shared test helpers: where the fixtures are, and skips for environments that lack a real part."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# `.venv/bin/python -m pytest` (the README's test command) does not put the venv's bin on PATH, where
# the test extra's programs are (`weed`, `ruff`) and railscope's own: without this they would skip.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, [_BIN, os.environ.get("PATH")]))

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
IMAGES = TESTS / "images"
PUBLIC = TESTS / "fixtures" / "public"
#: The example image (the README's): the repository's own copy, so that a clone anywhere runs every test.
EXAMPLE_IMAGE = IMAGES / "spectrumx-2rail-healthy"


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


@pytest.fixture
def example_image() -> Path:
    # A missing image is a broken checkout, never a skip: it would hide every test that reads it.
    assert EXAMPLE_IMAGE.is_dir(), f"the example image is missing: {EXAMPLE_IMAGE}"
    return EXAMPLE_IMAGE
