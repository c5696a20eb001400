"""versions reader: kernel, driver, RDMA netns mode running vs asked for in modprobe.d."""

from __future__ import annotations

from pathlib import Path

from agent.readers.common import Notes
from agent.readers.versions import parse_modprobe_netns, read_versions
from tests.support.imagekit import make_image


def test_modprobe_lines() -> None:
    text = ("# rdma-cni needs exclusive mode\n"
            "#options ib_core netns_mode=1\n"
            "options ib_core netns_mode=0\n"
            "options mlx5_core prof_sel=2\n"
            "  options   ib_core  foo=1 netns_mode=1\n"
            "options ib_core_x netns_mode=0\n")
    assert parse_modprobe_netns(text, "/etc/modprobe.d/ib_core.conf") == [
        ("/etc/modprobe.d/ib_core.conf", "options ib_core netns_mode=0"),
        ("/etc/modprobe.d/ib_core.conf", "options   ib_core  foo=1 netns_mode=1"),
    ]


def test_read_versions_doca(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        "/proc/sys/kernel/osrelease": "6.8.0-60-generic\n",
        "/proc/sys/kernel/hostname": "gpu-node-017\n",
        "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro ib_core.netns_mode=0\n",
        "/sys/module/mlx5_core/version": "25.10-1.7.1\n",
        "/sys/module/mlx5_core/srcversion": "5F8D2A1B3C4E6F708192A3B\n",
        "/sys/module/ib_core/parameters/netns_mode": "Y\n",
        "/etc/modprobe.d/ib_core.conf": "options ib_core netns_mode=0\n",
        "/etc/modprobe.d/README": "options ib_core netns_mode=1\n",  # not a .conf: modprobe ignores it
    })
    v = read_versions(host)
    assert (v.kernel, v.hostname, v.mlx5_version, v.mlx5_srcversion, v.netns_mode) == (
        "6.8.0-60-generic", "gpu-node-017", "25.10-1.7.1", "5F8D2A1B3C4E6F708192A3B", "Y")
    assert v.cmdline is not None and "ib_core.netns_mode=0" in v.cmdline
    assert v.modprobe_netns_mode == (("/etc/modprobe.d/ib_core.conf", "options ib_core netns_mode=0"),)


def test_inbox_driver_has_no_version_file(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/sys/kernel/osrelease": "6.8.0-60-generic\n"})
    notes = Notes()
    v = read_versions(host, notes)
    assert v.kernel == "6.8.0-60-generic" and v.mlx5_version is None and v.netns_mode is None
    assert notes.unavailable == []


def test_nothing_readable(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/sys/kernel/osrelease": ""})
    notes = Notes()
    assert read_versions(host, notes).kernel is None
    assert notes.unavailable == [("versions", "/proc/sys/kernel/osrelease: not readable")]


def test_without_notes_an_unreadable_kernel_is_no_crash(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/sys/kernel/osrelease": ""})
    assert read_versions(host).kernel is None


def test_a_modprobe_file_is_read_up_to_256_kib(tmp_path: Path) -> None:
    # A file is untrusted input: only its first 256 KiB count, and a line just past them is not read.
    pad = "#" * ((256 << 10) - 1) + "\n"
    host = make_image(tmp_path / "img", files={
        "/proc/sys/kernel/osrelease": "6.8.0\n",
        "/etc/modprobe.d/a.conf": "#" * ((256 << 10) - 31) + "\noptions ib_core netns_mode=0\n",
        "/etc/modprobe.d/b.conf": pad + "options ib_core netns_mode=1\n",
    })
    assert read_versions(host).modprobe_netns_mode == (("/etc/modprobe.d/a.conf", "options ib_core netns_mode=0"),)


def test_the_cmdline_is_read_up_to_64_kib(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/sys/kernel/osrelease": "6.8.0\n",
                                               "/proc/cmdline": "x" * (64 << 10) + "ib_core.netns_mode=0\n"})
    cmdline = read_versions(host).cmdline
    assert cmdline == "x" * (64 << 10)
