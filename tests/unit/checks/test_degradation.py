"""The degradation checks' rules, table by table (the node images cover each code end to end)."""

from __future__ import annotations

from agent.analysis.checks.degradation import (
    MIN_BITS,
    _optics_findings,
    _pcie_findings,
    ber_of,
    rate_findings,
    worst_lane,
)
from agent.config import Expectations
from agent.model import ModuleOptics, OpticsLane, PcieLink
from agent.readers.history import Sample

TH = (("rx_power_mw", "low_alarm", 0.0251), ("rx_power_mw", "low_warning", 0.0631),
      ("rx_power_mw", "high_warning", 1.7783), ("rx_power_mw", "high_alarm", 2.2387))


def test_ber_is_judged_over_1e12_bits_only() -> None:
    assert ber_of(MIN_BITS - 1, 10**9) is None
    assert ber_of(MIN_BITS, 10**8) == 1e-4


def test_worst_lane_and_its_ratio_to_the_median() -> None:
    assert worst_lane({0: 10.0, 1: 1000.0, 2: 10.0, 3: 20.0}) == {
        "worst_lane": 1, "worst_lane_errors": 1000.0, "worst_lane_to_median": 66.7}
    assert worst_lane({0: 0.0, 1: 0.0}) is None
    assert worst_lane({0: 0.0, 1: 5.0})["worst_lane_to_median"] == 2.0  # type: ignore[index]


def test_optics_warning_alarm_and_no_thresholds() -> None:
    mod = ModuleOptics("net_rail1", lanes=(OpticsLane(1, rx_power_mw=0.9), OpticsLane(3, rx_power_mw=0.05)),
                       thresholds=TH)
    (f,) = _optics_findings(mod, "net_rail1")
    assert f.severity == "warning" and f.evidence["lanes"] == [3]
    mod = ModuleOptics("net_rail1", lanes=(OpticsLane(2, rx_power_mw=0.0001),), thresholds=TH)
    assert _optics_findings(mod, "net_rail1")[0].severity == "critical"
    assert _optics_findings(ModuleOptics("net_rail1", lanes=(OpticsLane(2, rx_power_mw=0.0001),)), "x") == []
    assert _optics_findings(ModuleOptics("net_rail1", lanes=(OpticsLane(1, rx_power_mw=1.0),), thresholds=TH),
                            "x") == []


def test_pcie_below_both_ends_and_a_slower_slot() -> None:
    x8 = PcieLink("0000:0c:00.0", 32.0, 32.0, 8, 16, "0000:0b:01.0", 32.0, 16)
    (f,) = _pcie_findings(x8, "pci/0000:0c:00.0", "net_rail0")
    assert (f.code, f.severity, f.evidence["degraded"]) == ("PcieLinkDegraded", "warning", ["width"])
    slot = PcieLink("0000:8d:00.0", 16.0, 32.0, 16, 16, "0000:8c:01.0", 16.0, 16)
    assert _pcie_findings(slot, "pci/0000:8d:00.0", "net_rail1") == []
    both = PcieLink("0000:8d:00.0", 8.0, 32.0, 8, 16, "0000:8c:01.0", 16.0, 16)
    (f,) = _pcie_findings(both, "pci/0000:8d:00.0", "net_rail1")
    assert f.evidence["degraded"] == ["speed", "width"]
    unknown = PcieLink("0000:8d:00.0", None, 32.0, None, 16)
    assert _pcie_findings(unknown, "pci/0000:8d:00.0", None) == []


def test_a_pcie_link_that_is_gone_is_critical_with_its_evidence() -> None:
    # issue 28 item 5: current_link_speed Unknown with current_link_width 63 (the Link Status register
    # reads all ones) landed under "not available" alone
    gone = PcieLink("0000:8d:00.0", None, 32.0, None, 16, "0000:8c:01.0", 32.0, 16, 0, 0, 0, gone=True)
    (f,) = _pcie_findings(gone, "pci/0000:8d:00.0", "net_rail1")
    assert (f.code, f.severity, f.subject) == ("PcieLinkDegraded", "critical", "pci/0000:8d:00.0")
    assert (f.evidence["link_gone"], f.evidence["current_link_speed"], f.evidence["current_link_width"]) == \
        (True, "Unknown", 63)
    assert "the PCIe link is gone" in f.message and "carries no traffic" in f.message


def test_pcie_aer_severities() -> None:
    fatal = PcieLink("b", aer_fatal=1, aer_nonfatal=0, aer_correctable=9)
    assert [(f.code, f.severity) for f in _pcie_findings(fatal, "pci/b", None)] == [("PcieErrors", "warning")]
    cor = PcieLink("b", aer_fatal=0, aer_nonfatal=0, aer_correctable=9)
    assert [(f.code, f.severity) for f in _pcie_findings(cor, "pci/b", None)] == [("PcieErrors", "info")]
    assert _pcie_findings(PcieLink("b", aer_fatal=0, aer_nonfatal=0, aer_correctable=0), "pci/b", None) == []


def test_rates_between_two_samples() -> None:
    exp = Expectations()
    a = Sample(0.0, (("rx_bits_phy", 0), ("rx_corrected_bits_phy", 0), ("module_bad_shorted", 0),
                     ("tx_pci_signal_integrity", 5)))
    b = Sample(300.0, (("rx_bits_phy", 12 * 10**13), ("rx_corrected_bits_phy", 6 * 10**10), ("module_bad_shorted", 1),
                       ("tx_pci_signal_integrity", 7)))
    got = {(f.code, f.severity, f.subject) for f in rate_findings("net_rail0", "net_rail0", a, b, exp, "pci/x", "t")}
    assert got == {("LinkDegrading", "warning", "net_rail0"), ("OpticsOutOfRange", "critical", "net_rail0"),
                   ("PcieErrors", "warning", "pci/x")}
    # a reset (driver reload) between the samples says nothing
    reset = Sample(300.0, (("rx_bits_phy", 10), ("rx_corrected_bits_phy", 1)))
    assert rate_findings("n", "n", a, reset, exp, None, "t") == []


def test_every_degradation_code_has_a_next_step() -> None:
    from agent.findings import CODES, NEXT_STEPS

    mine = {"LinkDegrading", "OpticsOutOfRange", "NicTemperatureHigh", "PcieLinkDegraded", "PcieErrors"}
    assert mine <= set(NEXT_STEPS) <= set(CODES)
    for code in mine:
        assert 40 < len(NEXT_STEPS[code]) < 400 and "`" in NEXT_STEPS[code]  # a command to run, short


def test_aer_rises_between_two_lines_of_one_function_only() -> None:
    from agent.model import AER_FUNCTION, pci_function_number

    exp = Expectations()
    a_fn, b_fn = pci_function_number("0000:0c:00.0"), pci_function_number("0000:8d:00.0")
    first = Sample(0.0, (("aer_dev_correctable", 0), (AER_FUNCTION, a_fn)))
    rose = Sample(60.0, (("aer_dev_correctable", 2), (AER_FUNCTION, a_fn)))
    moved = Sample(60.0, (("aer_dev_correctable", 7), (AER_FUNCTION, b_fn)))  # the name now on another PF
    nothing = Sample(0.0, ())  # a line from before the pcie source's first read
    (f,) = rate_findings("net_rail0", "net_rail0", first, rose, exp, "pci/0000:0c:00.0", "recorder")
    assert (f.code, f.severity, f.evidence["increase"]) == ("PcieErrors", "warning", {"aer_dev_correctable": 2})
    assert rate_findings("net_rail0", "net_rail0", first, moved, exp, "pci/0000:8d:00.0", "recorder") == []
    assert rate_findings("net_rail0", "net_rail0", nothing, rose, exp, "pci/0000:0c:00.0", "recorder") == []
    # a total that fell (the function was removed and rescanned) says nothing over this window
    fell = Sample(120.0, (("aer_dev_correctable", 1), (AER_FUNCTION, a_fn)))
    assert rate_findings("net_rail0", "net_rail0", rose, fell, exp, "pci/0000:0c:00.0", "recorder") == []
