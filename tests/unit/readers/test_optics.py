"""optics: ``ethtool -m`` of real modules (tests/fixtures/public/optics/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.readers.common import Notes
from agent.readers.optics import parse_ethtool_m, read_optics

from .imagekit import make_image, public


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
