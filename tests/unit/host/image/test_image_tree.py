"""The in-memory image tree: what real archivers write reads back, links resolve inside the tree,
and the caps hold at their edges (small ``Limits`` here; the defaults are in the hostile table)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from agent.host.image import ImageError, ImageFS, Limits, open_tree, write_tree
from tests.support.hostile_images import bundle, header, member, pad


def _tar(fmt: int, entries: list[tuple[str, bytes | None, str | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt) as tf:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tf.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


LONG = "fs/sys/devices/" + "/".join(f"pci0000:{i:02x}" for i in range(20)) + "/vendor"


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_what_tarfile_writes_reads_back(fmt: int) -> None:
    entries: list[tuple[str, bytes | None, str | None]] = [
        ("b/manifest.json", b"{}", None), ("b/fs/sys/class/net", None, None),
        ("b/fs/sys/class/net/eth0", None, "../../devices/pci0000:00/0000:00:01.0/net/eth0"),
        ("b/fs/sys/devices/pci0000:00/0000:00:01.0/net/eth0/mtu", b"9000\n", None)]
    if fmt != tarfile.USTAR_FORMAT:  # ustar has no long names
        entries.append(("b/" + LONG, b"0x15b3\n", None))
    tree = open_tree(_tar(fmt, entries))
    fs = ImageFS(tree)
    assert tree.base == "b" and tree.problems == []
    assert fs.read_text("/sys/class/net/eth0/mtu") == "9000\n"
    assert fs.realpath("/sys/class/net/eth0") == "/sys/devices/pci0000:00/0000:00:01.0/net/eth0"
    assert fs.readlink("/sys/class/net/eth0") == "../../devices/pci0000:00/0000:00:01.0/net/eth0"
    assert fs.listdir("/sys/class/net") == ["eth0"]
    assert fs.glob("/sys/class/net/*/mtu") == ["/sys/class/net/eth0/mtu"]
    if fmt != tarfile.USTAR_FORMAT:
        assert fs.read_text("/" + LONG[3:]) == "0x15b3\n"


def test_links_resolve_inside_the_tree_only() -> None:
    tree = open_tree(bundle([
        member("cmd/", typ=b"5"), member("fs/etc/hostname", b"image-host\n"),
        member("fs/abs", typ=b"2", link="/etc"), member("fs/up", typ=b"2", link="../../../../etc/hostname"),
        member("fs/loop", typ=b"2", link="loop"), member("fs/flat", b"../etc/hostname"),
        member("events.json", typ=b"2", link="/etc/passwd")]))
    fs = ImageFS(tree)
    assert fs.read_text("/abs/hostname") == "image-host\n"  # "/" is the image's fs/, not this machine's
    assert fs.read_text("/up") == "image-host\n"  # ".." stops at fs/
    assert fs.read_text("/loop") is None  # 40 hops, then nothing
    assert fs.read_text("/flat") == "image-host\n"  # a symlink flattened into a file by a copy
    assert tree.file("events.json") is None  # the image root's /etc/passwd does not exist


def test_hard_link_shares_an_earlier_file() -> None:
    tree = open_tree(bundle([member("cmd/a.stdout", b"x"), member("cmd/b.stdout", typ=b"1", link="cmd/a.stdout")]))
    assert tree.file("cmd/b.stdout") == b"x"


@pytest.mark.parametrize(("limits", "members", "words"), [
    (Limits(members=3), [member(f"cmd/{i}") for i in range(4)], "more than 3 members"),
    (Limits(file_bytes=10), [member("cmd/a", b"x" * 11)], "is 0.0 MiB, more than"),
    (Limits(total_bytes=15), [member("cmd/a", b"x" * 10), member("cmd/b", b"x" * 10)], "in all"),
    (Limits(depth=3), [member("cmd/a/b/c", b"")], "more than 3 directories deep"),
    (Limits(name_bytes=20), [member("cmd/" + "x" * 30, b"")], "member name of 34 bytes"),
    (Limits(header_bytes=100), [header(b"p", b"x", 200) + pad(b"x" * 200)], "PAX header of"),
])
def test_caps(limits: Limits, members: list[bytes], words: str) -> None:
    with pytest.raises(ImageError, match=words):
        open_tree(bundle(members), limits)


def test_within_the_caps_is_read(tmp_path: Path) -> None:
    tree = open_tree(bundle([member("cmd/a", b"x" * 10)]), Limits(members=2, file_bytes=10, total_bytes=10))
    assert tree.file("cmd/a") == b"x" * 10


def test_a_directory_reads_like_its_archive(tmp_path: Path) -> None:
    root = tmp_path / "img"
    (root / "fs" / "sys").mkdir(parents=True)
    (root / "fs" / "sys" / "x").write_text("1\n")
    os.symlink("../sys/x", root / "fs" / "sys" / "y")
    (root / "manifest.json").write_text("{}")
    by_dir = open_tree(str(root))
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tf:
        tf.add(root, arcname="top")
    with open(tmp_path / "b.tar.gz", "rb") as fh:
        by_tar = open_tree(fh)  # a file object, as the collector has an upload
    assert ImageFS(by_dir).read_text("/sys/y") == ImageFS(by_tar).read_text("/sys/y") == "1\n"
    assert set(by_dir.files) == {k.removeprefix("top/") for k in by_tar.files}


def test_write_tree_keeps_links_inside(tmp_path: Path) -> None:
    tree = open_tree(bundle([member("top/", typ=b"5"), member("top/fs/sys/x", b"1"),
                             member("top/fs/sys/rel", typ=b"2", link="x"),
                             member("top/fs/sys/abs", typ=b"2", link="/etc/shadow"),
                             member("top/fs/sys/up", typ=b"2", link="../../../../../../etc/shadow")]))
    write_tree(tree, str(tmp_path / "out"))
    sysd = tmp_path / "out" / "fs" / "sys"
    assert os.readlink(sysd / "rel") == "x" and (sysd / "rel").read_text() == "1"
    for name in ("abs", "up"):
        target = os.readlink(sysd / name)
        assert not target.startswith("/")
        assert os.path.normpath(sysd / target).startswith(str(tmp_path / "out"))
