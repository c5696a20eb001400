"""ovs reader: OVSDB JSON atoms, and OVS absent -> None with a reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.model import OvsInterface
from agent.readers.common import Notes
from agent.readers.ovs import OVS_ARGV, parse_ovs_interfaces, read_ovs
from tests.support.imagekit import make_image

DOC = {
    "data": [
        ["net_rail0_0", "", 12, 1, "up", ["set", []]],
        ["net_rail0_3", "", 0, -1, "down", "could not open network device net_rail0_3 (No such device)"],
        ["br-int", "internal", ["set", [7]], ["set", []], ["set", ["up"]], ["set", []]],
        [["set", []], "", 1, 1, "up", ["set", []]],
    ],
    "headings": ["name", "type", "ifindex", "ofport", "link_state", "error"],
}


def test_parse_atoms() -> None:
    out = parse_ovs_interfaces(DOC)
    assert out == (
        OvsInterface("net_rail0_0", None, 12, 1, "up", None),
        OvsInterface("net_rail0_3", None, 0, -1, "down", "could not open network device net_rail0_3 (No such device)"),
        OvsInterface("br-int", "internal", 7, None, "up", None),
    )


@pytest.mark.parametrize("doc", [[], {"data": []}, {"headings": "x", "data": []}])
def test_wrong_shape(doc: object) -> None:
    with pytest.raises(ValueError):
        parse_ovs_interfaces(doc)


def test_image_without_ovs(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/cmdline": "x"})
    notes = Notes()
    assert read_ovs(host, notes=notes) is None
    assert notes.unavailable == [("ovs", f"{' '.join(OVS_ARGV)}: not recorded in this image")]


def test_skipped_item_reason_is_kept(tmp_path: Path) -> None:
    manifest = {"schema": "railscope.bundle/v1", "items": [
        {"path": None, "kind": "command", "argv": OVS_ARGV, "skipped": True,
         "reason": "no OVS db socket at /var/run/openvswitch/db.sock"}]}
    host = make_image(tmp_path / "img", manifest=manifest)
    notes = Notes()
    assert read_ovs(host, notes=notes) is None
    assert notes.unavailable == [("ovs", "no OVS db socket at /var/run/openvswitch/db.sock")]


def test_recorded_answer_and_corrupt_json(tmp_path: Path) -> None:
    host = make_image(tmp_path / "a", cmds={tuple(OVS_ARGV): (json.dumps(DOC), 0)})
    assert [i.name for i in read_ovs(host) or ()] == ["net_rail0_0", "net_rail0_3", "br-int"]
    host = make_image(tmp_path / "b", cmds={tuple(OVS_ARGV): ('{"data": [', 0)})
    notes = Notes()
    assert read_ovs(host, notes=notes) is None
    assert notes.unavailable[0][1].startswith("ovs-vsctl list Interface: not valid JSON")


def test_live_without_socket_runs_nothing(tmp_path: Path) -> None:
    from agent.host.live import LiveHost

    host = LiveHost(str(tmp_path))
    notes = Notes()
    assert read_ovs(host, notes=notes) is None
    assert notes.unavailable == [("ovs", "no OVS db socket at /var/run/openvswitch/db.sock or "
                                         "/run/openvswitch/db.sock")]


def test_bad_rows_skip_themselves_only_and_short_rows_are_read() -> None:
    doc = {"headings": ["name", "type", "ifindex", "ofport", "link_state", "error"],
           "data": ["junk", [["set", []], "", 1, 1, "up", ["set", []]], ["net_rail0_0", "", 12],
                    ["net_rail0_1", "", 13, 2, "up", ["set", []]]]}
    assert parse_ovs_interfaces(doc) == (OvsInterface("net_rail0_0", None, 12, None, None, None),
                                         OvsInterface("net_rail0_1", None, 13, 2, "up", None))


def test_uuid_atoms_read_as_the_uuid_and_odd_sets_as_nothing() -> None:
    doc = {"headings": ["name", "type", "error", "ifindex"],
           "data": [[["uuid", "4f5c"], ["named-uuid", "row1"], ["set", 5], ["set", [1, 2]]]]}
    assert parse_ovs_interfaces(doc) == (OvsInterface("4f5c", "row1", None, None, None, None),)


def test_another_document_is_noted_with_the_shape_expected(tmp_path: Path) -> None:
    host = make_image(tmp_path / "a", cmds={tuple(OVS_ARGV): ("[]", 0)})
    notes = Notes()
    assert read_ovs(host, notes=notes) is None
    assert notes.unavailable == [("ovs", 'ovs-vsctl list Interface: expected {"headings": [...], "data": [[...], ...]}')]


class _Ovs:
    """A host with or without an OVS db socket whose ovs-vsctl answers as given; records timeouts."""

    def __init__(self, res, live: bool = True, sockets: tuple[str, ...] = ("/run/openvswitch/db.sock",)) -> None:
        self.res, self.live, self.sockets, self.asked = res, live, sockets, []

    def exists(self, path: str) -> bool:
        return path in self.sockets

    def run(self, argv, timeout_s=10.0, max_bytes=0):
        self.asked.append((tuple(argv), timeout_s))
        return self.res


def _res(rc, out: str = "", err: str = "", **kw):
    from agent.host import CmdResult

    return CmdResult(tuple(OVS_ARGV), rc, out.encode(), err.encode(), **kw)


def test_ovs_is_asked_through_the_socket_found_with_the_callers_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    host = _Ovs(_res(0, json.dumps(DOC)))
    assert [i.name for i in read_ovs(host, timeout_s=4.0) or ()] == ["net_rail0_0", "net_rail0_3", "br-int"]  # type: ignore[arg-type]
    assert host.asked == [(tuple(OVS_ARGV), 4.0)]
    host.asked.clear()
    read_ovs(host)  # type: ignore[arg-type]
    assert host.asked == [(tuple(OVS_ARGV), 10.0)]


@pytest.mark.parametrize(("res", "why"), [
    (_res(1, "", "ovs-vsctl: unix:/run/openvswitch/db.sock: database connection failed\n"),
     "ovs-vsctl --format=json --columns=name,type,ifindex,ofport,link_state,error list Interface: exit 1: "
     "ovs-vsctl: unix:/run/openvswitch/db.sock: database connection failed"),
    (_res(0, '{"data": ['), "ovs-vsctl list Interface: not valid JSON (Expecting value at line 1 column 11)"),
    (_res(0, '{"data": [', truncated=True),
     "ovs-vsctl list Interface: not valid JSON (Expecting value at line 1 column 11, output cut at the size cap)"),
])
def test_an_ovs_answer_that_cannot_be_read_is_noted(monkeypatch: pytest.MonkeyPatch, res, why: str) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    notes = Notes()
    assert read_ovs(_Ovs(res), notes=notes) is None  # type: ignore[arg-type]
    assert notes.unavailable == [("ovs", why)]


def test_an_image_without_the_ovs_answer_says_where_the_socket_would_be(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    notes = Notes()
    assert read_ovs(_Ovs(_res(None, missing=True), live=False, sockets=()), notes=notes) is None  # type: ignore[arg-type]
    assert notes.unavailable == [("ovs", "no OVS db socket at /var/run/openvswitch/db.sock or /run/openvswitch/db.sock")]
    host = _Ovs(_res(None, missing=True), live=False, sockets=())
    assert read_ovs(host, timeout_s=4.0) is None  # type: ignore[arg-type]
    assert host.asked == [(tuple(OVS_ARGV), 4.0)]
