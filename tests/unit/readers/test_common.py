"""The helpers every reader shares: integers from text, one-value files, symlink names, JSON reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.readers.common import basename, parse_json, read_word, to_int
from agent.safejson import Pairs
from tests.support.imagekit import make_image


@pytest.mark.parametrize(("text", "n"), [("0x1f", 31), ("0X1F", 31), (" 0x10\n", 16), ("007", 7), ("08", 8),
                                         ("-1", -1), (12, 12)])
def test_integers_decimal_or_hex(text: object, n: int) -> None:
    assert to_int(text) == n


@pytest.mark.parametrize("text", ["", "0x", "0xg1", "1.5", "fast", None, True, 1.0, [1]])
def test_anything_else_is_no_integer(text: object) -> None:
    assert to_int(text) is None


def test_a_symlink_name_is_its_last_component_as_it_is() -> None:
    assert basename("../../../0000:0c:00.0/") == "0000:0c:00.0"
    assert basename("mlx5_core") == "mlx5_core"
    assert basename("../drivers/BOX") == "BOX"
    assert basename("") is None and basename("/") is None and basename(None) is None


def test_a_one_value_file_is_read_up_to_4_kib(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/proc/x": "y" * 5000, "/proc/e": " \n"})
    assert read_word(host, "/proc/x") == "y" * 4096
    assert read_word(host, "/proc/e") is None and read_word(host, "/proc/none") is None


def test_json_reasons_name_the_command_and_the_cut_only_when_cut() -> None:
    assert parse_json("[" * 100 + "]" * 100, "devlink -j port show") == (
        None, "devlink -j port show: JSON nested deeper than 64 levels, ignored")
    assert parse_json('{"a": ', "x") == (None, "x: not valid JSON (Expecting value at line 1 column 7)")
    assert parse_json('{"a": ', "x", truncated=True) == (
        None, "x: not valid JSON (Expecting value at line 1 column 7, output cut at the size cap)")
    assert parse_json(" \n", "x") == (None, "x: empty output")


def test_json_as_pairs_keeps_a_key_printed_twice_and_the_same_bounds() -> None:
    doc, err = parse_json('[ {"t": 33.7617, "a": [1, NaN], "t": {"high": 60}} ]', "x", pairs=True)
    assert err is None and isinstance(doc, list) and isinstance(doc[0], Pairs)
    assert list(doc[0]) == [("t", 33.7617), ("a", [1, None]), ("t", Pairs([("high", 60)]))]
    assert parse_json('{"t": 1, "t": 2}', "x") == ({"t": 2}, None)  # a dict keeps only the last
    assert parse_json("[" * 100 + "]" * 100, "x", pairs=True) == (None, "x: JSON nested deeper than 64 levels, ignored")
