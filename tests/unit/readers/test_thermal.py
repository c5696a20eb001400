"""thermal: the mlx5 hwmon sensors of a rail PF; a kernel without hwmon is not available."""

from __future__ import annotations

from pathlib import Path

from agent.readers.common import Notes
from agent.readers.thermal import parse_millidegrees, parse_sensor_files, read_thermal
from tests.support.imagekit import make_image


def test_millidegrees() -> None:
    assert parse_millidegrees("48000") == 48.0
    assert parse_millidegrees("-5000\n") == -5.0
    assert parse_millidegrees("hot") is None and parse_millidegrees(None) is None
    assert parse_millidegrees("9999999999") is None


def test_sensors_by_number_with_labels() -> None:
    got = parse_sensor_files("0000:0c:00.0", {
        "temp1_input": "48000", "temp1_crit": "105000", "temp1_highest": "55000", "temp1_label": "asic",
        "temp2_input": "41000", "temp2_crit": "75000", "temp3_crit": "1000", "name": "mlx5"})
    assert [(s.sensor, s.input_c, s.crit_c, s.highest_c) for s in got] == [
        ("asic", 48.0, 105.0, 55.0), ("temp2", 41.0, 75.0, None)]


def test_read_and_a_kernel_without_hwmon(tmp_path: Path) -> None:
    base = "/sys/bus/pci/devices/0000:0c:00.0/hwmon/hwmon3"
    host = make_image(tmp_path / "img", files={f"{base}/temp1_input": "107000\n", f"{base}/temp1_crit": "105000\n",
                                               f"{base}/temp1_label": "asic\n",
                                               "/sys/bus/pci/devices/0000:8d:00.0/vendor": "0x15b3\n"})
    notes = Notes()
    got = read_thermal(host, ["0000:0c:00.0", "0000:8d:00.0"], notes)
    assert [(s.bdf, s.sensor, s.input_c) for s in got] == [("0000:0c:00.0", "asic", 107.0)]
    assert notes.unavailable == [("thermal", "no mlx5 hwmon sensors on 0000:8d:00.0 (kernel before 6.5, or not mlx5)")]
