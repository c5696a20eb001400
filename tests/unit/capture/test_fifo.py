"""A FIFO (or any non-regular file) under the host root is listed as not available, never opened
for a blocking read: neither the capture's file copy nor the replay readers' file door stall."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.capture.plugins import load
from agent.capture.runner import CaptureParams, capture
from agent.host.live import LiveHost
from agent.host.paths import NotRegularFile, RootedFS, open_regular
from tests.support.capture_kit import items, members

RULE = 'SUBSYSTEM=="net", ACTION=="add", ATTR{address}=="aa:bb:cc:00:00:01", NAME="net_rail0"\n'


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    rules = root / "etc/udev/rules.d"
    rules.mkdir(parents=True)
    (rules / "70-rails.rules").write_text(RULE)
    os.mkfifo(rules / "99-fifo.rules")
    return root


def _bounded(fn: Any) -> Any:
    """Run ``fn`` in a thread; a read blocked on the FIFO would never return (no writer comes)."""
    box: list[Any] = []

    def work() -> None:
        try:
            box.append((fn(), None))
        except Exception as exc:  # re-raised in the test's thread
            box.append((None, exc))

    th = threading.Thread(target=work, daemon=True)
    th.start()
    th.join(120)
    assert not th.is_alive(), "blocked on the FIFO"
    value, exc = box[0]
    if exc is not None:
        raise exc
    return value


def test_the_file_door_says_not_available_for_a_fifo(tmp_path: Path) -> None:
    root = _root(tmp_path)
    fs = RootedFS(str(root))
    assert _bounded(lambda: fs.read_bytes("/etc/udev/rules.d/99-fifo.rules")) is None
    assert fs.read_text("/etc/udev/rules.d/70-rails.rules") == RULE
    assert _bounded(lambda: LiveHost(str(root)).read_text("/etc/udev/rules.d/99-fifo.rules")) is None
    with pytest.raises(NotRegularFile, match="not a regular file"):
        _bounded(lambda: open_regular(str(root / "etc/udev/rules.d/99-fifo.rules")))
    with open_regular(str(root / "etc/udev/rules.d/70-rails.rules")) as fh:
        assert fh.read() == RULE.encode()


def test_a_capture_lists_a_fifo_as_not_a_regular_file_and_keeps_the_rest(tmp_path: Path) -> None:
    root = _root(tmp_path)
    params = CaptureParams(node="n", nice=0, recorder_gap_s=0, deadline_s=8)

    def run() -> bytes:
        out = io.BytesIO()
        capture(LiveHost(str(root)), out, params, plugin_modules=load(("replay", "udev")), staging_dir=str(tmp_path))
        return out.getvalue()

    bundle = _bounded(run)
    got = items(bundle)
    fifo = got["fs/etc/udev/rules.d/99-fifo.rules"]
    assert fifo["skipped"] and fifo["reason"].endswith("not available: not a regular file")
    assert members(bundle)["fs/etc/udev/rules.d/70-rails.rules"] == RULE.encode()
