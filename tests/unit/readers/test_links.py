"""links reader: the netlink/links.json schema -> Link records; statistics for rails only."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model import Link, PciFunction, RailRule, VfInfo
from agent.readers.common import Notes
from agent.readers.links import (
    is_representor,
    is_uplink_port_name,
    parse_link,
    parse_links,
    parse_speed,
    rail_netdevs,
    read_link_stats,
    read_links,
    read_speeds,
    with_parents,
    with_stats,
)
from tests.support.imagekit import make_image

RAIL = {
    "ifindex": 4, "ifname": "net_rail0", "operstate": "UP", "carrier": 1, "carrier_changes": 2,
    "carrier_up_count": 1, "carrier_down_count": 1, "mtu": 9000, "address": "b8:3f:d2:aa:00:10",
    "phys_port_name": "p0", "phys_switch_id": "9a3f21c0ffee0001", "parent_bus": "pci",
    "parent_dev": "0000:0c:00.0", "master": None, "kind": None,
    "stats64": {"rx_bytes": 10, "tx_bytes": 20, "rx_packets": 1, "tx_packets": 2},
    "vfinfo": [{"vf": 0, "mac": "02:00:00:00:00:01", "link_state": "auto", "spoofchk": False, "trust": True}],
}
REP = {"ifindex": 6, "ifname": "net_rail0_0", "operstate": "UP", "carrier": 1, "phys_port_name": "pf0vf0",
       "phys_switch_id": "9A:3F:21:C0:FF:EE:00:01", "parent_bus": "pci", "parent_dev": "0000:0c:00.0",
       "stats64": {"rx_bytes": 5}, "vfinfo": None}


def test_parse_link_fields() -> None:
    lk = parse_link(RAIL)
    assert lk is not None
    assert (lk.ifindex, lk.ifname, lk.operstate, lk.carrier, lk.carrier_down_count, lk.mtu) == (
        4, "net_rail0", "UP", 1, 1, 9000)
    assert lk.is_oper_up
    assert lk.vfinfo == (VfInfo(vf=0, mac="02:00:00:00:00:01", link_state="auto", spoofchk=False, trust=True),)
    assert lk.stat("tx_bytes") == 20
    assert lk.stats64 == (("rx_bytes", 10), ("tx_bytes", 20), ("rx_packets", 1), ("tx_packets", 2))


def test_switch_id_normalised_and_iproute2_vf_address_key() -> None:
    lk = parse_link({**REP, "vfinfo": [{"vf": 3, "address": "AA:bb:cc:dd:ee:ff", "spoofchk": "off"},
                                       {"mac": "no index"}]})
    assert lk is not None
    assert lk.phys_switch_id == "9a3f21c0ffee0001"
    assert lk.vfinfo == (VfInfo(vf=3, mac="AA:bb:cc:dd:ee:ff", spoofchk=False),)


def test_garbage_entries_are_skipped_and_sorted() -> None:
    out = parse_links([REP, {"ifname": "noindex"}, "text", {"ifindex": "x", "ifname": "bad"}, RAIL,
                       {**RAIL, "ifindex": 9, "ifname": "weird", "mtu": "jumbo", "master": {"x": 1}}])
    assert [lk.ifname for lk in out] == ["net_rail0", "net_rail0_0", "weird"]
    assert out[2].mtu is None and out[2].master is None


def test_read_links_has_no_bulk_stats_and_stats_for_named_only(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", links=[RAIL, REP])
    notes = Notes()
    links = read_links(host, notes)
    assert all(lk.stats64 is None for lk in links)
    stats = read_link_stats(host, ["net_rail0"], notes)
    assert set(stats) == {"net_rail0"}
    merged = with_stats(links, stats)
    assert merged[0].stat("rx_bytes") == 10 and merged[1].stats64 is None
    assert notes.unavailable == []


def test_no_link_dump_is_unavailable(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/cmdline": "x"})
    notes = Notes()
    assert read_links(host, notes) == ()
    assert notes.unavailable == [("netlink", "netlink/links.json: not in this image")]


def test_corrupt_link_dump_is_unavailable_with_reason(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", links=[])
    (tmp_path / "img" / "netlink" / "links.json").write_text('{"links": [{"ifindex": 1,', encoding="utf-8")
    host = make_image(tmp_path / "img")
    notes = Notes()
    assert read_links(host, notes) == ()
    (source, reason), = notes.unavailable
    assert source == "netlink" and reason.startswith("netlink/links.json:")


def test_speed_from_sysfs(tmp_path: Path) -> None:
    # Every positive count of Mb/s is a speed (1 included); -1, 0 and the u32 sentinel mean none.
    assert [parse_speed(t) for t in ("400000\n", "1", "-1\n", "4294967295", "0", "", "fast", None)] == [
        400000, 1, None, None, None, None, None, None]
    host = make_image(tmp_path / "img", links=[RAIL, REP], files={
        "/sys/class/net/net_rail0/speed": "400000\n", "/sys/class/net/net_rail0_0/speed": "-1\n"})
    speeds = read_speeds(host, ["net_rail0", "net_rail0_0", "gone0"])
    assert speeds == {"net_rail0": 400000}
    merged = with_stats(read_links(host), {}, speeds)
    assert [lk.speed_mbps for lk in merged] == [400000, None]


class _NoDump:
    """A host whose link dump fails (``links()`` raising, as pyroute2 does) or gives nothing."""

    def __init__(self, exc: Exception | None = None, error: str | None = None) -> None:
        self.exc, self.links_error = exc, error

    def links(self) -> None:
        if self.exc is not None:
            raise self.exc


def test_a_failing_link_dump_is_a_reason_never_a_raise() -> None:
    notes = Notes()
    assert read_links(_NoDump(OSError("Operation not permitted")), notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("netlink", "link dump failed: Operation not permitted")]


def test_an_absent_link_dump_without_a_reason_says_so() -> None:
    notes = Notes()
    assert read_links(_NoDump(), notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("netlink", "link dump not available")]
    assert read_links(_NoDump()) == ()  # type: ignore[arg-type]


def test_every_field_of_a_link_reads_back() -> None:
    lk = parse_link({**RAIL, "master": "br0", "kind": "vlan", "carrier_up_count": 3, "carrier_down_count": 2,
                     "carrier_changes": 5})
    assert lk == Link(ifindex=4, ifname="net_rail0", operstate="UP", carrier=1, carrier_changes=5,
                      carrier_up_count=3, carrier_down_count=2, mtu=9000, address="b8:3f:d2:aa:00:10",
                      phys_port_name="p0", phys_switch_id="9a3f21c0ffee0001", parent_bus="pci",
                      parent_dev="0000:0c:00.0", master="br0", kind="vlan",
                      stats64=(("rx_bytes", 10), ("tx_bytes", 20), ("rx_packets", 1), ("tx_packets", 2)),
                      vfinfo=(VfInfo(vf=0, mac="02:00:00:00:00:01", link_state="auto", spoofchk=False, trust=True),))


def test_numbers_as_text_are_numbers_and_other_values_are_none() -> None:
    lk = parse_link({"ifindex": "7", "ifname": " eth7 ", "mtu": "1500", "carrier": True, "operstate": 5,
                     "address": "  ", "kind": {}, "parent_dev": [], "master": 12})
    assert lk is not None
    assert (lk.ifindex, lk.ifname, lk.mtu, lk.carrier, lk.operstate, lk.address, lk.kind, lk.parent_dev,
            lk.master) == (7, "eth7", 1500, None, "5", None, None, None, 12)
    assert parse_link({"ifindex": 7, "ifname": "x", "master": True}).master is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "want"), [(True, True), (False, False), (1, True), (0, False), (2, True),
                                             (" ON ", True), ("true", True), ("TRUE", True), ("off", False),
                                             ("False", False), ("yes", None), (None, None), ([], None)])
def test_vf_flags_as_bools_numbers_or_words(value: object, want: bool | None) -> None:
    lk = parse_link({**RAIL, "vfinfo": [{"vf": 0, "spoofchk": value, "trust": value}]})
    assert lk is not None and lk.vfinfo is not None
    assert (lk.vfinfo[0].spoofchk, lk.vfinfo[0].trust) == (want, want)


def test_vfinfo_that_is_no_list_is_none_and_entries_without_an_index_are_skipped() -> None:
    assert parse_link({**RAIL, "vfinfo": {"vf": 0}}).vfinfo is None  # type: ignore[union-attr]
    lk = parse_link({**RAIL, "vfinfo": ["junk", {"vf": "x"}, {"vf": "2", "mac": "02:00:00:00:00:03"}]})
    assert lk is not None and lk.vfinfo == (VfInfo(vf=2, mac="02:00:00:00:00:03"),)


@pytest.mark.parametrize(("value", "want"), [("9a3f21c0ffee0001", "9a3f21c0ffee0001"),
                                             ("9A:3F:21:C0", "9a3f21c0"), ("9a-3f-21", "9a3f21"),
                                             ("9A3F", "9a3f"), ("9a3f:", "9a3f"), (":-:", None), ("", None)])
def test_switch_ids_are_bare_lower_case_hex(value: str, want: str | None) -> None:
    assert parse_link({**REP, "phys_switch_id": value}).phys_switch_id == want  # type: ignore[union-attr]


def test_stats64_keeps_only_u64_counts_and_a_non_object_is_none() -> None:
    lk = parse_link({**RAIL, "stats64": {"a": 0, "b": (1 << 64) - 1, "c": 1 << 64, "d": -1, "e": "3", "f": "x"}})
    assert lk is not None and lk.stats64 == (("a", 0), ("b", (1 << 64) - 1), ("e", 3))
    assert parse_link({**RAIL, "stats64": [1]}).stats64 is None  # type: ignore[union-attr]
    assert parse_link({**RAIL, "stats64": None}).stats64 is None  # type: ignore[union-attr]


def test_a_failing_stats_read_is_a_reason_never_a_raise() -> None:
    class _Failing:
        def link_stats(self, names: list[str]) -> None:
            raise OSError("No buffer space available")

    notes = Notes()
    assert read_link_stats(_Failing(), ["net_rail0"], notes) == {}  # type: ignore[arg-type]
    assert notes.unavailable == [("netlink stats", "link statistics failed: No buffer space available")]
    assert read_link_stats(_Failing(), ["net_rail0"]) == {}  # type: ignore[arg-type]


def test_parents_are_filled_from_the_device_symlink_only_where_netlink_named_none() -> None:
    links = [Link(ifindex=1, ifname="old0"), Link(ifindex=2, ifname="old1", parent_bus="pci"),
             Link(ifindex=3, ifname="new0", parent_bus="pci", parent_dev="0000:0c:00.0"), Link(ifindex=4, ifname="lo")]
    got = with_parents(links, {"old0": "0000:1a:00.0", "old1": "0000:1a:00.1", "new0": "0000:99:00.0"})
    assert [(lk.ifname, lk.parent_bus, lk.parent_dev) for lk in got] == [
        ("old0", "pci", "0000:1a:00.0"), ("old1", "pci", "0000:1a:00.1"), ("new0", "pci", "0000:0c:00.0"), ("lo", None, None)]


@pytest.mark.parametrize(("name", "uplink"), [("p0", True), ("p12", True), ("", False), (None, False), ("p", False),
                                              ("pf0vf1", False), ("p0x", False)])
def test_uplink_port_names_are_p_and_a_number(name: str | None, uplink: bool) -> None:
    assert is_uplink_port_name(name) is uplink


@pytest.mark.parametrize(("name", "rep"), [("pf0vf1", True), ("pf1sf3", True), ("c1pf0vf2", True), ("pf0", True),
                                           ("p0", False), ("", False), (None, False), ("pf0vf", False)])
def test_representor_port_names(name: str | None, rep: bool) -> None:
    assert is_representor(Link(ifindex=1, ifname="x", phys_port_name=name)) is rep


def test_rail_netdevs_are_ruled_named_or_mellanox_uplinks_without_rules_never_representors_or_vfs() -> None:
    fns = {"0000:0c:00.0": PciFunction("0000:0c:00.0", vendor="0x15b3"),
           "0000:0c:00.1": PciFunction("0000:0c:00.1", physfn="0000:0c:00.0"),
           "0000:0d:00.0": PciFunction("0000:0d:00.0", vendor="0x8086"),
           "0000:0e:00.0": PciFunction("0000:0e:00.0")}
    links = [Link(ifindex=1, ifname="renamed_badly", phys_port_name="p0"),
             Link(ifindex=2, ifname="net_rail0_0", phys_port_name="pf0vf0"),
             Link(ifindex=3, ifname="vf_on_ruled"),
             Link(ifindex=4, ifname="net_rail7"),
             Link(ifindex=5, ifname="mgmt0", phys_port_name="p0"),
             Link(ifindex=6, ifname="uplink_unknown_vendor", phys_port_name="p1"),
             Link(ifindex=7, ifname="uplink_no_function", phys_port_name="p0"),
             Link(ifindex=8, ifname="uplink_no_pci", phys_port_name="p0")]
    pci_of = {"renamed_badly": "0000:0c:00.0", "net_rail0_0": "0000:0c:00.0", "vf_on_ruled": "0000:0c:00.1",
              "mgmt0": "0000:0d:00.0", "uplink_unknown_vendor": "0000:0e:00.0", "uplink_no_function": "0000:0f:00.0"}
    rules = [RailRule("0000:0c:00.0", "net_rail0", "net", "/f", 1), RailRule("0000:0c:00.1", "x", "rdma", "/f", 2)]
    # where rules exist, an uplink no rule names is not read (its statistics are a firmware read)
    assert rail_netdevs(links, pci_of, fns, rules, ("net_rail%rail_id%",)) == ["net_rail7", "renamed_badly"]
    # without rules, the Mellanox uplinks (or of no known vendor) are the rails
    assert rail_netdevs(links, pci_of, fns, [], ("net_rail%rail_id%",)) == [
        "net_rail7", "renamed_badly", "uplink_no_function", "uplink_unknown_vendor"]


def test_a_speed_is_read_up_to_64_bytes(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/sys/class/net/net_rail0/speed": "400000" + " " * 58 + "1\n",
                                               "/sys/class/net/net_rail1/speed": "-1\n"})
    assert read_speeds(host, ["net_rail0", "net_rail1", "absent"]) == {"net_rail0": 400000}


def test_the_functions_a_rail_map_names_are_read_as_rails_and_no_other_uplink_is() -> None:
    """--rail-map names rail functions as rules do: their netdevs are read whatever their names, and the
    other uplinks (a management NIC, a storage port) are not: their statistics are firmware reads."""
    fns = {"0000:0c:00.0": PciFunction("0000:0c:00.0", vendor="0x15b3"),
           "0000:8d:00.0": PciFunction("0000:8d:00.0", vendor="0x15b3"),
           "0000:a1:00.0": PciFunction("0000:a1:00.0", vendor="0x15b3")}
    links = [Link(ifindex=1, ifname="enp12s0f0np0", phys_port_name="p0"),
             Link(ifindex=2, ifname="eth4", phys_port_name="pf0vf0"),
             Link(ifindex=3, ifname="enp141s0f0np0", phys_port_name="p0"),
             Link(ifindex=4, ifname="ens7f0np0", phys_port_name="p0")]
    pci_of = {"enp12s0f0np0": "0000:0c:00.0", "eth4": "0000:0c:00.0", "enp141s0f0np0": "0000:8d:00.0",
              "ens7f0np0": "0000:a1:00.0"}
    assert rail_netdevs(links, pci_of, fns, [], ("net_rail%rail_id%",), ["0000:0c:00.0", "0000:8d:00.0"]) == [
        "enp12s0f0np0", "enp141s0f0np0"]
    # without the map every Mellanox uplink is read (a node without rules)
    assert "ens7f0np0" in rail_netdevs(links, pci_of, fns, [], ("net_rail%rail_id%",))


def test_a_rail_map_reaches_the_rail_functions_of_the_links_source(tmp_path: Path) -> None:
    """The rail map's functions are rail PFs for every firmware-touching source after links (scope.py)."""
    from agent.config import ReadConfig
    from agent.host.recorded import RecordedHost
    from agent.readers.links import read_links_part
    from agent.readers.source import Context

    root = Path(__file__).resolve().parents[2] / "images" / "rail-map-function-missing"
    host = RecordedHost(str(root))
    try:
        cfg = ReadConfig(rail_map=((0, "0000:0c:00.0"), (1, "0000:0d:00.0")))
        got = read_links_part(host, cfg, Context(), Notes())
    finally:
        host.close()
    assert got.gives["rails"] == ("enp12s0f0np0",)
    assert got.gives["rail_bdfs"] == ("0000:0c:00.0", "0000:0d:00.0")
