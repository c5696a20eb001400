"""The worker threads' host: what is being read now, one firmware read at a time, stuck tools skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.host.firmware import FirmwareGate, function_of
from agent.host.recorded import open_image
from agent.service.tracked_host import Progress, TrackedHost


def test_commands_pass_through_and_name_their_device(example_image: Path) -> None:
    seen = []
    progress = Progress()
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, progress, FirmwareGate())
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
        host = TrackedHost(inner, Progress(), FirmwareGate(),
                           hung=frozenset({("devlink", ""), ("ethtool", "net_rail0")}))
        res = host.run(["devlink", "-j", "dev", "show"])
        assert res.missing and "stuck in the agent" in (res.reason or "")
        assert host.run(["ethtool", "-S", "net_rail0"]).missing
        assert host.run(["ethtool", "-S", "net_rail1"]).ok
        with pytest.raises(OSError, match="stuck"):
            host.ethtool_stats("net_rail0")
        assert host.run(["rdma", "-j", "link", "show"]).ok


def test_a_firmware_read_held_elsewhere_is_skipped_after_the_wait(example_image: Path, held_elsewhere: Any) -> None:
    gate = FirmwareGate()
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, Progress(), gate, firmware_wait_s=0.05)
        with held_elsewhere(gate, "0000:0c:00.0"):  # net_rail0's PCI function
            res = host.run(["ethtool", "-S", "net_rail0"])
            with pytest.raises(OSError):
                host.ethtool_drvinfo("net_rail0")
            # One lock per PCI function: the other NIC's rail is read meanwhile.
            assert host.run(["ethtool", "-S", "net_rail1"]).ok
            # Not a firmware read by the registry's word (no firmware-touching source runs it).
            assert host.run(["devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.0"]).ok
        assert res.missing and "another firmware read" in (res.reason or "")
        assert host.run(["ethtool", "-S", "net_rail0"]).ok


def test_the_firmware_gate_is_keyed_by_pci_function(example_image: Path) -> None:
    with open_image(str(example_image)) as inner:
        assert function_of(inner, "net_rail0") == "0000:0c:00.0"
        assert function_of(inner, "net_rail0_0") == "0000:0c:00.0"  # its representor: the same firmware
        assert function_of(inner, "pci/0000:8d:00.0") == "0000:8d:00.0" == function_of(inner, "net_rail1")
        assert function_of(inner, "lo") == "lo"  # on no PCI function: its own key


def test_the_json_module_read_waits_for_its_function_and_the_version_query_for_nothing(
        example_image: Path, held_elsewhere: Any) -> None:
    gate = FirmwareGate()
    with open_image(str(example_image)) as inner:
        host = TrackedHost(inner, Progress(), gate, firmware_wait_s=0.05)
        with held_elsewhere(gate, "0000:0c:00.0"):  # net_rail0's PCI function
            res = host.run(["ethtool", "--json", "-m", "net_rail0"])
            version = host.run(["ethtool", "--version"])
        assert res.missing and "another firmware read" in (res.reason or "")
        # not held back: the image has no record of it, which is its answer
        assert version.missing and "not recorded" in (version.reason or "")
