"""FirmwareSkew and DriverKernelUnvalidated."""

from __future__ import annotations

from dataclasses import replace

import nodes
import pytest

from agent.analysis.checks.versions import KernelRow, doca_line, parse_kernel, version_key
from agent.analysis.diagnose import KernelTableError, diagnose, load_kernel_table, parse_kernel_table
from agent.config import Expectations

TABLE = (KernelRow("26.01", "generic", "6.8.0", "6.8.0-100", "test"),)


def found(snap, table=TABLE):
    return [(f.code, f.severity, f.subject) for f in diagnose(snap, Expectations(), kernel_table=table).findings]


def test_firmware_skew_on_same_model():
    snap = nodes.node()
    snap = replace(snap, drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev == "net_rail1" else d
                                       for d in snap.drivers))
    assert found(snap) == [("FirmwareSkew", "info", "node")]


@pytest.mark.parametrize(("driver", "kernel", "want"), [
    ("26.01-0.5.2", "6.8.0-60-generic", None),
    ("26.01-0.5.2", "6.8.0-100-generic", None),
    ("26.01-0.5.2", "6.8.0-101-generic", "warning"),
    ("26.01-0.5.2", "6.8.0-1013-nvidia", "info"),
    ("26.01-0.5.2", "6.11.0-20-generic", "info"),
    ("25.10-1.7.1", "6.8.0-200-generic", None),  # no row for the driver line
    ("6.8.0-60-generic", "6.8.0-160-generic", None),  # inbox driver
])
def test_driver_kernel(driver, kernel, want):
    snap = nodes.node(driver_version=driver, kernel=kernel)
    assert found(snap) == ([("DriverKernelUnvalidated", want, "node")] if want else [])


def test_parsers():
    assert version_key("6.8.0-60") < version_key("6.8.0-100")
    assert doca_line("25.10-1.7.1") == "25.10" and doca_line("6.8.0-60-generic") is None
    k = parse_kernel("5.15.0-105.115-generic")
    assert (k.line, k.abi, k.flavour) == ("5.15.0", "5.15.0-105", "generic")


def test_shipped_table_and_extra_file(tmp_path):
    shipped = load_kernel_table()
    assert any(r.driver == "26.01" and r.max_abi == "6.8.0-100" for r in shipped)
    extra = tmp_path / "k.json"
    extra.write_text('[{"driver": "26.01", "flavour": "nvidia", "kernel_line": "6.8.0", "max_abi": "6.8.0-1020"}]')
    rows = load_kernel_table(str(extra))
    assert len(rows) == len(shipped) + 1
    snap = nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-1013-nvidia")
    assert found(snap, rows) == []
    with pytest.raises(KernelTableError):
        parse_kernel_table("{", "x.json")
    with pytest.raises(KernelTableError):
        load_kernel_table(str(tmp_path / "nope.json"))
