"""The recorder: an image recorded from a host replays to the same snapshot the recording saw."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.capture.replay import record_image
from agent.capture.runner import CaptureError
from agent.host.recorded import open_image
from agent.host.recording import RecordingHost
from agent.model import Snapshot
from agent.readers.snapshot import take_snapshot
from tests.support.netns import RailNetns


def comparable(snap: Snapshot) -> Snapshot:
    # taken_at is the recording's wall clock live and the manifest's ended_at replayed; the
    # ``unavailable`` notes word the same absence differently ("no OVS db socket" live, "not
    # recorded" replayed) and no check reads them.
    return dataclasses.replace(snap, taken_at=0.0, unavailable=())


def test_rerecording_the_example_image_replays_identically(example_image: Path, tmp_path: Path) -> None:
    with open_image(str(example_image)) as original:
        want = take_snapshot(original)
    with open_image(str(example_image)) as original:
        seen, manifest = record_image(original, str(tmp_path / "img"))
    with open_image(str(tmp_path / "img")) as replay:
        again = take_snapshot(replay)
    assert comparable(seen) == comparable(want)
    assert comparable(again) == comparable(want)
    assert again.node == "gpu-node-017" == manifest["node"]
    assert want.rules and want.ethtool and want.rdma_devices and want.ports  # it covered every door

    img = tmp_path / "img"
    # sysfs keeps its shape: the class link is a relative symlink into the device tree.
    link = img / "fs/sys/class/net/net_rail0"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    pci = img / "fs/sys/bus/pci/devices/0000:0c:00.0"
    assert pci.is_symlink() and (pci / "sriov_numvfs").read_text().strip() == "1"
    assert manifest["schema"] == "railscope.bundle/v1"
    items = {i["path"]: i for i in manifest["items"]}
    ovs = next(i for i in manifest["items"] if i["argv"] and i["argv"][0] == "ovs-vsctl")
    assert ovs["skipped"] and ovs["reason"] and not (img / ovs["path"]).exists()
    for path, item in items.items():
        if item["skipped"]:
            continue
        data = (img / path).read_bytes()
        assert item["bytes"] == len(data), path
    assert json.loads((img / "events.json").read_text()) == {"events": []}


def test_refuses_a_non_empty_directory(example_image: Path, tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with open_image(str(example_image)) as host, pytest.raises(CaptureError, match="not empty"):
        record_image(host, str(out))
    assert os.listdir(out) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]  # no half image left beside it


def test_cli_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "record", "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 3
    assert res.stderr.strip().count("\n") == 0 and "not empty" in res.stderr
    assert "Traceback" not in res.stderr


RECORD_LIVE = """
import dataclasses, json
from agent.host.live import LiveHost
from agent.host.recorded import open_image
from agent.capture.replay import record_image
from agent.readers.snapshot import take_snapshot
out = {out!r}
with LiveHost() as host:
    seen, manifest = record_image(host, out)
with open_image(out) as img:
    again = take_snapshot(img)
def cmp(s):
    return repr(dataclasses.replace(s, taken_at=0.0, unavailable=()))
print(json.dumps({{"seen": cmp(seen), "again": cmp(again), "rails": sorted(e.netdev for e in seen.ethtool)}}))
"""


@pytest.mark.netns
def test_live_recording_replays_to_the_snapshot_it_saw(rails: RailNetns, tmp_path: Path) -> None:
    rails.set_peer(1, "down")
    out = tmp_path / "live-image"
    got = rails.python(RECORD_LIVE.format(out=str(out)))
    assert got["rails"] == ["net_rail0", "net_rail1"]  # ethtool counters came from the ioctl, live
    assert got["again"] == got["seen"]

    links = {lk["ifname"]: lk for lk in json.loads((out / "netlink/links.json").read_text())["links"]}
    assert links["net_rail0"]["stats64"]["rx_packets"] >= 0
    assert links["lo"]["stats64"] is None  # statistics only for the links the readers asked
    assert links["net_rail1"]["carrier"] == 0
    text = (out / "cmd/ethtool_-S_net_rail0.stdout").read_text()
    assert text.startswith("NIC statistics:\n") and "peer_ifindex" in text
    assert (out / "cmd/ethtool_-i_net_rail0.stdout").read_text().startswith("driver: veth\n")
    assert (out / "fs/sys/class/net/net_rail0").is_symlink()


@pytest.mark.netns
def test_record_cli_in_the_namespace(rails: RailNetns, tmp_path: Path) -> None:
    out = tmp_path / "cli-image"
    res = rails.railscope("record", "-o", str(out), "--node", "node-a", "--cluster", "lab")
    assert res.returncode == 0, res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["node"], manifest["cluster"]) == ("node-a", "lab")
    assert {"net_rail0", "net_rail1"} <= {lk["ifname"] for lk in json.loads(
        (out / "netlink/links.json").read_text())["links"]}
    shutil.rmtree(out)


def test_ethtool_text_replays_what_the_ioctls_gave() -> None:
    # What the recorder writes for the ioctl answers parses, through the readers' text parsers,
    # to what the readers made of the ioctl answers themselves.
    from agent.host.ethtool import format_drvinfo, format_gstats
    from agent.readers.ethtool import parse_drvinfo, parse_ethtool_i, parse_ethtool_s

    stats = [("rx_prio3_pause", 51022), ("tx_prio3_pause_duration", 1803), ("rx_queue_0_xdp_packets", 0),
             ("tx_pause_storm_warning_events", 2**64 - 1)]
    assert parse_ethtool_s(format_gstats(stats), "net_rail0").counters == tuple(stats)
    info = {"driver": "mlx5_core", "version": "25.10-1.7.1", "fw_version": "28.42.1000 (MT_0000000838)",
            "erom_version": "", "bus_info": "0000:0c:00.0", "supports_statistics": "yes"}
    assert parse_ethtool_i(format_drvinfo(info), "net_rail0") == parse_drvinfo(info, "net_rail0")


def test_a_file_that_cannot_be_written_is_listed_not_fatal(example_image: Path, tmp_path: Path) -> None:
    out = tmp_path / "img"
    (out / "fs").mkdir(parents=True)
    (out / "fs" / "proc").write_text("in the way")  # fs/proc/... cannot become a directory
    with open_image(str(example_image)) as original:
        rec = RecordingHost(original, str(out))
        snap = take_snapshot(rec)
        manifest = rec.finish(node=snap.node)
    assert snap.versions.kernel == "6.8.0-60-generic"  # the reader still got its answer
    items = {i["path"]: i for i in manifest["items"]}
    lost = items["fs/proc/sys/kernel/osrelease"]
    assert lost["skipped"] and lost["reason"].startswith("not recorded:")
    assert items["netlink/links.json"]["bytes"] > 0  # the rest of the image was written


def test_links_that_leave_the_root_stay_inside_the_bundle(tmp_path: Path) -> None:
    # A host root whose links climb above it (the live host clamps them at the root, as the
    # kernel does at /) or are absolute: the image must still unpack from a bundle.
    import tarfile

    from agent.host.live import LiveHost

    root = tmp_path / "root"
    dev = root / "devices/virtual/net/x"
    dev.mkdir(parents=True)
    (dev / "operstate").write_text("up\n")
    (root / "etc").mkdir()
    (root / "etc/real.conf").write_text("options ib_core netns_mode=0\n")
    (root / "sys/class/net").mkdir(parents=True)
    os.symlink("../../../../../../devices/virtual/net/x", root / "sys/class/net/x")
    os.symlink("/etc/real.conf", root / "etc/link.conf")
    rec = RecordingHost(LiveHost(str(root)), str(tmp_path / "img"))
    assert rec.read_text("/sys/class/net/x/operstate") == "up\n"
    assert rec.read_text("/etc/link.conf") == "options ib_core netns_mode=0\n"
    rec.finish()
    assert os.readlink(tmp_path / "img/fs/sys/class/net/x") == "../../../devices/virtual/net/x"
    assert os.readlink(tmp_path / "img/fs/etc/link.conf") == "real.conf"
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tf:
        tf.add(tmp_path / "img", arcname="b")
    with open_image(str(tmp_path / "b.tar.gz")) as img:
        assert img.read_text("/sys/class/net/x/operstate") == "up\n"
        assert img.read_text("/etc/link.conf") == "options ib_core netns_mode=0\n"
