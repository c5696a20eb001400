"""optics: ``ethtool -m`` of real modules (tests/fixtures/public/optics/SOURCES.md)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.host.recorded import RecordedHost
from agent.model import ModuleOptics
from agent.readers.common import Notes
from agent.readers.optics import (
    ARGV,
    JSON_ARGV,
    MAX_JSON_BYTES,
    VERSION_ARGV,
    parse_ethtool_m,
    parse_ethtool_m_json,
    parse_ethtool_version,
    read_optics,
    reset_forms,
)
from tests.support.imagekit import make_image, public


def test_sff8636_qsfp28_monitors_and_its_own_thresholds() -> None:
    m = parse_ethtool_m(public("optics/ethtool-m-qsfp28-finisar-cwdm4.txt"), "net_rail0")
    assert (m.identifier, m.vendor, m.part, m.serial) == ("0x11 (QSFP28)", "FINISAR CORP.", "FTLC1152RGPL6-FB",
                                                          "UX503M0")
    assert (m.temperature_c, m.voltage_v) == (33.76, 3.2505)
    assert [(ln.lane, ln.tx_bias_ma, ln.tx_power_mw, ln.rx_power_mw) for ln in m.lanes] == [
        (1, 42.068, 1.0778, 0.9969), (2, 37.926, 1.0394, 0.91), (3, 38.87, 0.9198, 0.9101),
        (4, 37.968, 1.1533, 0.9713)]
    assert len(m.thresholds) == 20
    assert m.threshold("rx_power_mw", "low_warning") == 0.0631
    assert m.threshold("rx_power_mw", "low_alarm") == 0.0251
    assert m.threshold("temperature_c", "high_alarm") == 60.0
    assert m.threshold("tx_bias_ma", "high_warning") == 50.0
    assert m.threshold("voltage_v", "low_alarm") == 2.97
    assert m.threshold("tx_power_mw", "high_alarm") == 3.5481


def test_cmis_qsfp_dd_lanes_without_thresholds() -> None:
    m = parse_ethtool_m(public("optics/ethtool-m-qsfp-dd-cmis-no-thresholds.txt"), "net_rail1")
    assert m.identifier and m.identifier.startswith("0x18 (QSFP-DD")
    assert [ln.lane for ln in m.lanes] == list(range(1, 9))
    assert m.lanes[0].rx_power_mw == 1.1299 and m.lanes[7].tx_power_mw == 1.3919
    assert m.thresholds == () and m.temperature_c is None


def test_sff8472_single_lane_and_flag_lines_are_not_values() -> None:
    text = ("\tIdentifier                                : 0x03 (SFP)\n"
            "\tLaser bias current                        : 7.934 mA\n"
            "\tLaser output power                        : 0.5734 mW / -2.42 dBm\n"
            "\tReceiver signal average optical power     : 0.0004 mW / -33.98 dBm\n"
            "\tLaser rx power low alarm                  : On\n"
            "\tLaser rx power low alarm threshold        : 0.0100 mW / -20.00 dBm\n")
    m = parse_ethtool_m(text, "eth0")
    assert [(ln.lane, ln.tx_bias_ma, ln.tx_power_mw, ln.rx_power_mw) for ln in m.lanes] == [(1, 7.934, 0.5734, 0.0004)]
    assert m.thresholds == (("rx_power_mw", "low_alarm", 0.01),)


@pytest.mark.parametrize("text", ["", "netlink error: Operation not supported\n", "Cannot get module EEPROM\n"])
def test_no_module_dump_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="ethtool -m net_rail0"):
        parse_ethtool_m(text, "net_rail0")


def test_read_one_at_a_time_and_a_failure_loses_only_its_rail(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={
        ("ethtool", "-m", "net_rail0"): (public("optics/ethtool-m-qsfp28-finisar-cwdm4.txt"), 0),
        ("ethtool", "-m", "net_rail1"): ("", 1, "netlink error: Operation not supported\n"),
    })
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)
    assert [m.netdev for m in got] == ["net_rail0"]
    assert [s for s, _ in notes.unavailable] == ["ethtool -m net_rail1"]


# -- the JSON form (ethtool 6.14+) ---------------------------------------------------------------------

SFF8636_TEXT = "optics/ethtool-m-qsfp28-finisar-cwdm4.txt"
SFF8636_JSON = "optics/ethtool-json-m-qsfp28-finisar-cwdm4-RECONSTRUCTED.json"
CMIS_TEXT = "optics/ethtool-m-qsfp-dd-cmis-no-thresholds.txt"
CMIS_JSON = "optics/ethtool-json-m-qsfp-dd-cmis-no-thresholds-RECONSTRUCTED.json"


def body(rel: str) -> str:
    """A fixture without its ``#`` provenance lines (SOURCES.md names them)."""
    return "".join(ln + "\n" for ln in public(rel).splitlines() if not ln.startswith("#"))


def recorded_stderr(rel: str) -> tuple[str, int]:
    """A RECORDED answer: ``$ cmd`` first, then its stderr, ``[rc=N]`` last."""
    lines = body(rel).splitlines()
    assert lines[0].startswith("$ ethtool ")
    return "\n".join(lines[1:-1]) + "\n", int(lines[-1].strip()[len("[rc="):-1])


@pytest.fixture(autouse=True)
def _fresh_forms() -> Iterator[None]:
    reset_forms()
    yield
    reset_forms()


def monitors(m: ModuleOptics) -> ModuleOptics:
    """``m`` without its flags: the text fixtures cut most flag lines, which the reconstructions print."""
    return dataclasses.replace(m, flags=(), flags_reported=False,
                               lanes=tuple(dataclasses.replace(ln, flags=()) for ln in m.lanes))


@pytest.mark.parametrize(("text", "json_"), [(SFF8636_TEXT, SFF8636_JSON), (CMIS_TEXT, CMIS_JSON)])
def test_text_and_json_of_one_module_give_the_same_record(text: str, json_: str) -> None:
    assert monitors(parse_ethtool_m_json(body(json_), "net_rail0")) == monitors(parse_ethtool_m(public(text),
                                                                                                "net_rail0"))


def test_json_sff8636_reading_and_thresholds_of_the_same_key_are_both_kept() -> None:
    # "module_temperature" is the reading (33.7617: %g of the register) and, further on, the object of
    # its thresholds: a dict would keep only the object, and the module would have no temperature.
    raw = body(SFF8636_JSON)
    assert raw.count('"module_temperature":') == 2 and '"module_temperature": 33.7617,' in raw
    m = parse_ethtool_m_json(raw, "net_rail0")
    assert (m.identifier, m.vendor, m.part, m.serial) == ("0x11 (QSFP28)", "FINISAR CORP.", "FTLC1152RGPL6-FB",
                                                          "UX503M0")
    assert (m.temperature_c, m.voltage_v) == (33.76, 3.2505)
    assert [(ln.lane, ln.tx_bias_ma, ln.tx_power_mw, ln.rx_power_mw) for ln in m.lanes] == [
        (1, 42.068, 1.0778, 0.9969), (2, 37.926, 1.0394, 0.91), (3, 38.87, 0.9198, 0.9101),
        (4, 37.968, 1.1533, 0.9713)]
    assert len(m.thresholds) == 20
    assert m.threshold("temperature_c", "high_alarm") == 60.0 and m.threshold("rx_power_mw", "low_alarm") == 0.0251
    assert m.threshold("voltage_v", "low_warning") == 3.135 and m.threshold("tx_bias_ma", "high_warning") == 50.0


def test_json_cmis_without_thresholds_is_lanes_only() -> None:
    m = parse_ethtool_m_json(body(CMIS_JSON), "net_rail1")
    assert m.identifier == "0x18 (QSFP-DD Double Density 8X Pluggable Transceiver (INF-8628))"
    assert [ln.lane for ln in m.lanes] == list(range(1, 9))
    assert m.lanes[0].rx_power_mw == 1.1299 and m.lanes[7].tx_power_mw == 1.3919 and m.lanes[0].tx_bias_ma is None
    assert m.thresholds == () and m.temperature_c is None


def _cmis_banks(banks: int) -> str:
    """A CMIS module of ``banks`` banks as cmis.c prints it: each lane array once per bank, in bank order."""
    parts = ['[ {\n        "identifier": 25,\n        "identifier_description": "OSFP 8X Pluggable Transceiver"']
    for b in range(banks):
        bias = ",".join(str(10 + b * 8 + i) for i in range(8))
        rx = ",".join(f"{0.5 + (b * 8 + i) / 100:g}" for i in range(8))
        parts.append(f'        "laser_tx_bias_current": [ {bias} ]')
        parts.append(f'        "rx_power": {{\n            "values": [ {rx} ],\n'
                     f'            "type": "Rcvr signal avg optical power"\n        }}')
    return ",\n".join(parts) + "\n    } ]\n"


def test_json_cmis_second_bank_is_lanes_9_to_16() -> None:
    m = parse_ethtool_m_json(_cmis_banks(2), "net_rail0")
    assert [ln.lane for ln in m.lanes] == list(range(1, 17))
    assert (m.lanes[8].lane, m.lanes[8].tx_bias_ma, m.lanes[8].rx_power_mw) == (9, 18.0, 0.58)
    assert (m.lanes[15].tx_bias_ma, m.lanes[15].rx_power_mw) == (25.0, 0.65)


def test_json_sff8472_one_lane_as_numbers_and_thresholds_as_objects() -> None:
    # sfpdiag.c: "laser_bias_current" is the reading, then (thresholds) an object, as in the text
    text = """[ {
        "identifier": 3,
        "identifier_description": "SFP",
        "optical_diagnostics_support": true,
        "laser_bias_current": 7.934,
        "laser_output_power": 0.5734,
        "rx_power": {
            "value": 0.0004,
            "type": "Receiver signal average optical power"
        },
        "module_temperature": 31.5,
        "module_voltage": 3.31,
        "alarm/warning_flags_implemented": true,
        "laser_rx_power_low_alarm": true,
        "laser_bias_current": {
            "high_alarm_threshold": 15,
            "low_alarm_threshold": 2
        },
        "laser_rx_power": {
            "low_alarm_threshold": 0.01
        }
    } ]
"""
    m = parse_ethtool_m_json(text, "eth0")
    assert [(ln.lane, ln.tx_bias_ma, ln.tx_power_mw, ln.rx_power_mw) for ln in m.lanes] == [(1, 7.934, 0.5734, 0.0004)]
    assert m.thresholds == (("tx_bias_ma", "high_alarm", 15.0), ("tx_bias_ma", "low_alarm", 2.0),
                            ("rx_power_mw", "low_alarm", 0.01))
    assert (m.temperature_c, m.voltage_v) == (31.5, 3.31)


def test_json_a_null_reading_leaves_its_lane_empty_and_the_others_in_place() -> None:
    # NaN / Infinity / an overflowing number read as null (agent.safejson): that value is unknown, the
    # lanes after it keep their numbers
    text = '[ {\n "identifier": 17,\n "transmit_avg_optical_power": [ 1.0,NaN,1e999,1.2 ]\n} ]'
    m = parse_ethtool_m_json(text, "net_rail0")
    assert [(ln.lane, ln.tx_power_mw) for ln in m.lanes] == [(1, 1.0), (4, 1.2)]


def test_json_an_apostrophe_escaped_the_ethtool_way_is_read() -> None:
    # json_writer.c escapes ' as \\' (not JSON); an escaped backslash before a quote stays as it is
    text = '[ {\n "identifier": 17,\n "vendor_name": "O\\\'NEIL OPTICS",\n "vendor_pn": "A\\\\\\\'B",\n' \
           ' "module_temperature": 30\n} ]'
    m = parse_ethtool_m_json(text, "net_rail0")
    assert (m.vendor, m.part, m.temperature_c) == ("O'NEIL OPTICS", "A\\'B", 30.0)


def _truncated() -> str:
    raw = body(SFF8636_JSON)
    return raw[:len(raw) // 2]


MALFORMED = {
    "empty": ("", "empty output"),
    "error text": ("netlink error: Operation not supported\n", "not a module dump"),
    "hex dump of an unknown module": ("Offset\t\tValues\n------\t\t------\n0x0000:\t\t00 00\n", "not a module dump"),
    "truncated": (_truncated(), "not valid JSON"),
    "ethtool stopped after its opening": ("[ {", "not valid JSON"),
    "empty list": ("[ ]\n", "not one module object"),
    "two modules": ("[ {\"identifier\": 17}, {\"identifier\": 17} ]", "not one module object"),
    "an object, not a list": ('{"identifier": 17}', "not a module dump"),
    "no module in it": ('[ {\n "power_set": false\n} ]', "no module in the answer"),
    "identifier not a byte": ('[ {\n "identifier": 300\n} ]', "identifier: not a byte"),
    "lane values not numbers": ('[ {\n "identifier": 17,\n "laser_tx_bias_current": [ "42 mA" ]\n} ]',
                                "laser_tx_bias_current: '42 mA' is not a number"),
    "a boolean as a reading": ('[ {\n "identifier": 17,\n "module_temperature": true\n} ]', "is not a number"),
    "lanes not a list": ('[ {\n "identifier": 17,\n "transmit_avg_optical_power": 1.0\n} ]', "not a list"),
    "rx_power not an object": ('[ {\n "identifier": 17,\n "rx_power": [ 1.0 ]\n} ]', "rx_power: not an object"),
    "more lanes than a module has": ('[ {\n "identifier": 24,\n "transmit_avg_optical_power": [ '
                                     + ",".join(["1.0"] * 33) + " ]\n} ]", "33 lanes"),
    "nested past the bound": ("[" * 100 + "]" * 100, "nested deeper"),
    "larger than any module": ('[ {\n "identifier": 17,\n "vendor_name": "' + "x" * (MAX_JSON_BYTES + 1) + '"\n} ]',
                               "more than any module prints"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_json_that_is_no_module_is_a_one_line_error_never_part_of_a_module(case: str) -> None:
    text, why = MALFORMED[case]
    with pytest.raises(ValueError, match="ethtool --json -m net_rail0") as exc:
        parse_ethtool_m_json(text, "net_rail0")
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_a_malformed_json_answer_is_a_note_of_its_rail_only(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={
        VERSION_ARGV: ("ethtool version 6.14.2\n", 0),
        (*JSON_ARGV, "net_rail0"): (_truncated(), 0),
        (*JSON_ARGV, "net_rail1"): (body(SFF8636_JSON), 0),
    })
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)
    assert [m.netdev for m in got] == ["net_rail1"]
    assert [s for s, _ in notes.unavailable] == ["ethtool -m net_rail0"]
    assert "not valid JSON" in notes.unavailable[0][1]


@pytest.mark.parametrize(("text", "want"), [("ethtool version 6.1\n", (6, 1, 0)), ("ethtool version 6.14.2\n", (6, 14, 2)),
                                            ("ethtool version 5.4\n", (5, 4, 0)), ("", None), ("6.14\n", None)])
def test_ethtool_version(text: str, want: tuple[int, int, int] | None) -> None:
    assert parse_ethtool_version(text) == want


# -- which form runs -----------------------------------------------------------------------------------

class Seen:
    """A host that forwards to a node image and keeps the argv that reached it; ``live`` as told."""

    def __init__(self, inner: RecordedHost, live: bool = False) -> None:
        self._inner = inner
        self.live = live
        self.seen: list[tuple[str, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 8 << 20) -> Any:
        self.seen.append(tuple(str(a) for a in argv))
        return self._inner.run(argv, timeout_s=timeout_s, max_bytes=max_bytes)


def _both_forms(root: Path, version: str | None, **extra: tuple[str, int] | tuple[str, int, str]) -> RecordedHost:
    cmds: dict[tuple[str, ...], tuple[str, int] | tuple[str, int, str]] = {}
    for nd in ("net_rail0", "net_rail1"):
        cmds[(*ARGV, nd)] = (public(SFF8636_TEXT), 0)
        cmds[(*JSON_ARGV, nd)] = (body(SFF8636_JSON), 0)
    if version is not None:
        cmds[VERSION_ARGV] = (f"ethtool version {version}\n", 0)
    for nd, spec in extra.items():
        cmds[(*JSON_ARGV, nd)] = spec
    return make_image(root, cmds=cmds)


@pytest.mark.parametrize(("version", "json_form"), [("6.1", False), ("6.11", False), ("6.14", True),
                                                    ("6.14.2", True), ("6.15", True), ("7.0", True),
                                                    (None, False)])
def test_the_form_follows_ethtool_version(tmp_path: Path, version: str | None, json_form: bool) -> None:
    host = Seen(_both_forms(tmp_path / "img", version))
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)  # type: ignore[arg-type]
    form = JSON_ARGV if json_form else ARGV
    assert host.seen == [VERSION_ARGV, (*form, "net_rail0"), (*form, "net_rail1")]
    assert len(got) == 2 and monitors(got[0]) == monitors(parse_ethtool_m(public(SFF8636_TEXT), "net_rail0"))
    assert notes.unavailable == []  # an image without --version (made before it was read) replays as before
    read_optics(host, ["net_rail0"], notes=notes)  # type: ignore[arg-type]
    assert host.seen[3:] == [(*form, "net_rail0")]  # decided once per host: no second --version


@pytest.mark.parametrize("refusal", ["optics/ethtool-6.1-json-m-veth-rejected.txt",
                                     "optics/ethtool-6.14-json-m-no-netlink.txt"])
def test_an_ethtool_that_refuses_json_falls_back_to_text_and_is_remembered(tmp_path: Path, refusal: str) -> None:
    err, rc = recorded_stderr(refusal)
    host = Seen(_both_forms(tmp_path / "img", "6.14", net_rail0=("", rc, err)))
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)  # type: ignore[arg-type]
    # the refusal is the command line's answer: the rail is read again as text at once, the next rail as text
    assert host.seen == [VERSION_ARGV, (*JSON_ARGV, "net_rail0"), (*ARGV, "net_rail0"), (*ARGV, "net_rail1")]
    assert [m.netdev for m in got] == ["net_rail0", "net_rail1"] and notes.unavailable == []
    read_optics(host, ["net_rail0"], notes=notes)  # type: ignore[arg-type]
    assert host.seen[4:] == [(*ARGV, "net_rail0")]


def test_a_live_refusal_holds_for_every_host_of_the_process_with_that_ethtool(tmp_path: Path) -> None:
    err, rc = recorded_stderr("optics/ethtool-6.1-json-m-veth-rejected.txt")
    image = _both_forms(tmp_path / "img", "6.14", net_rail0=("", rc, err))
    first = Seen(image, live=True)
    read_optics(first, ["net_rail0"])  # type: ignore[arg-type]
    assert (*JSON_ARGV, "net_rail0") in first.seen
    again = Seen(image, live=True)  # a capture's host, made later in the same process
    read_optics(again, ["net_rail0"])  # type: ignore[arg-type]
    assert again.seen == [VERSION_ARGV, (*ARGV, "net_rail0")]
    replayed = Seen(image)  # a node image decides by what it recorded, not by this process
    read_optics(replayed, ["net_rail1"])  # type: ignore[arg-type]
    assert replayed.seen == [VERSION_ARGV, (*JSON_ARGV, "net_rail1")]


def test_a_rail_without_a_module_is_a_note_not_a_refusal(tmp_path: Path) -> None:
    err, rc = recorded_stderr("optics/ethtool-6.14-json-m-veth-not-supported.txt")
    host = Seen(_both_forms(tmp_path / "img", "6.14.2", net_rail0=("", rc, err)))
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)  # type: ignore[arg-type]
    assert host.seen == [VERSION_ARGV, (*JSON_ARGV, "net_rail0"), (*JSON_ARGV, "net_rail1")]
    assert [m.netdev for m in got] == ["net_rail1"]
    assert notes.unavailable == [("ethtool -m net_rail0",
                                  "ethtool --json -m net_rail0: exit 1: netlink error: Operation not supported")]


def test_an_image_of_the_text_form_replays_it_under_a_json_ethtool(tmp_path: Path) -> None:
    host = Seen(make_image(tmp_path / "img", cmds={VERSION_ARGV: ("ethtool version 6.15\n", 0),
                                                   (*ARGV, "net_rail0"): (public(SFF8636_TEXT), 0)}))
    notes = Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], notes=notes)  # type: ignore[arg-type]
    assert [m.netdev for m in got] == ["net_rail0"]
    # neither form recorded for net_rail1: the note is the JSON read's, the form the node used
    assert notes.unavailable == [("ethtool -m net_rail1", "ethtool --json -m net_rail1: not recorded in this image")]


_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20)
_KEY = st.sampled_from(["identifier", "identifier_description", "vendor_name", "vendor_sn", "module_temperature",
                        "module_voltage", "laser_tx_bias_current", "transmit_avg_optical_power", "rx_power",
                        "laser_bias_current", "laser_output_power", "laser_rx_power", "power_set"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_KEY, _VALUE), max_size=8))
def test_json_of_any_shape_is_a_whole_record_or_a_one_line_error(pairs: list[tuple[str, Any]]) -> None:
    text = "[ {" + ",".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "} ]"
    try:
        m = parse_ethtool_m_json(text, "net_rail0")
    except ValueError as exc:
        assert str(exc).startswith("ethtool --json -m net_rail0: ") and "\n" not in str(exc)
    else:
        assert all(1 <= ln.lane <= 32 for ln in m.lanes)
        assert all(isinstance(v, float) and math.isfinite(v) for _, _, v in m.thresholds)


_WHOLE = body(SFF8636_JSON).rstrip()


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=len(_WHOLE) - 1))
def test_a_cut_answer_is_never_part_of_a_module(cut: int) -> None:
    with pytest.raises(ValueError, match="ethtool --json -m net_rail0"):
        parse_ethtool_m_json(_WHOLE[:cut], "net_rail0")


# -- one firmware read at a time per PCI function, functions side by side ------------------------------

class ScriptedModules:
    """A scripted host (a stand-in: no module exists on this machine): ``ethtool --version`` says
    ``version`` (6.1: text; 6.14: JSON), ``ethtool [--json] -m R`` answers the public QSFP28 module after
    ``hold(R)`` returns; it keeps how many module reads of one PCI function were in flight at once.
    ``live`` so the timeout rule applies."""

    live = True

    def __init__(self, pf_of: dict[str, str], timed_out: frozenset[str] = frozenset(),
                 version: str = "6.1") -> None:
        import threading

        self.pf_of, self.timed_out, self.version = pf_of, timed_out, version
        self.json = body(SFF8636_JSON).encode()
        self.lock = threading.Lock()
        self.inflight: dict[str, int] = {}
        self.most_per_pf = 0
        self.started: list[str] = []
        self.text = public(SFF8636_TEXT).encode()

    def hold(self, rail: str) -> None:
        """Called while the read of ``rail`` is in flight."""

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 8 << 20) -> Any:
        from agent.host import CmdResult

        argv = tuple(argv)
        if argv == VERSION_ARGV:
            return CmdResult(argv, 0, f"ethtool version {self.version}\n".encode())
        rail, pf = argv[-1], self.pf_of.get(argv[-1], argv[-1])
        with self.lock:
            self.started.append(rail)
            self.inflight[pf] = self.inflight.get(pf, 0) + 1
            self.most_per_pf = max(self.most_per_pf, self.inflight[pf])
        try:
            self.hold(rail)
            if rail in self.timed_out:
                return CmdResult(argv, None, timed_out=True, reason="timed out after 10 s")
            return CmdResult(argv, 0, self.json if argv[:len(JSON_ARGV)] == JSON_ARGV else self.text)
        finally:
            with self.lock:
                self.inflight[pf] -= 1


PFS = {"r0": "0000:0c:00.0", "r1": "0000:0c:00.0", "r2": "0000:0c:00.1", "r3": "0000:0c:00.1",
       "r4": "0000:8d:00.0", "r5": "0000:8d:00.1"}


@pytest.mark.parametrize("version", ["6.1", "6.14"])
def test_module_reads_of_two_functions_run_side_by_side_and_never_two_on_one_function(version: str) -> None:
    import threading

    host = ScriptedModules(PFS, version=version)
    # r2 and r4 sit on different functions: each waits for the other to be in flight too. Read one
    # after the other, the barrier breaks (BrokenBarrierError) instead of passing.
    both = threading.Barrier(2, timeout=10)
    host.hold = lambda rail: both.wait() if rail in ("r2", "r4") else None  # type: ignore[method-assign]
    notes = Notes()
    got = read_optics(host, list(PFS), notes=notes, pf_of=PFS)  # type: ignore[arg-type]
    assert [m.netdev for m in got] == list(PFS) and notes.unavailable == []  # the caller's order
    assert host.most_per_pf == 1  # r0/r1 and r2/r3 share a function: one at a time


@pytest.mark.parametrize("version", ["6.1", "6.14"])
def test_the_first_rail_is_read_alone(version: str) -> None:
    import threading

    host = ScriptedModules(PFS, version=version)
    first_done, others_during_first = threading.Event(), []

    def hold(rail: str) -> None:
        if rail == "r0":
            import time

            time.sleep(0.2)  # the others would start meanwhile, were they not held back
            first_done.set()
        elif not first_done.is_set():
            others_during_first.append(rail)

    host.hold = hold  # type: ignore[method-assign]
    got = read_optics(host, list(PFS), pf_of=PFS)  # type: ignore[arg-type]
    assert len(got) == len(PFS) and host.started[0] == "r0" and others_during_first == []


def test_a_read_that_raises_in_a_worker_is_raised_to_the_caller_after_the_others_ran() -> None:
    host = ScriptedModules(PFS)

    def hold(rail: str) -> None:
        if rail == "r4":
            raise RuntimeError("reader bug on r4")

    host.hold = hold  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="reader bug on r4"):
        read_optics(host, list(PFS), pf_of=PFS)  # type: ignore[arg-type]
    assert sorted(host.started) == sorted(PFS)  # the other functions' reads were not abandoned


def test_at_most_parallel_functions_are_read_at_once() -> None:
    import threading

    host = ScriptedModules({r: r for r in PFS})  # every rail its own function
    lock, now, most = threading.Lock(), [0], [0]

    def hold(rail: str) -> None:
        import time

        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1

    host.hold = hold  # type: ignore[method-assign]
    got = read_optics(host, list(PFS), pf_of={r: r for r in PFS}, parallel=2)  # type: ignore[arg-type]
    assert [m.netdev for m in got] == list(PFS) and most[0] == 2


@pytest.mark.parametrize("version", ["6.1", "6.14"])
def test_after_a_live_timeout_no_other_module_read_starts(version: str) -> None:
    # a node whose firmware hangs is left with one stuck ethtool, whichever form
    host = ScriptedModules(PFS, timed_out=frozenset({"r0"}), version=version)
    notes = Notes()
    got = read_optics(host, list(PFS), notes=notes, pf_of=PFS)  # type: ignore[arg-type]
    assert got == () and host.started == ["r0"]
    why = dict(notes.unavailable)
    assert set(why) == {f"ethtool -m {r}" for r in PFS}
    assert all(why[f"ethtool -m {r}"] == "skipped: ethtool -m r0 timed out (firmware may be hung)"
               for r in list(PFS)[1:])
