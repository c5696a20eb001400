"""optics: the module's flags, lane status and both JSON threshold forms, from real ``ethtool -m`` outputs
(tests/fixtures/public/optics/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.readers.common import Notes
from agent.readers.optics import (
    JSON_ARGV,
    _lane_status,
    parse_ethtool_m,
    parse_ethtool_m_json,
    read_optics,
    reset_forms,
)
from tests.support.imagekit import make_image, public


@pytest.fixture(autouse=True)
def _fresh_forms() -> None:
    reset_forms()

AVAGO_ONE_LANE = "optics/ethtool-m-qsfp-plus-avago-sr4-mlx4-one-lane.txt"
AVAGO_NO_PAGE3 = "optics/ethtool-m-qsfp-plus-avago-sr4-mlx4-no-page03h.txt"
AOC_JSON = "optics/ethtool-6.14-json-m-qsfp56-aoc-mfs1s00-rx-los-unwrapped.json"
SR8_JSON = "optics/ethtool-6.14-json-m-qsfp-dd-sr8-ftcd8613-rx-los-unwrapped.json"
SFP_OLD = "optics/ethtool-json-m-sfp-flexoptix-lx-thresholds.txt"
SFP_RENAMED = "optics/ethtool-json-m-sfp-flexoptix-lx-threshold-renamed.txt"


def posted(rel: str) -> str:
    """A posted output without its ``$ ethtool ...`` prompt line."""
    text = public(rel)
    return text.split("\n", 1)[1] if text.startswith("$ ") else text


def test_renamed_json_threshold_objects_are_read_as_the_current_ones() -> None:
    # The rename in review upstream ("sff-common: Fix naming of JSON keys for thresholds", netdev 2025-10):
    # the same module before and after it. Before the fix railscope found no threshold in the second.
    old = parse_ethtool_m_json(posted(SFP_OLD), "net_rail0")
    new = parse_ethtool_m_json(posted(SFP_RENAMED), "net_rail0")
    assert len(old.thresholds) == 20
    assert sorted(new.thresholds) == sorted(old.thresholds)
    assert new.threshold("tx_bias_ma", "low_warning") == 3.0 and new.threshold("rx_power_mw", "low_alarm") == 0.004
    assert new.unavailable == ()


@pytest.mark.parametrize("shape", [{"max": 80, "min": 2}, [80, 2, 70, 3], "80 mA"])
def test_a_threshold_object_of_an_unknown_shape_is_named_not_dropped(shape: object) -> None:
    doc = json.loads(posted(SFP_RENAMED))
    doc[0]["laser_bias_current_threshold"] = shape
    mod = parse_ethtool_m_json(json.dumps(doc, indent=4), "net_rail0")
    assert any("laser_bias_current_threshold" in why and "shape" in why for why in mod.unavailable)
    assert mod.threshold("tx_bias_ma", "high_alarm") is None and mod.threshold("voltage_v", "high_alarm") == 3.6


def test_an_unknown_threshold_key_is_named() -> None:
    doc = json.loads(posted(SFP_RENAMED))
    doc[0]["laser_rx_power_thresholds_dbm"] = {"high": -3.0}
    mod = parse_ethtool_m_json(json.dumps(doc), "net_rail0")
    assert mod.unavailable == ("thresholds laser_rx_power_thresholds_dbm: in a shape railscope does not read",)


def test_sff8636_text_flags_per_lane_and_a_module_that_implements_none() -> None:
    mod = parse_ethtool_m(public(AVAGO_ONE_LANE), "eth2")
    assert mod.flags_reported and mod.lane_flags_exact and mod.module_state is None
    assert [len(ln.flags) for ln in mod.lanes] == [12, 12, 12, 12]  # bias, TX, RX x 4 kinds, all Off
    assert not any(on for ln in mod.lanes for _, _, on in ln.flags)
    assert {(q, k) for q, k, _ in mod.flags} == {(q, f"{s}_{lv}") for q in ("temperature_c", "voltage_v")
                                                 for s in ("high", "low") for lv in ("alarm", "warning")}
    # "Laser output power ... threshold : 0.0000 mW" x 4: none programmed, so not a threshold
    assert mod.threshold("tx_power_mw", "high_alarm") is None and mod.threshold("tx_bias_ma", "low_alarm") == 0.5
    assert any("tx_power_mw thresholds are all 0" in why for why in mod.unavailable)
    bare = parse_ethtool_m(public(AVAGO_NO_PAGE3), "eth2")  # "Alarm/warning flags implemented : No"
    assert not bare.flags_reported and bare.thresholds == ()
    assert [(ln.rx_los, ln.tx_los, ln.tx_fault) for ln in bare.lanes] == [(False, False, False)] * 4  # "None"


def status_lines(rel: str, name: str) -> list[list[bool] | None]:
    return [_lane_status(line.partition(":")[2]) for line in public(rel).splitlines()
            if line.partition(":")[0].strip() == name]


def test_lane_status_lines_of_cmis_and_sff8636() -> None:
    # Ido Schimmel's runs of "cmis: report LOL / LOS / Tx Fault" (a 16-lane CMIS module) and of the
    # SFF-8636 patch (two AOCs): "None", then "[ Yes, ... ]" one entry a lane
    cmis, aoc = "optics/ethtool-m-cmis-16-lanes-los-lol-grep.txt", "optics/ethtool-m-sff8636-aoc-los-lol-grep.txt"
    assert status_lines(cmis, "Rx loss of signal") == [[], [True] * 16, [True] * 16]
    assert status_lines(cmis, "Tx loss of signal") == [[], [], [True] * 8 + [False] * 8]
    assert status_lines(aoc, "Rx loss of signal") == [[], [True] * 4, [True] * 4]
    assert status_lines(aoc, "Tx loss of signal") == [[], [], [True] * 4]
    assert _lane_status(" [ Yes, Maybe ]") is None and _lane_status("garbage") is None


def test_json_flags_and_lane_status_of_an_aoc_with_the_far_end_down() -> None:
    mod = parse_ethtool_m_json(public(AOC_JSON), "net_rail1")
    assert mod.flags_reported and mod.lane_flags_exact
    raised = sorted({(q, k) for ln in mod.lanes for q, k, on in ln.flags if on})
    assert raised == [("rx_power_mw", "low_alarm"), ("rx_power_mw", "low_warning")]
    assert [ln.rx_los for ln in mod.lanes] == [True] * 4 and [ln.tx_los for ln in mod.lanes] == [False] * 4
    assert [ln.rx_power_mw for ln in mod.lanes] == [0.0449, 0.0475, 0.042, 0.0394]


def test_json_cmis_module_state_and_its_lane_flags_are_not_exact() -> None:
    mod = parse_ethtool_m_json(public(SR8_JSON), "net_rail1")
    assert mod.module_state == "ModuleReady" and len(mod.lanes) == 8
    assert mod.flags_reported and not mod.lane_flags_exact  # ethtool's CMIS lane flags: byte & channel index
    assert all(ln.rx_los is True and ln.tx_bias_ma == 0.0 for ln in mod.lanes)


def test_odd_flag_and_status_shapes_do_not_crash() -> None:
    doc = json.loads(public(AOC_JSON))
    doc[0]["laser_rx_power_low_alarm"] = "yes"
    doc[0]["rx_loss_of_signal"] = {"lanes": 4}
    doc[0]["module_temperature_high_alarm"] = [True, "x"]
    mod = parse_ethtool_m_json(json.dumps(doc), "net_rail1")
    assert any("laser_rx_power_low_alarm" in why for why in mod.unavailable)
    assert all(ln.rx_los is None for ln in mod.lanes)


def test_the_v2_series_shape_of_the_same_module_reads_the_same() -> None:
    # units keys, "None" status strings, the RX array under its text name, "units" in the threshold objects
    v2 = parse_ethtool_m_json(public("optics/ethtool-json-m-v2-series-qsfp-dd-sr8-ftcd8613-units-unwrapped.json"),
                              "net_rail1")
    v5 = parse_ethtool_m_json(public(SR8_JSON), "net_rail1")
    assert [ln.rx_power_mw for ln in v2.lanes] == [0.0001] * 8  # before: no RX reading at all
    assert v2.thresholds == v5.thresholds and v2.unavailable == ()
    assert [(ln.rx_los, ln.tx_los) for ln in v2.lanes] == [(True, False)] * 8


def test_the_notes_of_one_module_are_bounded() -> None:
    doc = json.loads(posted(SFP_RENAMED))
    for i in range(500):
        doc[0][f"odd_{i}_threshold"] = i
    mod = parse_ethtool_m_json(json.dumps(doc), "net_rail0")
    assert len(mod.unavailable) == 8 and len(mod.thresholds) == 20


def test_read_optics_names_thresholds_it_cannot_read_under_not_available(tmp_path: Path) -> None:
    doc = json.loads(posted(SFP_RENAMED))
    doc[0]["laser_rx_power_threshold"] = {"upper": 0.5012}
    host = make_image(tmp_path / "img", cmds={("ethtool", "--version"): ("ethtool version 6.14\n", 0),
                                              (*JSON_ARGV, "net_rail0"): (json.dumps(doc, indent=4), 0)})
    notes = Notes()
    (mod,) = read_optics(host, ["net_rail0"], notes=notes)
    assert mod.threshold("tx_bias_ma", "high_alarm") == 80.0 and mod.threshold("rx_power_mw", "low_alarm") is None
    assert notes.unavailable == [("ethtool -m net_rail0",
                                  "thresholds laser_rx_power_threshold: in a shape railscope does not read")]
