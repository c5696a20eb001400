"""RecordedHost / open_image: directories and bundles, hostile archives, command records, manifest."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from pathlib import Path

import pytest

from agent.host import HostError, slug
from agent.host.recorded import open_image


def _image(root: Path) -> Path:
    (root / "fs" / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "fs" / "proc" / "sys" / "kernel" / "osrelease").write_text("6.8.0-60-generic\n")
    (root / "cmd").mkdir()
    (root / "cmd" / "rdma_-j_system_show.stdout").write_text('[{"netns":"shared"}]\n')
    (root / "cmd" / "rdma_-j_system_show.rc").write_text("0\n")
    (root / "manifest.json").write_text('{"schema": "railscope.bundle/v1", "node": "n1", "items": []}')
    return root


def _tar(src: Path, dest: Path, top: str | None) -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        for entry in sorted(src.iterdir()):
            tf.add(entry, arcname=f"{top}/{entry.name}" if top else entry.name)
    return dest


def test_directory(tmp_path: Path) -> None:
    with open_image(str(_image(tmp_path / "img"))) as host:
        assert host.read_text("/proc/sys/kernel/osrelease") == "6.8.0-60-generic\n"
        assert host.manifest is not None and host.manifest.node == "n1"
        assert not host.live


def test_directory_with_one_top_directory(tmp_path: Path) -> None:
    _image(tmp_path / "outer" / "bundle-1")
    with open_image(str(tmp_path / "outer")) as host:
        assert host.read_text("/proc/sys/kernel/osrelease") is not None


@pytest.mark.parametrize("top", ["node-2026-bundle", None])
def test_tar_gz_with_and_without_top_dir(tmp_path: Path, top: str | None) -> None:
    bundle = _tar(_image(tmp_path / "img"), tmp_path / "b.tar.gz", top)
    before = set(os.listdir(tmp_path))
    for source in (str(bundle), bundle.read_bytes(), bundle.open("rb")):
        host = open_image(source)  # a path, the bytes, a file object: one reader
        assert host.run(["rdma", "-j", "system", "show"]).ok
        assert host.read_text("/proc/sys/kernel/osrelease") == "6.8.0-60-generic\n"
        host.close()
    assert set(os.listdir(tmp_path)) == before  # read in memory: nothing written beside it


def test_not_an_image_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("hello")
    with pytest.raises(HostError, match="not a railscope node image"):
        open_image(str(tmp_path / "d"))


def test_random_bytes_file(tmp_path: Path) -> None:
    f = tmp_path / "junk.tar.gz"
    f.write_bytes(os.urandom(4096))
    with pytest.raises(HostError, match=r"neither a node image directory nor a tar\.gz bundle"):
        open_image(str(f))
    with pytest.raises(HostError, match="no such file"):
        open_image(str(tmp_path / "missing.tar.gz"))


def test_path_traversal_member_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "evil.tar.gz"
    with tarfile.open(bundle, "w:gz") as tf:
        for name, data in (("img/manifest.json", b"{}"), ("../evil", b"owned")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with pytest.raises(HostError, match=re.escape("member '../evil' climbs out with '..', refusing")):
        open_image(str(bundle))
    assert not (tmp_path / "evil").exists()
    assert not (Path(os.path.dirname(str(tmp_path))) / "evil").exists()


def test_rc_parsing_and_missing_commands(tmp_path: Path) -> None:
    root = _image(tmp_path / "img")
    for stem, rc in (("devlink_-j_dev_show", "1\n"), ("devlink_-j_port_show", ""),
                     ("rdma_-j_link_show", "garbage")):
        (root / "cmd" / f"{stem}.stdout").write_text("{}")
        (root / "cmd" / f"{stem}.rc").write_text(rc)
    (root / "cmd" / "devlink_-j_dev_show.stderr").write_text("kernel answers: Operation not supported\n")
    host = open_image(str(root))
    r = host.run(["devlink", "-j", "dev", "show"])
    assert r.available and r.rc == 1 and not r.ok
    assert r.why() == "devlink -j dev show: exit 1: kernel answers: Operation not supported"
    assert host.run(["devlink", "-j", "port", "show"]).rc == 0  # an empty .rc reads as success
    bad = host.run(["rdma", "-j", "link", "show"])
    assert not bad.available and bad.why() == "cmd/rdma_-j_link_show.rc: not an exit status"
    gone = host.run(["ethtool", "-S", "eth0"])
    assert gone.missing and gone.why() == "ethtool -S eth0: not recorded in this image"


def test_manifest_timed_out_item(tmp_path: Path) -> None:
    root = _image(tmp_path / "img")
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.0"]
    item = {"path": f"cmd/{slug(argv)}.stdout", "kind": "command", "argv": argv, "rc": None,
            "duration_s": 10.0, "timed_out": True}
    (root / "manifest.json").write_text(json.dumps({"schema": "railscope.bundle/v1", "items": [item]}))
    r = open_image(str(root)).run(argv)
    assert r.timed_out and not r.available and not r.missing
    assert r.why() == "devlink -j dev eswitch show pci/0000:0c:00.0: timed out when the image was recorded"


def test_symlinks_stay_inside_the_image(tmp_path: Path) -> None:
    root = _image(tmp_path / "img")
    (root / "fs" / "sys" / "class" / "net").mkdir(parents=True)
    os.symlink("/etc", root / "fs" / "sys" / "class" / "net" / "abs")
    os.symlink("../../../../../../../../etc/hostname", root / "fs" / "sys" / "class" / "net" / "up")
    host = open_image(str(root))
    # absolute and climbing links resolve inside fs/, never to this machine's /etc
    assert host.read_text("/sys/class/net/abs/hostname") is None
    assert host.read_text("/sys/class/net/up") is None


def test_flattened_symlinks_are_followed(tmp_path: Path) -> None:
    root = _image(tmp_path / "img")
    dev = root / "fs" / "sys" / "devices" / "pci0000:0b" / "0000:0c:00.0"
    dev.mkdir(parents=True)
    (dev / "sriov_numvfs").write_text("2\n")
    (dev / "physfn_like").write_text("../0000:0b:00.0")
    bus = root / "fs" / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    (bus / "0000:0c:00.0").write_text("../../../devices/pci0000:0b/0000:0c:00.0")
    host = open_image(str(root))
    assert host.read_text("/sys/bus/pci/devices/0000:0c:00.0/sriov_numvfs") == "2\n"
    assert host.readlink("/sys/bus/pci/devices/0000:0c:00.0") == "../../../devices/pci0000:0b/0000:0c:00.0"
    assert host.realpath("/sys/bus/pci/devices/0000:0c:00.0") == "/sys/devices/pci0000:0b/0000:0c:00.0"
    assert host.readlink("/sys/bus/pci/devices/0000:0c:00.0/sriov_numvfs") is None


def test_rc_from_manifest_when_no_rc_file(tmp_path: Path) -> None:
    root = _image(tmp_path / "img")
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.1"]
    (root / "cmd" / f"{slug(argv)}.stdout").write_text('{"dev":{}}')
    item = {"path": f"cmd/{slug(argv)}.stdout", "kind": "command", "argv": argv, "rc": 1, "duration_s": 0.02}
    (root / "manifest.json").write_text(json.dumps({"schema": "railscope.bundle/v1", "items": [item]}))
    r = open_image(str(root)).run(argv)
    assert r.available and r.rc == 1


def test_a_bundle_cut_short_is_a_host_error_not_a_traceback(tmp_path: Path) -> None:
    import io
    import tarfile as _tarfile

    from agent.host import HostError
    from agent.host.recorded import open_image

    buf = io.BytesIO()
    with _tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for i in range(50):
            data = os.urandom(4096)  # incompressible, so the cut lands inside a member
            info = _tarfile.TarInfo(f"img/fs/f{i}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(HostError, match="damaged archive"):
        open_image(str(cut))
