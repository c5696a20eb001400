"""Which functions are touched (docs/design.md §3): firmware-touching reads reach rail PFs and the PFs the
rules name, never another mlx5 function of the node (an HGX baseboard's restricted PF, a management
port), and never a device ``--exclude-devices`` names.

The node is the healthy two-rail image with its management NIC turned into an SR-IOV capable mlx5
function that devlink lists (``pci/0000:a1:00.0``, netdevs ``ens7f0np0`` / ``ens7f1np1``) and that no
rule names. What is asserted is the argv (and ethtool ioctl) the host itself saw, both for one read of
the node (the agent and ``doctor``) and for a whole capture.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.capture.runner import CaptureParams, capture
from agent.config import ReadConfig
from agent.host.recorded import RecordedHost
from agent.readers.snapshot import take_snapshot

IMAGES = Path(__file__).resolve().parents[2] / "images"
EXTRA_BDFS = ("0000:a1:00.0", "0000:a1:00.1")
EXTRA_NETDEVS = ("ens7f0np0", "ens7f1np1")


class SeenHost:
    """A host that forwards every call to a node image and keeps what reached it."""

    def __init__(self, inner: RecordedHost) -> None:
        self._inner = inner
        self.seen: list[tuple[str, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 8 << 20, **kw: Any) -> Any:
        # ``keep`` and whatever else the runner passes: a host that refused it would see no plan step
        self.seen.append(tuple(str(a) for a in argv))
        return self._inner.run(argv, timeout_s=timeout_s, max_bytes=max_bytes, **kw)

    def ethtool_stats(self, ifname: str) -> Any:
        self.seen.append(("ETHTOOL_GSTATS", ifname))
        return self._inner.ethtool_stats(ifname)

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> Any:
        if IB_COUNTER.match(path):
            self.seen.append(("READ", path))
        return self._inner.read_text(path, max_bytes)


#: an RDMA port's counter file: mlx5_ib answers it with a firmware command (QUERY_Q_COUNTER,
#: QUERY_VPORT_COUNTER, PPCNT: drivers/infiniband/hw/mlx5/counters.c)
IB_COUNTER = re.compile(r"\A/sys/class/infiniband/[^/]+/ports/\d+/(?:hw_)?counters/")


#: ethtool options whose answer mlx5 fetches from the firmware: statistics (PPCNT), module EEPROM
#: (MCIA), pause parameters (PFCC, en_ethtool.c mlx5e_get_pauseparam) and FEC (PPLM, en/port.c
#: mlx5e_get_fec_mode)
ETHTOOL_FIRMWARE = ("-S", "--statistics", "-m", "--module-info", "-a", "--show-pause", "--show-fec")


def firmware_touching(argv: tuple[str, ...]) -> bool:
    """What reaches the NIC's firmware on mlx5, by the command's own words (not the registry's): ethtool
    statistics, module EEPROM, pause and FEC; every dcb show (dcbnl's IEEE get calls the driver's
    getets / getpfc / getbuffer: QETCR, PFCC, PBMC registers); ``devlink dev info`` (MCQI / MCQS),
    ``devlink dev param show`` (the permanent parameters of lib/nv_param.c: MNVDA) and every devlink
    command aimed at one instance."""
    if argv[0] in ("ETHTOOL_GSTATS", "READ"):  # READ: only RDMA counter files are kept
        return True
    if argv[0] == "ethtool":
        return any(a in ETHTOOL_FIRMWARE for a in argv[1:])
    if argv[0] == "dcb":
        return True
    if argv[0] == "rdma":  # mlx5_ib's get_hw_stats: QUERY_Q_COUNTER and PPCNT, per port
        return any(w in ("statistic", "stat") for w in argv[1:])
    if argv[0] == "devlink":
        return any("/" in a for a in argv[1:]) or _dev_info(argv) or _dev_param(argv)
    return False


def _dev_info(argv: tuple[str, ...]) -> bool:
    words = [a for a in argv[1:] if not a.startswith("-")]
    return words[:2] == ["dev", "info"]


def _dev_param(argv: tuple[str, ...]) -> bool:
    words = [a for a in argv[1:] if not a.startswith("-")]
    return words[:2] == ["dev", "param"]


def node_wide(argv: tuple[str, ...]) -> bool:
    """A firmware-touching command that names no device: a dump reaches every function of the node."""
    if argv[0] == "devlink":
        return not any("/" in a for a in argv[1:])
    if argv[0] == "dcb":
        return "dev" not in argv
    if argv[0] == "rdma":
        return "link" not in argv
    return False


def touches(seen: list[tuple[str, ...]], names: tuple[str, ...]) -> list[tuple[str, ...]]:
    pat = re.compile("|".join(re.escape(n) for n in names))
    return [a for a in seen if firmware_touching(a) and (node_wide(a) or any(pat.search(w) for w in a[1:]))]


@pytest.fixture()
def extra_mlx5(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "img"
    shutil.copytree(IMAGES / "spectrumx-2rail-healthy", root, symlinks=True)
    dev_show = root / "cmd" / "devlink_-j_dev_show.stdout"
    doc = json.loads(dev_show.read_text())
    for bdf in EXTRA_BDFS:
        doc["dev"][f"pci/{bdf}"] = {}
        slug = f"pci-{bdf.replace(':', '-')}"
        (root / "cmd" / f"devlink_-j_dev_eswitch_show_{slug}.stdout").write_text(
            json.dumps({"dev": {f"pci/{bdf}": {"mode": "legacy"}}}))
        (root / "cmd" / f"devlink_-j_dev_eswitch_show_{slug}.rc").write_text("0\n")
        dev = next((root / "fs/sys/devices/pci0000:a0/0000:a0:01.0").glob(bdf))
        (dev / "vendor").write_text("0x15b3\n")
    dev_show.write_text(json.dumps(doc))
    # the manifest lists the commands of the image as captured: drop it, an image is valid without
    (root / "manifest.json").unlink()
    yield root


def test_snapshot_never_touches_an_unnamed_mlx5_function(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    snap = take_snapshot(host, ReadConfig())  # type: ignore[arg-type]
    assert any(a[:3] == ("devlink", "-j", "dev") and "pci/0000:0c:00.0" in a for a in host.seen)
    assert {st.netdev for st in snap.ethtool} == {"net_rail0", "net_rail1"}
    assert touches(host.seen, EXTRA_BDFS + EXTRA_NETDEVS) == []


def test_capture_never_touches_an_unnamed_mlx5_function(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    capture(host, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0))  # type: ignore[arg-type]
    assert any(a[:2] == ("ethtool", "-S") for a in host.seen) or \
        any(a[0] == "ETHTOOL_GSTATS" for a in host.seen)
    assert touches(host.seen, EXTRA_BDFS + EXTRA_NETDEVS) == []


def test_exclude_devices_removes_a_rail_from_firmware_reads(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    cfg = ReadConfig(exclude_devices=r"0000:8d:00\.0")
    snap = take_snapshot(host, cfg)  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail1", "0000:8d:00.0", "rdma_rail1")) == []
    assert touches(host.seen, ("net_rail0", "0000:0c:00.0")) != []
    assert any(a[0] == "READ" and "/rdma_rail0/" in a[1] for a in host.seen)  # the other rail's are read
    assert ("rdma counters rdma_rail1", "excluded by --exclude-devices") in snap.unavailable
    # the rail is still a rail: its link is read, only the firmware is left alone
    assert snap.link("net_rail1") is not None
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    capture(host, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0, cfg=cfg))  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail1", "0000:8d:00.0")) == []


def test_the_json_form_of_ethtool_m_keeps_the_same_scope(extra_mlx5: Path) -> None:
    # an ethtool that prints JSON for -m: the readers run ethtool --json -m, to the same rails only
    (extra_mlx5 / "cmd" / "ethtool_--version.stdout").write_text("ethtool version 6.14.2\n")
    (extra_mlx5 / "cmd" / "ethtool_--version.rc").write_text("0\n")
    cfg = ReadConfig(exclude_devices=r"0000:8d:00\.0")
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    take_snapshot(host, cfg)  # type: ignore[arg-type]
    assert ("ethtool", "--json", "-m", "net_rail0") in host.seen
    assert touches(host.seen, EXTRA_BDFS + EXTRA_NETDEVS + ("net_rail1", "0000:8d:00.0")) == []
    # a capture reads each module once, as text (the plan's step and replay's are one command)
    seen = SeenHost(RecordedHost(str(extra_mlx5)))
    capture(seen, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0, cfg=cfg))  # type: ignore[arg-type]
    modules = [a for a in seen.seen if a[0] == "ethtool" and "-m" in a]
    assert modules == [("ethtool", "-m", "net_rail0")]  # net_rail1 excluded; read once, not twice
    assert touches(seen.seen, EXTRA_BDFS + EXTRA_NETDEVS + ("net_rail1", "0000:8d:00.0")) == []


def test_exclude_devices_matches_a_netdev_name(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    take_snapshot(host, ReadConfig(exclude_devices=r"^net_rail0$"))  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail0", "0000:0c:00.0")) == []


def test_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    img = str(IMAGES / "degradation-sources-healthy")
    for argv, why in ((["--exclude-devices", "("], "not a valid regular expression"),
                      (["--ber-warning", "2"], "expected a ratio in (0, 1)"),
                      (["--ber-window", "-5"], "duration")):
        with pytest.raises(SystemExit) as exc:
            main(["doctor", "--from", img, *argv])
        assert exc.value.code == 3 and why in capsys.readouterr().err


def test_ber_flags_judge_the_recorder(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    img = str(IMAGES / "link-degrading-ber-recorder")
    assert main(["doctor", "--from", img, "--json"]) == 2  # 5e-4: at / above the FEC's 2.4e-4 limit
    assert main(["doctor", "--from", img, "--json", "--ber-critical", "1e-3"]) == 1
    assert main(["doctor", "--from", img, "--json", "--ber-warning", "1e-3", "--ber-critical", "2e-3"]) == 0
    assert main(["doctor", "--from", img, "--json", "--ber-window", "0.5s"]) == 0  # one sample in the window
    capsys.readouterr()


def test_preflight_keeps_firmware_reads_off_excluded_devices(extra_mlx5: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """preflight reads this node through ``LiveHost``; here the node is the image, seen by SeenHost."""
    import agent.host.live
    from agent.cli import main

    hosts: list[SeenHost] = []

    class ImageAsLiveHost(SeenHost):  # a stand-in for the live host: the image's files and commands
        def __init__(self, host_root: str, **_: Any) -> None:
            super().__init__(RecordedHost(str(extra_mlx5)))
            hosts.append(self)

        def __enter__(self) -> ImageAsLiveHost:
            return self

        def __exit__(self, *exc: object) -> None:
            self._inner.close()

    monkeypatch.setattr(agent.host.live, "LiveHost", ImageAsLiveHost)
    main(["preflight", "--json"])
    assert touches(hosts[-1].seen, ("net_rail1", "0000:8d:00.0")) != []
    main(["preflight", "--json", "--exclude-devices", r"0000:8d:00\.0"])
    assert touches(hosts[-1].seen, ("net_rail1", "0000:8d:00.0")) == []
    monkeypatch.setenv("RAILSCOPE_EXCLUDE_DEVICES", "^net_rail0$")
    main(["preflight", "--json"])
    assert touches(hosts[-1].seen, ("net_rail0", "0000:0c:00.0")) == []
    assert touches(hosts[-1].seen, ("net_rail1", "0000:8d:00.0")) != []
    capsys.readouterr()


# -- pause, FEC, dcb and devlink dev info: firmware reads like the statistics ----------------------

RAIL_FIRMWARE_READS = (("ethtool", "-a", "net_rail0"), ("ethtool", "--show-fec", "net_rail0"),
                       ("dcb", "-j", "pfc", "show", "dev", "net_rail0"), ("dcb", "-j", "ets", "show", "dev", "net_rail0"),
                       ("devlink", "-j", "dev", "info", "pci/0000:0c:00.0"),
                       ("rdma", "-j", "statistic", "show", "link", "rdma_rail0/1"))


def test_a_capture_reads_pause_fec_dcb_and_dev_info_of_the_rail_pfs_only(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    capture(host, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0))  # type: ignore[arg-type]
    for argv in RAIL_FIRMWARE_READS:
        assert argv in host.seen, argv  # read, of the rails
    assert [a for a in host.seen if firmware_touching(a) and node_wide(a) and a[0] != "devlink"] == []
    assert [a for a in host.seen if a[0] == "devlink" and (_dev_info(a) or _dev_param(a)) and node_wide(a)] == []
    assert touches(host.seen, EXTRA_BDFS + EXTRA_NETDEVS) == []
    # --exclude-devices keeps them off a rail too
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    cfg = ReadConfig(exclude_devices=r"0000:0c:00\.0")
    capture(host, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0, cfg=cfg))  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail0", "0000:0c:00.0")) == []
    assert ("ethtool", "-a", "net_rail1") in host.seen and ("dcb", "-j", "pfc", "show", "dev", "net_rail1") in host.seen


def test_every_firmware_touching_plan_step_names_the_pf_it_reaches() -> None:
    """A capture step that reaches the firmware is marked ``firmware=`` with its PF's placeholder, so the
    runner holds that PF's gate for it (one at a time per PF) and --exclude-devices removes it."""
    import importlib

    from agent.capture.plugin import Command
    from agent.capture.plugins import PLUGINS

    unmarked, unbound = [], []
    for name in PLUGINS:
        for step in importlib.import_module(f"agent.capture.plugins.{name}").PLUGIN.steps:
            if not isinstance(step, Command) or not firmware_touching(step.argv):
                continue
            if step.firmware is None:
                unmarked.append(" ".join(step.argv))
            elif "{" + step.firmware + "}" not in step.argv:
                unbound.append(" ".join(step.argv))
    assert unmarked == [] and unbound == []


def test_the_live_firmware_reads_are_the_registrys_firmware_touching_ones() -> None:
    from agent.readers.sources import touches_firmware

    for argv in (*RAIL_FIRMWARE_READS, ("ethtool", "-S", "net_rail0"), ("ethtool", "-m", "net_rail0")):
        if argv[0] not in ("dcb", "rdma"):  # no source runs these: the capture plan's marking gates them
            assert touches_firmware(argv), argv


def test_the_gate_serialises_dev_info_with_the_statistics_of_one_pf(extra_mlx5: Path, held_elsewhere: Any) -> None:
    """The daemon's worker host: ``devlink dev info`` of a PF waits for (and past the wait, skips) another
    thread's firmware read of that PF, as ``ethtool -S`` does; another PF's is read meanwhile."""

    from agent.host.firmware import FirmwareGate
    from agent.service.tracked_host import Progress, TrackedHost

    gate = FirmwareGate()
    # the counters thread, stuck in net_rail0's ETHTOOL_GSTATS
    with held_elsewhere(gate, "0000:0c:00.0"), RecordedHost(str(extra_mlx5)) as inner:
        host = TrackedHost(inner, Progress(), gate, firmware_wait_s=0.05)
        held = host.run(["devlink", "-j", "dev", "info", "pci/0000:0c:00.0"])
        pause = host.run(["ethtool", "-a", "net_rail0"])
        other = host.run(["devlink", "-j", "dev", "info", "pci/0000:8d:00.0"])
    assert held.missing and "another firmware read" in (held.reason or "")
    assert pause.missing and "another firmware read" in (pause.reason or "")
    assert not other.missing or "another firmware read" not in (other.reason or "")


def test_a_capture_holds_the_pfs_gate_for_pause_fec_dcb_and_dev_info(tmp_path: Path, held_elsewhere: Any) -> None:
    """The runner takes the PF's lock of the daemon's gate for each of these steps: while a sampler holds
    one PF, its steps wait (and past the deadline are skipped, saying so), the other PF's run."""
    from types import SimpleNamespace

    from agent.capture.plugin import Plugin
    from agent.capture.plugins import dcb, devlink, ethtool, rdma
    from agent.host.firmware import FirmwareGate
    from agent.host.live import LiveHost
    from agent.model import DevlinkDev, EthtoolStats, Link, RdmaLink, Snapshot
    from tests.support.capture_kit import manifest

    pfs = {"r0": "0000:0a:00.0", "r1": "0000:0b:00.0"}
    snap = Snapshot(taken_at=0.0, node="n",
                    links=tuple(Link(ifindex=i + 1, ifname=n, parent_bus="pci", parent_dev=pf)
                                for i, (n, pf) in enumerate(sorted(pfs.items()))),
                    ethtool=tuple(EthtoolStats(n, ()) for n in sorted(pfs)),
                    devlink_devs=tuple(DevlinkDev(f"pci/{pf}") for pf in sorted(pfs.values())),
                    rdma_links=tuple(RdmaLink(f"mlx5_{n[1]}", 1, netdev=n) for n in sorted(pfs)))
    replay = SimpleNamespace(PLUGIN=Plugin("replay", 1, ()), record=lambda ctx, rec: snap)
    plans = [replay, *(SimpleNamespace(PLUGIN=m.PLUGIN) for m in (ethtool, dcb, devlink, rdma))]
    gate = FirmwareGate()
    root = tmp_path / "root"
    root.mkdir()
    out = io.BytesIO()
    with held_elsewhere(gate, "0000:0a:00.0"):  # a sampler's read of r0's PF, stuck in the driver
        capture(LiveHost(str(root)), out, CaptureParams(node="n", nice=0, recorder_gap_s=0, deadline_s=3.0,
                                                        firmware_gate=gate),
                plugin_modules=plans, staging_dir=str(tmp_path))
    by_argv = {tuple(i["argv"]): i for i in manifest(out.getvalue())["items"] if i.get("argv")}

    def held(argv: tuple[str, ...]) -> bool:
        return bool(by_argv[argv].get("skipped")) and "held the NIC" in (by_argv[argv].get("reason") or "")

    for dev, pf, want in (("r0", "0000:0a:00.0", True), ("r1", "0000:0b:00.0", False)):
        for argv in (("ethtool", "-a", dev), ("ethtool", "--show-fec", dev), ("ethtool", "-S", dev),
                     ("dcb", "-j", "pfc", "show", "dev", dev), ("dcb", "-j", "buffer", "show", "dev", dev),
                     ("devlink", "-j", "dev", "info", f"pci/{pf}"),
                     ("rdma", "-j", "statistic", "show", "link", f"mlx5_{dev[1]}/1")):
            assert held(argv) is want, (argv, by_argv[argv])
    assert not held(("ethtool", "-k", "r0"))  # offload flags: the driver's own state, no firmware command


# -- --exclude-devices on diff and metrics ----------------------------------------------------------

class _ImageHost(SeenHost):
    """The image as a host a command opens itself (``LiveHost(root)`` or ``open_input(path)``), seen."""

    def __init__(self, image: Path, hosts: list[SeenHost]) -> None:
        super().__init__(RecordedHost(str(image)))
        hosts.append(self)

    def __enter__(self) -> _ImageHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()

    def close(self) -> None:
        self._inner.close()


def test_diff_keeps_firmware_reads_off_excluded_devices_on_both_sides(
        extra_mlx5: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``diff BEFORE live``: the live side is this node (here the image, through a stand-in for LiveHost),
    read as doctor and the agent read it; the image side is read with the same scope, like for like."""
    import agent.host.live
    import agent.offline
    from agent.cli import main

    live: list[SeenHost] = []
    images: list[SeenHost] = []
    monkeypatch.setattr(agent.host.live, "LiveHost", lambda root, **_: _ImageHost(extra_mlx5, live))
    monkeypatch.setattr(agent.offline, "open_input", lambda path: _ImageHost(Path(path), images))
    main(["diff", str(extra_mlx5), "live", "--json"])
    assert touches(live[-1].seen, ("net_rail1", "0000:8d:00.0")) != []
    main(["diff", str(extra_mlx5), "live", "--json", "--exclude-devices", r"0000:8d:00\.0"])
    assert touches(live[-1].seen, ("net_rail1", "0000:8d:00.0")) == []
    assert touches(images[-1].seen, ("net_rail1", "0000:8d:00.0")) == []
    assert touches(live[-1].seen, ("net_rail0", "0000:0c:00.0")) != []
    monkeypatch.setenv("RAILSCOPE_EXCLUDE_DEVICES", "^net_rail0$")
    main(["diff", "live", str(extra_mlx5), "--json"])
    assert touches(live[-1].seen, ("net_rail0", "0000:0c:00.0")) == []
    capsys.readouterr()


def test_metrics_keeps_firmware_reads_off_excluded_devices(
        extra_mlx5: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    import agent.offline
    from agent.cli import main

    hosts: list[SeenHost] = []
    monkeypatch.setattr(agent.offline, "open_input", lambda path: _ImageHost(Path(path), hosts))
    assert main(["metrics", "--from", str(extra_mlx5)]) == 0
    assert touches(hosts[-1].seen, ("net_rail1", "0000:8d:00.0")) != []
    assert b'device="net_rail1"' in capsysbinary.readouterr().out
    assert main(["metrics", "--from", str(extra_mlx5), "--exclude-devices", r"0000:8d:00\.0"]) == 0
    assert touches(hosts[-1].seen, ("net_rail1", "0000:8d:00.0")) == []
    assert touches(hosts[-1].seen, ("net_rail0", "0000:0c:00.0")) != []
    capsysbinary.readouterr()


def test_every_command_that_reads_a_node_takes_exclude_devices() -> None:
    """One flag for every command that reads a node (live or an image the readers read again)."""
    from agent.cli import build_parser

    for name in ("agent", "doctor", "capture", "record", "preflight", "diff", "metrics"):
        parser = build_parser(only=name)
        sub = next(a for a in parser._actions if a.dest == "command").choices[name]  # type: ignore[union-attr]
        assert "--exclude-devices" in sub._option_string_actions, name


def test_the_daemons_recorder_counters_keep_off_excluded_rails(extra_mlx5: Path) -> None:
    """The counters source with the flight recorder on (the daemon, every second): the RDMA loss
    counters of an excluded rail's uplink port are not read either."""
    import dataclasses

    from agent.readers import sources
    from agent.readers.common import Notes

    cfg = ReadConfig(exclude_devices=r"0000:8d:00\.0")
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    ctx = sources.Context()
    for src in sources.SOURCES:
        if src.name == "counters":
            break
        ctx = sources.after(ctx, src.read(host, cfg, ctx, Notes()))  # type: ignore[arg-type]
    ctx = dataclasses.replace(ctx, recorder=True, rdma_ports={"net_rail0": ("rdma_rail0", 1),
                                                              "net_rail1": ("rdma_rail1", 1)})
    host.seen.clear()
    part = sources.by_name("counters").read(host, cfg, ctx, Notes())  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail1", "0000:8d:00.0", "rdma_rail1")) == []
    assert any(a[0] == "READ" and "/rdma_rail0/" in a[1] for a in host.seen)
    assert "net_rail1" not in part.gives.get("recorder_counters", {}) or not any(k in part.gives.get("recorder_counters", {})["net_rail1"] for k in ("out_of_sequence",))


def test_the_daemon_reads_rdma_counter_files_through_the_firmware_gate(held_elsewhere: Any) -> None:
    """A port's counter file waits while another firmware read of the same PCI function runs."""
    from agent.host.firmware import FirmwareGate
    from agent.service.tracked_host import Progress, TrackedHost

    gate = FirmwareGate()
    tracked = TrackedHost(RecordedHost(str(IMAGES / "spectrumx-2rail-healthy")), Progress(), gate,
                          firmware_wait_s=0.2)
    counter = "/sys/class/infiniband/rdma_rail0/ports/1/hw_counters/out_of_sequence"
    plain = "/sys/class/infiniband/rdma_rail0/fw_ver"
    assert tracked.read_text(counter) is not None
    with held_elsewhere(gate, "0000:0c:00.0"):
        assert tracked.read_text(counter) is None  # busy past the wait: reads as missing, not stale
        assert tracked.read_text(plain) is not None  # identity files are not firmware reads
        assert tracked.read_text("/sys/class/infiniband/rdma_rail1/ports/1/hw_counters/out_of_sequence") \
            is not None  # another function's gate is free
    assert tracked.read_text(counter) is not None


# -- the firmware source and the counters behind a held gate (the daemon's worker hosts) ------------

class _CountingGate:
    """The daemon's gate, counting the waits that ran out per PCI function."""

    def __init__(self) -> None:
        from agent.host.firmware import FirmwareGate

        self._gate = FirmwareGate()
        self.gave_up: dict[str, int] = {}

    def acquire(self, key: str, timeout: float) -> bool:
        got = self._gate.acquire(key, timeout)
        if not got:
            self.gave_up[key] = self.gave_up.get(key, 0) + 1
        return got

    def release(self, key: str) -> None:
        self._gate.release(key)

    def hold(self, key: str, timeout: float) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def held() -> Iterator[bool]:
            got = self.acquire(key, timeout)
            try:
                yield got
            finally:
                if got:
                    self.release(key)
        return held()


def _with_dev_info(image: Path) -> Path:
    """The image with each rail PF's ``devlink -j dev info`` answer (the healthy image records none)."""
    for bdf in ("0000:0c:00.0", "0000:8d:00.0"):
        stem = f"devlink_-j_dev_info_pci-{bdf.replace(':', '-')}"
        doc = {"info": {f"pci/{bdf}": {"driver": "mlx5_core", "versions": {
            "running": {"fw.version": "28.42.1000"}, "stored": {"fw.version": "28.42.1000"}}}}}
        (image / "cmd" / f"{stem}.stdout").write_text(json.dumps(doc))
        (image / "cmd" / f"{stem}.rc").write_text("0\n")
    return image


def _context_before(image: Path, name: str) -> Any:
    """What the sources before ``name`` found on ``image`` (read without a gate)."""
    from agent.readers import sources
    from agent.readers.common import Notes

    ctx = sources.Context()
    with RecordedHost(str(image)) as host:
        for src in sources.SOURCES:
            if src.name == name:
                return ctx
            ctx = sources.after(ctx, src.read(host, ReadConfig(), ctx, Notes()))
    raise AssertionError(name)


def test_the_firmware_source_is_skipped_behind_a_held_pf_as_the_counters_are(extra_mlx5: Path,
                                                                              held_elsewhere: Any) -> None:
    """A read of PF 0000:0c:00.0 stuck in another thread: the firmware source's ``devlink dev info`` of it
    waits on that PF's gate and is skipped past the wait, saying which PF, as the counters' statistics of
    net_rail0 are; the other PF is read by both. Each source waits once for the held PF, not once per
    door (the ioctl, then ``ethtool -S`` text, then the driver info both ways: four waits)."""
    from agent.host.firmware import BUSY
    from agent.readers import sources
    from agent.readers.common import Notes
    from agent.service.tracked_host import Progress, TrackedHost

    ctx = _context_before(_with_dev_info(extra_mlx5), "firmware")
    gate = _CountingGate()
    with RecordedHost(str(extra_mlx5)) as inner:
        host = TrackedHost(inner, Progress(), gate, firmware_wait_s=0.1)  # type: ignore[arg-type]
        with held_elsewhere(gate, "0000:0c:00.0"):
            fw = sources.by_name("firmware").read(host, ReadConfig(), ctx, Notes())  # type: ignore[arg-type]
            firmware_waits = dict(gate.gave_up)
            counters = sources.by_name("counters").read(host, ReadConfig(), ctx, Notes())  # type: ignore[arg-type]
    assert {f.handle for f in fw.fields["firmware"]} == {"pci/0000:8d:00.0"}
    assert [why for src, why in fw.unavailable if src == "firmware"] == [
        f"devlink dev info pci/0000:0c:00.0: {BUSY}"]
    assert firmware_waits == {"0000:0c:00.0": 1}
    assert {st.netdev for st in counters.fields["ethtool"]} == {"net_rail1"}
    assert {d.netdev for d in counters.fields["drivers"]} == {"net_rail1"}
    assert ("ethtool -S net_rail0", f"ETHTOOL_GSTATS net_rail0: {BUSY}") in counters.unavailable
    assert gate.gave_up == {"0000:0c:00.0": 2}  # one wait by each source


def test_the_firmware_source_waits_for_a_short_read_of_the_same_pf(extra_mlx5: Path) -> None:
    """Another thread's firmware read of PF 0000:0c:00.0 that ends within the wait: ``devlink dev info``
    of that PF runs after it, never beside it, and both PFs are read."""
    import threading
    import time

    from agent.host.firmware import FirmwareGate
    from agent.readers import sources
    from agent.readers.common import Notes
    from agent.service.tracked_host import Progress, TrackedHost

    ctx = _context_before(_with_dev_info(extra_mlx5), "firmware")
    gate = FirmwareGate()
    holding, ended = threading.Event(), []

    def short_read() -> None:
        with gate.hold("0000:0c:00.0", 1.0):
            holding.set()
            time.sleep(0.3)
            ended.append(time.monotonic())

    started: list[float] = []

    class Inner(RecordedHost):
        def run(self, argv: Any, *a: Any, **kw: Any) -> Any:
            if "pci/0000:0c:00.0" in argv:
                started.append(time.monotonic())
            return super().run(argv, *a, **kw)

    th = threading.Thread(target=short_read)
    th.start()
    assert holding.wait(5)
    with Inner(str(extra_mlx5)) as inner:
        fw = sources.by_name("firmware").read(TrackedHost(inner, Progress(), gate, firmware_wait_s=10.0),  # type: ignore[arg-type]
                                        ReadConfig(), ctx, Notes())
    th.join()
    assert {f.handle for f in fw.fields["firmware"]} == {"pci/0000:0c:00.0", "pci/0000:8d:00.0"}
    assert started and ended and started[0] >= ended[0]
