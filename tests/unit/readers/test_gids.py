"""The gids source: a rail's GID table read as the kernel lays it out in sysfs, proven on a real table.

The table is NVIDIA/nccl#1573's ``show_gids`` (tests/fixtures/public/mlx5/show-gids-pod-macvlan-nccl-1573.txt):
the sysfs tree here is laid out from it (``gids/<i>``, ``gid_attrs/types/<i>``, ``gid_attrs/ndevs/<i>`` of
port 1), with the empty slots all zeros and *no* ``types`` file, so a reader that touches an empty
slot's attributes (EINVAL on a real node) reads nothing there and is caught by the count of reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.host.live import LiveHost
from agent.readers.common import Notes
from agent.readers.gids import parse_gid, parse_gid_type, read_gids
from agent.readers.source import Context
from agent.readers.sources import by_name

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures/public/mlx5/show-gids-pod-macvlan-nccl-1573.txt"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def _rows() -> list[tuple[str, int, int, str, str, str]]:
    rows = []
    for line in FIXTURE.read_text().splitlines():
        cells = [c.strip() for c in line.split("\t") if c.strip()]
        if cells and cells[0].startswith("mlx5_"):
            dev, port, index, gid, *rest = cells
            ver, ndev = rest[-2], rest[-1]
            rows.append((dev, int(port), int(index), gid, {"v1": "IB/RoCE v1", "v2": "RoCE v2"}[ver], ndev))
    return rows


def _tree(root: Path, slots: int = 16) -> None:
    """/sys laid out from the fixture: net1 on mlx5_0, net2 on mlx5_1, 16 GID slots each."""
    rows = _rows()
    for pf, (dev, ndev) in enumerate((("mlx5_0", "net1"), ("mlx5_1", "net2"))):
        fn = root / f"sys/devices/pci0000:00/0000:0{pf}:00.0"
        (fn / "infiniband" / dev).mkdir(parents=True)
        (root / "sys/class/net" / ndev).mkdir(parents=True)
        # relative, as the kernel links it: a host root resolves it inside the tree
        (root / "sys/class/net" / ndev / "device").symlink_to(f"../../../devices/pci0000:00/0000:0{pf}:00.0")
        base = root / "sys/class/infiniband" / dev / "ports/1"
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (base / sub).mkdir(parents=True)
        for i in range(slots):
            (base / "gids" / str(i)).write_text(ZERO + "\n")
        for d, _port, i, gid, kind, nd in rows:
            if d == dev:
                (base / "gids" / str(i)).write_text(gid + "\n")
                (base / "gid_attrs/types" / str(i)).write_text(kind + "\n")
                (base / "gid_attrs/ndevs" / str(i)).write_text(nd + "\n")


def test_the_real_table_is_read_entry_for_entry(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = read_gids(LiveHost(str(tmp_path)), ["net1", "net2"], Notes())
    want = [(nd, dev, 1, i, gid, kind) for dev, _p, i, gid, kind, nd in _rows()]
    assert [(g.netdev, g.device, g.port, g.index, g.gid, g.type) for g in got] == want
    assert [g.ipv4 for g in got if g.netdev == "net1"] == [False, False, True, True]


def test_empty_slots_are_skipped_before_their_attributes_are_read(tmp_path: Path) -> None:
    _tree(tmp_path)
    host = LiveHost(str(tmp_path))
    read: list[str] = []
    real = host.read_text

    def counting(path: str, max_bytes: int = 1 << 20) -> str | None:
        read.append(path)
        return real(path, max_bytes)

    host.read_text = counting  # type: ignore[method-assign]
    read_gids(host, ["net1"], Notes())
    attrs = [p for p in read if "/gid_attrs/" in p]
    # 4 populated slots: their ndevs and types only; the 12 empty slots' attributes are never asked
    assert len(attrs) == 8 and all(p.rsplit("/", 1)[1] in {"4", "5", "6", "7"} for p in attrs)


def test_a_gid_of_another_netdev_on_the_port_is_not_the_rails(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/6").write_text("net1.100\n")
    got = read_gids(LiveHost(str(tmp_path)), ["net1"], Notes())
    assert [g.index for g in got] == [4, 5, 7]


def test_a_rail_without_an_rdma_device_has_no_entries_and_no_note(tmp_path: Path) -> None:
    (tmp_path / "sys/class/net/net_rail0").mkdir(parents=True)
    notes = Notes()
    assert read_gids(LiveHost(str(tmp_path)), ["net_rail0"], notes) == ()
    assert notes.unavailable == []


@pytest.mark.parametrize(("text", "want"), [
    ("fe80:0000:0000:0000:a4ed:ccff:fe8b:1994\n", "fe80:0000:0000:0000:a4ed:ccff:fe8b:1994"),
    ("FE80:0000:0000:0000:A4ED:CCFF:FE8B:1994", "fe80:0000:0000:0000:a4ed:ccff:fe8b:1994"),
    (ZERO, None), ("", None), (None, None), ("fe80::1", None), ("x" * 4000, None),
    ("fe80:0000:0000:0000:a4ed:ccff:fe8b:1994\x1b[2J", None),
])
def test_parse_gid(text: str | None, want: str | None) -> None:
    assert parse_gid(text) == want


@pytest.mark.parametrize(("text", "want"), [("RoCE v2\n", "RoCE v2"), ("IB/RoCE v1", "IB/RoCE v1"), ("", None),
                                            (None, None), ("RoCE v3", None)])
def test_parse_gid_type(text: str | None, want: str | None) -> None:
    assert parse_gid_type(text) == want


def test_the_source_reads_the_rails_it_is_given_and_owns_its_field(tmp_path: Path) -> None:
    _tree(tmp_path)
    src = by_name("gids")
    part = src.read(LiveHost(str(tmp_path)), None, Context(rails=("net2",)), Notes())  # type: ignore[arg-type]
    assert set(part.fields) == set(src.fields) == {"gids"}
    assert {g.netdev for g in part.fields["gids"]} == {"net2"} and len(part.fields["gids"]) == 4
    assert not src.firmware_touching and src.commands == ()
