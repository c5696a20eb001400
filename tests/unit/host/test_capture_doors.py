"""The doors a capture reads files through: ``walk`` (a ``**`` glob) and ``copy_tail`` (a file's last
bytes, streamed), answered alike by a live host over a directory and by a node image of it."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from agent.host.live import LiveHost
from agent.host.paths import NotRegularFile
from agent.host.recorded import open_image


def _tree(root: Path) -> None:
    (root / "etc/sriov/sub").mkdir(parents=True)
    (root / "etc/sriov/a.json").write_bytes(b'{"pf": 1}\n')
    (root / "etc/sriov/sub/b.conf").write_bytes(b"b\n" * 50_000)  # a real file past 64 KiB
    (root / "var").mkdir()
    os.symlink("../var", root / "etc/sriov/sub/var-link")  # a link to a directory: listed, not entered


def _image(root: Path, tmp_path: Path) -> Path:
    path = tmp_path / "img.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        tf.add(root, arcname="img/fs")
    return path


def test_walk_and_copy_tail_answer_alike_live_and_from_an_image(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _tree(root)
    live = LiveHost(str(root))
    with open_image(str(_image(root, tmp_path))) as image:
        for host in (live, image):
            assert sorted(host.walk("/etc/sriov")) == ["/etc/sriov/a.json", "/etc/sriov/sub/b.conf",
                                                        "/etc/sriov/sub/var-link"], host
            assert host.walk("/etc/sriov/a.json") == [] and host.walk("/nowhere") == []
            out = io.BytesIO()
            assert host.copy_tail("/etc/sriov/sub/b.conf", 10, out) == (10, True)
            assert out.getvalue() == b"b\n" * 5
            out = io.BytesIO()
            assert host.copy_tail("/etc/sriov/a.json", 1 << 20, out) == (10, False)
            assert out.getvalue() == b'{"pf": 1}\n'
            with pytest.raises(FileNotFoundError):
                host.copy_tail("/etc/nothing", 10, io.BytesIO())


def test_copy_tail_never_opens_a_fifo(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "pipe")  # open() for reading would block until a writer came
    with pytest.raises(NotRegularFile):
        LiveHost(str(root)).copy_tail("/pipe", 10, io.BytesIO())
