"""The source registry: the daemon's composed parts equal ``take_snapshot``; names, flags and series
come from it."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest

from agent.config import ReadConfig
from agent.host.recorded import open_image
from agent.model import Snapshot
from agent.readers import sources
from agent.readers.common import Notes
from agent.readers.links import LinkCache, parse_links
from agent.readers.snapshot import take_snapshot
from agent.readers.sources import SOURCES, Context, after, compose, source_of, touches_firmware


class _Dumps:
    def __init__(self, dumps: list[list[dict] | None]) -> None:
        self.dumps = dumps
        self.links_error = "netlink/links.json: not in this image"

    def links(self) -> list[dict] | None:
        return self.dumps.pop(0)


def test_link_cache_reads_like_the_reader_and_reuses_unchanged_records(example_image: Path) -> None:
    dump = json.loads((example_image / "netlink" / "links.json").read_text())["links"]
    changed = copy.deepcopy(dump)
    changed[3]["carrier_down_count"] += 1
    cache = LinkCache()
    host = _Dumps([copy.deepcopy(dump), copy.deepcopy(dump), changed, None])
    first = cache.links(host, Notes())  # type: ignore[arg-type]
    assert first == parse_links(dump)
    second = cache.links(host, Notes())  # type: ignore[arg-type]
    assert all(a is b for a, b in zip(first, second, strict=True))
    third = cache.links(host, Notes())  # type: ignore[arg-type]
    assert third == parse_links(changed)
    assert third[3] is not second[3] and third[3].carrier_down_count == second[3].carrier_down_count + 1
    assert third[0] is second[0]
    notes = Notes()
    assert cache.links(host, notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("netlink", "netlink/links.json: not in this image")]


def test_composed_parts_equal_one_snapshot(example_image: Path) -> None:
    cfg = ReadConfig()
    with open_image(str(example_image)) as host:
        whole = take_snapshot(host, cfg)
        ctx = Context(recorder=True)
        parts = {}
        for src in SOURCES:  # one at a time, each from its own context, as the daemon reads them
            parts[src.name] = src.read(host, cfg, ctx, Notes())
            ctx = after(ctx, parts[src.name])
    composed = compose(None, parts)
    assert parts["links"].gives["rails"] == ("net_rail0", "net_rail1")
    # Every field a source owns, from the registry (a list kept by hand here missed the sources added
    # after it), and the notes. Not the time: each part is read at its own moment; nor the node's
    # name, which take_snapshot takes from a node image's manifest (its hostname is not recorded).
    compared = [f for src in SOURCES for f in src.fields if f != "node"] + ["busy", "unavailable"]
    assert {*compared, "taken_at", "node"} == {f.name for f in dataclasses.fields(Snapshot)}
    for name in compared:
        assert getattr(composed, name) == getattr(whole, name), name
    assert (composed.node, whole.node) == (whole.versions.hostname, "gpu-node-017")
    # The recorder's extras: the rails' stats64 traffic beside their ethtool counters.
    assert set(parts["counters"].gives["recorder_counters"]) == {"net_rail0", "net_rail1"}


def test_every_source_is_declared_once_with_its_fields() -> None:
    names = [s.name for s in SOURCES]
    assert len(names) == len(set(names))
    owned = [f for s in SOURCES for f in s.fields]
    assert len(owned) == len(set(owned)), "a snapshot field owned by two sources"
    assert names.index("config") < names.index("links") < names.index("counters")  # rules before rails
    for s in SOURCES:
        assert s.min_interval_s <= s.interval_s
    assert [s.name for s in SOURCES if s.firmware_touching] == ["firmware", "counters", "optics"]
    # ethtool -m reaches the firmware too: it runs in the counters' thread, after the statistics
    assert sources.by_name("optics").lane == "counters"
    assert source_of(["ethtool", "-m", "net_rail0"]) == "optics"
    assert sources.by_name("devlink").tools == ("devlink",)


def test_commands_belong_to_the_source_that_runs_them() -> None:
    assert source_of(["ethtool", "-S", "net_rail0"]) == "counters"
    assert source_of(["devlink", "-j", "dev", "show"]) == "devlink"
    assert source_of(["ovs-vsctl", "--format=json"]) == "config"
    assert source_of(["rdma", "-j", "link", "show"]) == "rdma"
    assert source_of(["devlink", "-j", "health", "show"]) == "health"  # the longest prefix wins
    assert source_of(["cat"]) is None


def test_the_json_form_of_ethtool_m_is_a_firmware_read_and_its_version_query_is_not() -> None:
    # the firmware gate and the --exclude-devices scope go by touches_firmware: ethtool --json -m is
    # the same MCIA read as the text; ethtool --version reaches no device
    for argv in (["ethtool", "-m", "net_rail0"], ["ethtool", "--json", "-m", "net_rail0"]):
        assert source_of(argv) == "optics" and touches_firmware(argv), argv
    assert source_of(["ethtool", "--version"]) == "optics"
    assert not touches_firmware(["ethtool", "--version"])


def test_a_disabled_source_is_not_read(example_image: Path) -> None:
    class Counting:
        def __init__(self, inner):
            self.inner, self.argv = inner, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def run(self, argv, *a, **kw):
            self.argv.append(tuple(argv))
            return self.inner.run(argv, *a, **kw)

    with open_image(str(example_image)) as inner:
        host = Counting(inner)
        snap = take_snapshot(host, ReadConfig(), disabled=("devlink", "health", "firmware", "counters", "optics"))  # type: ignore[arg-type]
    assert not any(a[0] in ("devlink", "ethtool") for a in host.argv)
    assert snap.eswitch == () and snap.ethtool == () and snap.rdma_links  # the others are read
    assert ("health", "disabled (--disable-source)") in snap.unavailable


def test_no_devlink_family_spares_the_health_command() -> None:
    """devlink dev show failing (no devlink netlink family) means every devlink command fails the same
    way: the health source says so instead of running one more."""
    from agent.host import CmdResult

    class NoDevlink:
        live = False
        image = None  # a live host has no image door
        links_error = "no links here"

        def __init__(self) -> None:
            self.argv: list[tuple[str, ...]] = []

        def run(self, argv, timeout_s=10.0, max_bytes=8 << 20):
            self.argv.append(tuple(argv))
            if argv[0] == "devlink":
                return CmdResult(tuple(argv), 1, b"", b"Failed to connect to devlink Netlink\n")
            return CmdResult(tuple(argv), None, missing=True)

        def __getattr__(self, name):  # every other door: nothing there
            return lambda *a, **kw: None if name in ("links", "read_text", "read_bytes", "listdir", "readlink",
                                                      "realpath") else ([] if name == "glob" else {})

    host = NoDevlink()
    snap = take_snapshot(host, ReadConfig(), now=0.0)  # type: ignore[arg-type]
    assert ("devlink", "-j", "health", "show") not in host.argv
    assert dict(snap.unavailable)["devlink health"] == "devlink -j dev show: exit 1: Failed to connect to devlink Netlink"


def test_optics_asks_no_module_of_a_software_rail() -> None:
    """A veth / bond rail has no transceiver (no such driver implements get_module_info): ``ethtool
    -m`` is run for the physical rails only, and the software one gets a note saying why. A netdev
    with a kind but a device under it (IPoIB's ib0 on its PCI function) is hardware and is asked."""
    from agent.host import CmdResult
    from agent.model import Link

    class Seen:
        live = False
        image = None

        def __init__(self) -> None:
            self.argv: list[tuple[str, ...]] = []

        def run(self, argv, timeout_s=10.0, max_bytes=8 << 20, keep="head"):
            self.argv.append(tuple(argv))
            if list(argv) == ["ethtool", "--version"]:
                return CmdResult(tuple(argv), 0, b"ethtool version 6.1\n")
            return CmdResult(tuple(argv), 1, b"", b"netlink error: Operation not supported\n")

    ctx = Context(links=(Link(1, "net_rail0", kind="veth"), Link(2, "net_rail1"), Link(3, "net_rail2", kind="bond"),
                         Link(4, "ib0", kind="ipoib", parent_bus="pci", parent_dev="0000:0c:00.0")),
                  rails=("net_rail0", "net_rail1", "net_rail2", "ib0"))
    host, notes = Seen(), Notes()
    part = sources.by_name("optics").read(host, ReadConfig(), ctx, notes)  # type: ignore[arg-type]
    asked = [a[-1] for a in host.argv if "-m" in a]
    assert asked == ["net_rail1", "ib0"]
    why = dict(part.unavailable)
    soft = "with no device under it is a software netdev, no module of its own"
    assert why["ethtool -m net_rail0"] == f"not read: a veth {soft}"
    assert why["ethtool -m net_rail2"] == f"not read: a bond {soft}"
    assert "Operation not supported" in why["ethtool -m net_rail1"]  # the physical ones were asked
    assert "Operation not supported" in why["ethtool -m ib0"]


def test_a_bundles_long_kind_is_quoted_short_in_the_optics_note() -> None:
    from agent.model import Link

    ctx = Context(links=(Link(1, "net_rail0", kind="veth" + "A" * 5000),), rails=("net_rail0",))
    part = sources.by_name("optics").read(None, ReadConfig(), ctx, Notes())  # type: ignore[arg-type]
    why = dict(part.unavailable)["ethtool -m net_rail0"]
    assert why == f"not read: a veth{'A' * 28} with no device under it is a software netdev, no module of its own"


# -- the registry's checks of the declarations (agent.readers.sources._ordered) ------------------------

def _src(name: str, **kw: object) -> object:
    from agent.readers.source import Source

    return Source(name, "doc", (), 60.0, 0.0, (), lambda *a: None, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("found", "why"), [
    ([("b", _src("a"))], "named after its module"),
    ([("a", _src("a", needs=("rails",)))], "needs rails, which no source before it provides"),
    ([("a", _src("a", order=1, needs=("rails",))), ("b", _src("b", order=2, provides=("rails",)))],
     "no source before it provides"),
    ([("a", _src("a", roles=frozenset({"bootstrap"})))], "unknown role(s) bootstrap"),
    ([("a", _src("a", lane="b")), ("b", _src("b", order=2000))], "runs in the thread of 'b'"),
    ([("a", _src("a", provides=("nothing",)))], "the Context has no field for"),
    ([("a", _src("a", netlink=True)), ("b", _src("b", netlink=True))], "claim the link dump"),
])
def test_a_declaration_that_cannot_hold_is_refused_at_import(found: list, why: str) -> None:
    from agent.readers.sources import _ordered

    with pytest.raises(RuntimeError, match=re.escape(why)):
        _ordered(found)


def test_order_follows_the_declared_places_and_the_caller_provides_its_fields() -> None:
    from agent.readers.sources import _ordered

    out = _ordered([("z", _src("z", order=1, provides=("rails",))), ("a", _src("a", order=5, needs=("rails", "recorder")))])
    assert [s.name for s in out] == ["z", "a"]


def test_a_new_reader_module_is_found_without_touching_the_registry(tmp_path: Path) -> None:
    """A package with one module that declares SOURCE: discover() finds it by its file alone."""
    import sys

    pkg = tmp_path / "fakereaders"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("X = 1\n")
    (pkg / "extra.py").write_text(
        "from agent.readers.source import Source, part\n"
        "def read_extra(host, cfg, ctx, notes):\n    return part('extra', notes)\n"
        "SOURCE = Source('extra', 'an extra read', (), 60.0, 0.0, (), read_extra, needs=('recorder',))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        from agent.readers.sources import discover

        found = discover(str(pkg), "fakereaders")
    finally:
        sys.path.remove(str(tmp_path))
        for m in [m for m in sys.modules if m.startswith("fakereaders")]:
            del sys.modules[m]
    assert [s.name for s in found] == ["extra"]
