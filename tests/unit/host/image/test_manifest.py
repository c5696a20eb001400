"""The manifest of node image format v1: what the writer writes, the reader reads back, and every
wrong value is dropped and named, never raised."""

from __future__ import annotations

import json

import pytest

from agent.host.image import (
    SCHEMA,
    JSONError,
    Manifest,
    ManifestItem,
    item_of,
    load_json,
    manifest_to_json,
    parse_manifest,
)


def test_round_trip() -> None:
    m = Manifest(node="gpu-01", ended_at="2026-03-01T10:00:00Z", items=(
        item_of("fs/proc/cmdline", b"ro quiet\n"),
        ManifestItem("cmd/devlink_-j_dev_show.stdout", "command", argv=("devlink", "-j", "dev", "show"), rc=0,
                     duration_s=0.02, bytes=12),
        ManifestItem("cmd/ovs-vsctl.stdout", "command", argv=("ovs-vsctl",), skipped=True, reason="no db socket"),
    ))
    text = manifest_to_json(m)
    doc = json.loads(text)
    assert doc["schema"] == SCHEMA and [i["path"] for i in doc["items"]] == sorted(i.path for i in m.items)
    by_path = {i["path"]: i for i in doc["items"]}
    assert by_path["cmd/ovs-vsctl.stdout"]["reason"] == "no db socket"
    assert "reason" not in by_path["fs/proc/cmdline"]
    back, problems = parse_manifest(text.encode())
    assert problems == ()
    assert sorted(back.items, key=lambda i: i.path) == sorted(m.items, key=lambda i: i.path)
    assert back.node == "gpu-01" and back.time_of() == 1772359200.0


def test_writer_is_strict_json() -> None:
    text = manifest_to_json(Manifest(items=(ManifestItem("a", "file", duration_s=float("nan")),)))
    assert "NaN" not in text and json.loads(text)["items"][0]["duration_s"] == 0.0


@pytest.mark.parametrize(("doc", "problem"), [
    (b"[]", "manifest.json: not a JSON object"),
    (b"{", "manifest.json: not JSON"),
    (b'{"items": 5}', "manifest.json: items: not a list, ignored"),
    (b'{"node": {"a": 1}}', "manifest.json: node: not a string, ignored"),
    (b'{"items": [{"path": "a", "duration_s": "1.0"}]}', "items[0]: duration_s: not a non-negative number"),
    (b'{"items": [{"path": "a", "duration_s": NaN}]}', None),  # NaN reads as null: no duration
    (b'{"items": [{"path": "a", "rc": "0"}]}', "items[0]: rc: not an integer"),
    (b'{"items": [{"path": "a", "kind": "socket"}]}', "items[0]: kind: not one of"),
    (b'{"items": [{"path": "a", "argv": "devlink"}]}', "items[0]: argv: not a list of strings"),
    (b'{"items": [{"path": "a", "bytes": -1}]}', "items[0]: bytes: not a non-negative integer"),
    (b'{"items": [{"path": "a", "timed_out": "yes"}]}', "items[0]: timed_out: not true or false"),
    (b'{"items": [7, {"path": "b"}]}', "1 malformed item(s) ignored (first: items[0]: not an object)"),
    (b'{"items": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than 64 levels"),
])
def test_bad_values_are_dropped_and_named(doc: bytes, problem: str | None) -> None:
    m, problems = parse_manifest(doc)
    assert isinstance(m, Manifest)
    if problem is None:
        assert problems == ()
    else:
        assert len(problems) >= 1 and problem in problems[0], problems


def test_load_json_bounds() -> None:
    assert load_json(b'[NaN, -Infinity, 1e400, 2.5, ' + b"9" * 5000 + b", 7]", "x") == [None, None, None, 2.5, None, 7]
    # brackets inside strings are text, not nesting
    assert load_json(b'{"a": "' + b"[" * 1000 + b'"}', "x") == {"a": "[" * 1000}
    with pytest.raises(JSONError, match="x: not UTF-8"):
        load_json(b'"\xff"', "x")


def test_items_are_written_by_path_and_the_ones_that_never_ran_last() -> None:
    """The order the test images were made with (``tests/images/make_images.py`` writes through this
    writer, and regenerating them changes no byte)."""
    never = ManifestItem(path=None, kind="command", argv=("ovs-vsctl", "list"), skipped=True, reason="no socket")
    items = (item_of("fs/b", b"b"), never, item_of("cmd/a.stdout", b"a", "command", argv=("a",)))
    doc = json.loads(manifest_to_json(Manifest(node="n", items=items)))
    assert [i["path"] for i in doc["items"]] == ["cmd/a.stdout", "fs/b", None]
    assert doc["items"][2]["reason"] == "no socket"
