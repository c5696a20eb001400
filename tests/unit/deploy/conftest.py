"""The chart, loaded once per test module (tests.support.chart renders it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    from tests.support.chart import load  # skips where the Helm engine is missing

    loaded = load()
    yield loaded
    loaded.close()
