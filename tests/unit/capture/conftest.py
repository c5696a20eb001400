"""The runner tests run scripts of their own: the allowlist admits those (``kit.allow``), nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.capture import plugin
from tests.support import capture_kit as kit


class _AnyArgv:
    @staticmethod
    def check(argv: tuple[str, ...]) -> str | None:
        return None


class _WithTestTools(dict[str, Any]):
    def get(self, key: str, default: Any = None) -> Any:
        return _AnyArgv() if key in kit.TEST_TOOLS else super().get(key, default)


@pytest.fixture(autouse=True)
def _test_tools(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(plugin, "ALLOWLIST", _WithTestTools(plugin.ALLOWLIST))
    yield
    kit.TEST_TOOLS.clear()
