"""Shared test helpers: where the fixtures are, and skips for environments that lack a real part."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
IMAGES = TESTS / "images"
PUBLIC = TESTS / "fixtures" / "public"
#: The shared example image lives beside the project (../shared); CI has a copy there too.
SHARED = ROOT.parent / "shared"
EXAMPLE_IMAGE = SHARED / "fixtures" / "images" / "spectrumx-2rail-healthy"


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


@pytest.fixture
def example_image() -> Path:
    if not EXAMPLE_IMAGE.is_dir():
        pytest.skip(f"the shared example image is not at {EXAMPLE_IMAGE}")
    return EXAMPLE_IMAGE
