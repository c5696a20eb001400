"""ovs reader: OVSDB JSON atoms, and OVS absent -> None with a reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.model import OvsInterface
from agent.readers.common import Notes
from agent.readers.ovs import OVS_ARGV, parse_ovs_interfaces, read_ovs

from .imagekit import make_image

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
