"""The allowlist: only the read-only forms the plugins and the readers use run; abbreviations,
options that hide the next word, batch files, wrappers and unlisted state changes are refused, on
the declared argv, after placeholder expansion, and in the recording host's run."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from agent.capture.plugin import Command, Plugin, PluginRefused, check_plugin, not_allowed, refusal
from agent.capture.plugins import load
from agent.capture.runner import CaptureParams, capture
from agent.host import CmdResult
from agent.host.live import LiveHost
from agent.host.recorded import open_image
from agent.host.recording import RecordingHost
from agent.readers.snapshot import take_snapshot
from agent.readers.sources import SOURCES
from tests.support.capture_kit import fake_replay, items, members, plugin

BYPASSES = [
    # iproute2 takes any prefix of a keyword, the first match wins: these are set / delete / flush
    "ip link s net_rail0 down", "ip link d x", "ip neigh fl all", "ip addr fl dev x", "ip route del default",
    "devlink dev eswitch se pci/0000:1a:00.0 mode legacy", "devlink dev rel pci/0000:1a:00.0",
    "devlink health d pci/x reporter fw", "rdma res show qp", "dcb pfc se dev x prio-pfc 3:on",
    # an option with a value hides the next word from a positional scan
    "devlink -N ns1 health dump show pci/x reporter fw", "devlink -N ns1 region dump pci/x/cr-space",
    "ip -n ns link set x down",
    # batch files run any command
    "ip -b /tmp/f", "ip -batch /tmp/f", "devlink -batch /tmp/f", "tc -b /tmp/f", "rdma -b /tmp/f", "dcb -b /tmp/f",
    # wrappers
    "timeout 5 ip link show", "nice ip link show", "ionice ip link show", "setsid ip link show",
    "stdbuf -o0 ip link show", "strace ip link show", "unshare -n ip link show", "su -c id", "runuser -u x id",
    "env ip link show", "sh -c id", "bash -c id", "awk BEGIN{system(\"id\")}", "find / -exec id ;",
    "xargs id", "ip netns exec ns1 id",
    # state changes the deny-list did not name
    "ovs-appctl --timeout=5 exit", "ovs-vsctl emer-reset", "ovs-appctl --timeout=5 revalidator/purge",
    "ovs-appctl -T 5 dpctl/flush-conntrack", "ovs-vsctl --timeout=5 show -- emer-reset",
    # another daemon's control socket: the plugins only ask ovs-vswitchd, ovs-appctl's default target
    "ovs-appctl -t /run/openvswitch/ovsdb-server.ctl --timeout=5 coverage/show",
    "ovs-appctl --target=ovn-controller --timeout=5 coverage/show",
    "ethtool --cable-test x", "ethtool -w x", "ethtool -W x 3", "mlnx_qos -i x --trust dscp", "mlnx_qos -i x",
    "lldptool -T -i x -V ETS-CFG", "sysctl -p", "sysctl --system", "sysctl -w net.ipv4.ip_forward=1",
    "mlxdump -d 1a:00.0 fsdump", "mstdump 1a:00.0", "mlxlink -d 1a:00.0 -a TG", "mlxfwmanager -u",
    "setpci -s 1a:00.0 COMMAND=0", "dmesg -c", "dmesg -C", "dmesg -n 1",
    # --json only before a query that prints it, with its device; --version alone
    "ethtool --json -S x", "ethtool --json -m", "ethtool --json --json -m x", "ethtool --json -m -x",
    "ethtool --version x", "ethtool --json --version", "ethtool --json -s x speed 100",
]


def test_the_optics_readers_forms_are_allowed() -> None:
    for argv in ("ethtool -m net_rail0", "ethtool --json -m net_rail0", "ethtool --version"):
        assert refusal(tuple(argv.split())) is None, argv


@pytest.mark.parametrize("argv", BYPASSES)
def test_a_bypass_is_refused_and_a_plan_naming_it_is_refused_whole(argv: str) -> None:
    args = tuple(argv.split())
    assert refusal(args) is not None
    with pytest.raises(PluginRefused) as exc:
        check_plugin(Plugin("p", 1, (Command(("uname", "-a")), Command(args))))
    assert exc.value.argv == args and exc.value.entry == refusal(args)
    assert argv in str(exc.value)


def test_the_deny_list_names_what_it_knows_first() -> None:
    with pytest.raises(PluginRefused) as exc:
        check_plugin(Plugin("p", 1, (Command(("devlink", "health", "dump", "show", "pci/x")),)))
    assert exc.value.entry == "devlink health dump" and "on the deny-list (devlink health dump)" in str(exc.value)
    assert "not on the allowlist" in str(PluginRefused("p", ("tc", "qdisc"), refusal(("tc", "qdisc")) or ""))


def _plan_argvs() -> list[tuple[str, ...]]:
    return [s.argv for m in load() for s in m.PLUGIN.steps if isinstance(s, Command)]


def test_every_plan_argv_passes_the_allowlist() -> None:
    argvs = _plan_argvs()
    assert argvs
    for argv in argvs:
        assert not_allowed(argv) is None, argv


class _Spy:
    """Wraps a node image: every argv the readers run, before it reaches the image."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.argvs: list[tuple[str, ...]] = []

    def run(self, argv: Any, *a: Any, **kw: Any) -> CmdResult:
        self.argvs.append(tuple(str(x) for x in argv))
        return self.inner.run(argv, *a, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


IMAGES = sorted(p.parent for p in (Path(__file__).parents[2] / "images").glob("*/manifest.json"))


@pytest.mark.slow
def test_every_reader_argv_passes_the_allowlist() -> None:
    """The readers' registry names the tools; the readers, run on every test node image, the argv."""
    for source in SOURCES:
        for prefix in source.commands:
            assert not_allowed((prefix[0], "--railscope-probe")) != f"not on the allowlist: {prefix[0]!r} is not a read-only tool the capture knows", prefix
    seen: set[tuple[str, ...]] = set()
    assert IMAGES
    for image in IMAGES:
        spy = _Spy(open_image(str(image)))
        take_snapshot(spy)  # type: ignore[arg-type]
        seen.update(spy.argvs)
        for it in json.loads((image / "manifest.json").read_text()).get("items", []):
            if it.get("argv"):
                seen.add(tuple(it["argv"]))
    assert {a[0] for a in seen} >= {p[0] for s in SOURCES for p in s.commands}
    bad = sorted(a for a in seen if not_allowed(a) is not None)
    assert not bad, bad


def test_an_argv_refused_after_expansion_never_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    plugins = [fake_replay({"r0": "0000:0a:00.0", "-s": "0000:0b:00.0"}),
             plugin(Plugin("e", 1, (Command(("ethtool", "-i", "{rail}")),)))]
    out = io.BytesIO()
    capture(LiveHost(str(root)), out, CaptureParams(node="n", nice=0, recorder_gap_s=0), plugin_modules=plugins,
            staging_dir=str(tmp_path))
    bundle = out.getvalue()
    it = next(i for i in items(bundle).values() if i.get("argv") == ["ethtool", "-i", "-s"])
    assert it["skipped"] and it["reason"].startswith("refused: ")
    assert not any("ethtool_-i_-s" in m for m in members(bundle))


class _Inner:
    live = True
    image = None

    def __init__(self) -> None:
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 1 << 20) -> CmdResult:
        self.ran.append(tuple(argv))
        return CmdResult(tuple(argv), 0, b"ok\n")


def test_the_recording_host_refuses_before_running(tmp_path: Path) -> None:
    inner = _Inner()
    rec = RecordingHost(inner, str(tmp_path / "rec"), guard=refusal)  # type: ignore[arg-type]
    res = rec.run(["ip", "link", "s", "net_rail0", "down"])
    assert inner.ran == [] and res.missing and res.reason and res.reason.startswith("refused:")
    assert rec.run(["ip", "link", "show"]).stdout == b"ok\n" and inner.ran == [("ip", "link", "show")]
