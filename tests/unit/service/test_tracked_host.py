"""The worker threads' host: what is being read now, one firmware read at a time, stuck tools skipped."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent.host.recorded import open_image
from agent.service.tracked_host import Progress, TrackedHost


def test_commands_pass_through_and_name_their_device(example_image: Path) -> None:
    seen = []
    progress = Progress()
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, progress, threading.Lock())
        original = inner.run

        def spy(argv, timeout_s=10.0, max_bytes=8 << 20):
            seen.append(progress.get())
            return original(argv, timeout_s, max_bytes)

        inner.run = spy  # type: ignore[method-assign]
        res = host.run(["devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.0"])
        assert res.ok and b"switchdev" in res.stdout
        assert seen == ["pci/0000:0c:00.0"] and progress.get() == ""
        assert host.read_text("/proc/sys/kernel/osrelease").strip() == "6.8.0-60-generic"


def test_a_capture_skips_what_is_stuck_in_the_agent(example_image: Path) -> None:
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, Progress(), threading.Lock(),
                           hung=frozenset({("devlink", ""), ("ethtool", "net_rail0")}))
        res = host.run(["devlink", "-j", "dev", "show"])
        assert res.missing and "stuck in the agent" in (res.reason or "")
        assert host.run(["ethtool", "-S", "net_rail0"]).missing
        assert host.run(["ethtool", "-S", "net_rail1"]).ok
        with pytest.raises(OSError, match="stuck"):
            host.ethtool_stats("net_rail0")
        assert host.run(["rdma", "-j", "link", "show"]).ok


def test_a_firmware_read_held_elsewhere_is_skipped_after_the_wait(example_image: Path) -> None:
    lock = threading.Lock()
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, Progress(), lock, firmware_wait_s=0.05)
        with lock:  # another thread's ethtool read, stuck in the driver
            res = host.run(["ethtool", "-S", "net_rail0"])
            with pytest.raises(OSError):
                host.ethtool_drvinfo("net_rail0")
        assert res.missing and "another firmware read" in (res.reason or "")
        assert host.run(["ethtool", "-S", "net_rail0"]).ok
