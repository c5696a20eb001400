"""The deny-list (docs/design.md §7): one test per entry, each refusing a plug-in whole before anything runs;
and every shipped plug-in passes it (conformance over the plug-in registry)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from agent.capture.plugin import (
    DENY_LIST,
    Command,
    File,
    Generated,
    Plugin,
    PluginRefused,
    check_plugin,
    denied,
)
from agent.capture.plugins import PLUGINS, load
from agent.capture.runner import CaptureParams, capture
from agent.host.live import LiveHost
from tests.support.capture_kit import manifest, plugin, script

#: entry -> argv it must refuse (the forms iproute2 also accepts: abbreviations, options first)
DENIED = {
    "devlink health dump": [("devlink", "health", "dump", "show", "pci/0000:0c:00.0", "reporter", "fw_fatal"),
                            ("devlink", "-j", "health", "du", "show", "pci/0000:0c:00.0")],
    "devlink region": [("devlink", "region", "show"), ("devlink", "-j", "region", "dump", "pci/0000:0c:00.0/cr-space")],
    "devlink dev reload": [("devlink", "dev", "reload", "pci/0000:0c:00.0"), ("devlink", "dev", "rel", "pci/x")],
    "any set": [("devlink", "dev", "param", "set", "pci/0000:0c:00.0", "name", "x", "value", "1"),
                ("ip", "link", "set", "net_rail0", "down"), ("ip", "addr", "add", "10.0.0.1/24", "dev", "x"),
                ("dcb", "pfc", "set", "dev", "x"), ("ovs-vsctl", "set", "Interface", "x"),
                ("ovs-vsctl", "del-br", "br0"), ("tc", "qdisc", "replace", "dev", "x"),
                ("ip", "neigh", "flush", "all"), ("sysctl", "-w", "net.ipv4.ip_forward=1")],
    "ethtool setters": [("ethtool", "-K", "x", "tso", "off"), ("ethtool", "-s", "x", "speed", "100000"),
                        ("ethtool", "-G", "x", "rx", "8192"), ("ethtool", "--set-priv-flags", "x", "a", "on"),
                        ("ethtool", "-p", "x")],
    "ethtool -d/-e/-t": [("ethtool", "-d", "x"), ("ethtool", "-e", "x"), ("ethtool", "-t", "x"),
                         ("ethtool", "--register-dump", "x")],
    "mlxconfig": [("mlxconfig", "-d", "/dev/mst/mt4129_pciconf0", "q"), ("/usr/bin/mlxconfig", "q")],
    "mlxreg": [("mlxreg", "-d", "0000:0c:00.0", "--reg_name", "PPCNT")],
    "mstflint": [("mstflint", "-d", "0000:0c:00.0", "q"), ("flint", "-d", "x", "q")],
    "mstfwreset": [("mstfwreset", "-d", "0000:0c:00.0", "reset")],
    "rdma res show mr|qp|cm_id": [("rdma", "-j", "res", "show", "mr"), ("rdma", "resource", "show", "qp"),
                                  ("rdma", "res", "show", "cm_id")],
    "ovs-appctl dpctl/dump-flows": [("ovs-appctl", "--timeout=5", "dpctl/dump-flows"),
                                    ("ovs-dpctl", "dump-flows")],
    # -t/--target names the daemon ("-t 5" contacts a daemon called 5): no timeout; nor is a
    # --timeout after the command, which ovs-appctl hands to the command as an argument
    "ovs-appctl without --timeout": [("ovs-appctl", "upcall/show"), ("ovs-appctl", "-t", "5", "upcall/show"),
                                     ("ovs-appctl", "--target=ovs-vswitchd", "coverage/show"),
                                     ("ovs-appctl", "-t5", "coverage/show"),
                                     ("ovs-appctl", "coverage/show", "--timeout=5"), ("ovs-appctl", "-T")],
    "module loading": [("modprobe", "mlx5_core"), ("rmmod", "mlx5_ib")],
    "a shell or wrapper": [("sh", "-c", "devlink dev show"), ("/bin/bash", "-c", "true"),
                           ("ip", "netns", "exec", "cni-1", "cat", "/etc/shadow"), ("ip", "net", "e", "x", "id"),
                           ("nsenter", "-t", "1", "-n", "ip", "link")],
}


def test_every_entry_has_a_case() -> None:
    assert sorted(DENIED) == sorted(e.name for e in DENY_LIST)


@pytest.mark.parametrize("entry", sorted(DENIED))
def test_a_plan_naming_a_denied_command_is_refused_whole(entry: str, tmp_path: Path) -> None:
    for argv in DENIED[entry]:
        hit = denied(argv)
        assert hit is not None and hit.name == entry, argv
    marker = tmp_path / "ran"
    first = script(tmp_path, "first", f"touch {marker}\n")
    bad = Plugin("bad", 1, (Command((first,)), Command(DENIED[entry][0])))
    with pytest.raises(PluginRefused) as err:
        check_plugin(bad)
    assert err.value.entry == entry and entry in str(err.value)

    other_marker = tmp_path / "other"
    fine = Plugin("fine", 1, (Command((script(tmp_path, "other", f"touch {other_marker}\n"),)),))
    out = io.BytesIO()
    (tmp_path / "root").mkdir()
    capture(LiveHost(str(tmp_path / "root")), out, CaptureParams(node="n", nice=0),
            plugin_modules=[plugin(bad), plugin(fine)], staging_dir=str(tmp_path))
    assert not marker.exists()  # nothing of the refused plug-in ran, not even its harmless first step
    assert other_marker.exists()  # the other plugins still ran
    m = manifest(out.getvalue())
    refused = {p["name"]: p.get("refused") for p in m["plugins"]}
    assert refused["fine"] is None and entry in refused["bad"]
    assert not [i for i in m["items"] if i.get("plugin") == "bad"]


ALLOWED = [
    ("devlink", "-j", "health", "show"), ("devlink", "-j", "health", "diagnose", "pci/x", "reporter", "fw"),
    ("devlink", "-j", "dev", "param", "show"), ("devlink", "-j", "resource", "show", "pci/x"),
    ("ethtool", "-S", "x"), ("ethtool", "-m", "x"), ("ethtool", "-k", "x"), ("ethtool", "--show-fec", "x"),
    ("rdma", "-j", "res", "show"), ("rdma", "-j", "statistic", "show"), ("ip", "-d", "-s", "link", "show"),
    ("ip", "route", "show", "table", "all"), ("ovs-appctl", "--timeout=5", "dpctl/show", "-s"),
    ("ovs-appctl", "-T", "5", "upcall/show"), ("ovs-appctl", "-T5", "coverage/show"),
    ("ovs-appctl", "-t", "ovs-vswitchd", "--timeout", "5", "coverage/show"),
    ("dcb", "-j", "buffer", "show", "dev", "x"), ("ovs-vsctl", "--timeout=5", "show"),
    ("ip", "-n", "cni-1", "-d", "addr", "show"), ("ip", "netns", "list"),
]


@pytest.mark.parametrize("argv", ALLOWED)
def test_the_reads_capture_needs_are_allowed(argv: tuple[str, ...]) -> None:
    assert denied(argv) is None


def test_every_shipped_plan_passes_the_deny_list_and_is_declared_as_data() -> None:
    mods = load()
    assert [m.PLUGIN.name for m in mods] == list(PLUGINS)
    for mod in mods:
        check_plugin(mod.PLUGIN)
        assert mod.PLUGIN.version >= 1 and mod.PLUGIN.description
        for step in mod.PLUGIN.steps:
            assert isinstance(step, Command | File | Generated)
            if isinstance(step, Command):
                assert step.timeout_s > 0 and step.max_bytes > 0
                assert step.firmware in (None, "rail", "handle", "rdma", "pf")


def test_a_rail_pf_handle_on_another_bus_is_a_handle_for_the_plans() -> None:
    """The per-handle steps (``devlink dev info / resource show {handle}``, health diagnose)
    reach the rail PFs' devlink instances as the readers name them: ``<parent bus>/<parent device>``
    of the rail netdev when devlink lists it — netdevsim's in the kernel lab, not only ``pci/<bdf>``
    (the lab's capture had recorded "nothing to read: no handle on this node")."""
    from pathlib import Path

    from agent.capture.context import CaptureContext, fill_from_snapshot
    from agent.host.recorded import RecordedHost
    from agent.readers.snapshot import take_snapshot

    images = Path(__file__).resolve().parents[2] / "images"
    want = {"klab-netdevsim-switchdev": {"netdevsim/netdevsim10": "netdevsim/netdevsim10",
                                         "netdevsim/netdevsim11": "netdevsim/netdevsim11"},
            "spectrumx-2rail-healthy": {"pci/0000:0c:00.0": "0000:0c:00.0", "pci/0000:8d:00.0": "0000:8d:00.0"}}
    for name, handles in want.items():
        with RecordedHost(str(images / name)) as host:
            ctx = CaptureContext(host=host)
            fill_from_snapshot(ctx, take_snapshot(host))
        assert ctx.handle_pf == handles, name
