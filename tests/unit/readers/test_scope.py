"""Which functions are touched (DESIGN §3): firmware-touching reads reach rail PFs and the PFs the
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

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 8 << 20) -> Any:
        self.seen.append(tuple(str(a) for a in argv))
        return self._inner.run(argv, timeout_s=timeout_s, max_bytes=max_bytes)

    def ethtool_stats(self, ifname: str) -> Any:
        self.seen.append(("ETHTOOL_GSTATS", ifname))
        return self._inner.ethtool_stats(ifname)


def firmware_touching(argv: tuple[str, ...]) -> bool:
    """ethtool statistics / module EEPROM, and every devlink command aimed at one instance."""
    if argv[0] == "ETHTOOL_GSTATS":
        return True
    if argv[0] == "ethtool":
        return any(a in ("-S", "-m", "--statistics", "--module-info") for a in argv[1:])
    if argv[0] == "devlink":
        return any("/" in a for a in argv[1:])
    return False


def touches(seen: list[tuple[str, ...]], names: tuple[str, ...]) -> list[tuple[str, ...]]:
    pat = re.compile("|".join(re.escape(n) for n in names))
    return [a for a in seen if firmware_touching(a) and any(pat.search(w) for w in a[1:])]


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
    assert touches(host.seen, ("net_rail1", "0000:8d:00.0")) == []
    assert touches(host.seen, ("net_rail0", "0000:0c:00.0")) != []
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
    for read in (lambda h: take_snapshot(h, cfg), lambda h: capture(h, io.BytesIO(), CaptureParams(
            node="n", nice=0, recorder_gap_s=0, cfg=cfg))):
        host = SeenHost(RecordedHost(str(extra_mlx5)))
        read(host)
        assert ("ethtool", "--json", "-m", "net_rail0") in host.seen
        assert touches(host.seen, EXTRA_BDFS + EXTRA_NETDEVS + ("net_rail1", "0000:8d:00.0")) == []


def test_exclude_devices_matches_a_netdev_name(extra_mlx5: Path) -> None:
    host = SeenHost(RecordedHost(str(extra_mlx5)))
    take_snapshot(host, ReadConfig(exclude_devices=r"^net_rail0$"))  # type: ignore[arg-type]
    assert touches(host.seen, ("net_rail0", "0000:0c:00.0")) == []


def test_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    img = str(IMAGES / "degradation-sources-healthy")
    for argv, why in ((["--exclude-devices", "("], "not a regular expression"),
                      (["--ber-warning", "2"], "expected a ratio in (0, 1)"),
                      (["--ber-window", "-5"], "duration")):
        with pytest.raises(SystemExit) as exc:
            main(["doctor", "--from", img, *argv])
        assert exc.value.code == 3 and why in capsys.readouterr().err


def test_ber_flags_judge_the_recorder(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    img = str(IMAGES / "link-degrading-ber-recorder")
    assert main(["doctor", "--from", img, "--json"]) == 1
    assert main(["doctor", "--from", img, "--json", "--ber-warning", "1e-3"]) == 0
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
