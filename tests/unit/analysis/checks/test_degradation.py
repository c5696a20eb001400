"""The degradation checks' rules, table by table (the node images cover each code end to end)."""

from __future__ import annotations

from pathlib import Path

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


PHY = Path(__file__).resolve().parents[3] / "fixtures" / "public" / "phy"
MLX5 = Path(__file__).resolve().parents[3] / "fixtures" / "public" / "mlx5"


def _blocks(path: Path) -> list[dict[str, int]]:
    """The ``name: value`` counters of each command's output in a public dump, in order."""
    out: list[dict[str, int]] = []
    for line in path.read_text().splitlines():
        if "ethtool -S" in line or not out:
            out.append({})
        key, sep, value = line.strip().partition(": ")
        if sep and value.strip().isdigit():
            out[-1][key] = int(value)
    return [b for b in out if b]


def _lanes(c: dict[str, int]) -> dict[int, float]:
    return {n: float(c[f"rx_err_lane_{n}_phy"]) for n in range(8) if f"rx_err_lane_{n}_phy" in c}


def test_worst_lane_of_a_2_lane_pam4_link_is_its_share_and_its_ratio_to_the_other_lane() -> None:
    # Dell KB 000286734, lan0: a ConnectX-6 Dx 100G link on two 50G PAM4 lanes, one carrying 99.6 % of the
    # corrected bits. "Worst / median" of two lanes read 2.0x, as if the lanes were alike.
    lan0 = _blocks(PHY / "ethtool-S-mlx5-cx6dx-100g-2lane-dell-kb000286734.txt")[1]
    got = worst_lane(_lanes(lan0), lan0["rx_corrected_bits_phy"])
    assert got is not None
    assert (got["worst_lane"], got["worst_lane_share"], got["best_lane"], got["worst_lane_to_best"]) == (
        1, 0.996, 0, 250.4)
    assert "worst_lane_to_median" not in got


def test_lanes_reading_zero_do_not_distort_the_worst_lane() -> None:
    # the KB's other port: lanes 2-3 of the 2-lane link read 0; a median of 0, 0, 74M, 79M made lane 1
    # "2.1x the median" though both lanes in use are alike
    both = _blocks(PHY / "ethtool-S-mlx5-cx6dx-100g-2lane-dell-kb000286734.txt")[0]
    got = worst_lane(_lanes(both), both["rx_corrected_bits_phy"])
    assert got is not None and (got["worst_lane"], got["best_lane"], got["worst_lane_to_best"]) == (1, 0, 1.1)
    assert got["worst_lane_share"] == 0.516 and got["lanes_counting"] == [0, 1]
    # an OFED ConnectX at 4 lanes, two reading 0 (public Chinese notes): lane 3 is 630x lane 0, not "1260x the
    # median" a zero lane halved
    cn = next(b for b in _blocks(MLX5 / "ethtool-S-mlx5-uplink-ofed-nopfc.txt") if "rx_err_lane_0_phy" in b)
    got = worst_lane(_lanes(cn), cn["rx_corrected_bits_phy"])
    assert got is not None and (got["worst_lane"], got["worst_lane_share"], got["worst_lane_to_best"]) == (3, 0.998, 630.3)
    # a ConnectX-7 200G DAC (lanes 6, 2, 190, 0): lane 2 against lane 1, the best lane counting errors
    gx10 = _blocks(PHY / "ethtool-S-mlx5-cx7-200g-4lane-gx10-blog.txt")[0]
    got = worst_lane(_lanes(gx10), gx10["rx_corrected_bits_phy"])
    assert got is not None and (got["worst_lane"], got["worst_lane_share"], got["best_lane"], got["worst_lane_to_best"]) \
        == (2, 0.96, 1, 95.0)
    # every lane alike (an unsupported optic): no lane stands out, the module or the port does
    wirt = _blocks(PHY / "ethtool-S-mlx5-cx6dx-100g-lr4-grep-err-wirt.txt")[0]
    got = worst_lane(_lanes(wirt))
    assert got is not None and (got["worst_lane_share"], got["worst_lane_to_best"]) == (0.25, 1.0)
    # one lane counting: all of it, and no ratio to invent; none counting: nothing
    assert worst_lane({0: 0.0, 1: 5.0, 2: 0.0, 3: 0.0}) == {
        "worst_lane": 1, "worst_lane_errors": 5.0, "worst_lane_share": 1.0, "best_lane": None,
        "worst_lane_to_best": None, "lanes_counting": [1]}
    assert worst_lane({0: 0.0, 1: 0.0}) is None


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
    # 5e-4: above the RS(544,514) FEC's 2.4e-4 limit, critical
    assert got == {("LinkDegrading", "critical", "net_rail0"), ("OpticsOutOfRange", "critical", "net_rail0"),
                   ("PcieErrors", "warning", "pci/x")}
    # a reset (driver reload) between the samples says nothing
    reset = Sample(300.0, (("rx_bits_phy", 10), ("rx_corrected_bits_phy", 1)))
    assert rate_findings("n", "n", a, reset, exp, None, "t") == []


def _window(ratio: float, bits: int = 10**14, **last: int) -> tuple[Sample, Sample]:
    a = Sample(0.0, (("rx_bits_phy", 0), ("rx_corrected_bits_phy", 0), ("rx_pcs_symbol_err_phy", 0)))
    b = Sample(300.0, tuple(sorted({"rx_bits_phy": bits, "rx_corrected_bits_phy": int(bits * ratio),
                                    "rx_pcs_symbol_err_phy": 0, **last}.items())))
    return a, b


def _tier(ratio: float, exp: Expectations | None = None, **last: int) -> str | None:
    got = [f for f in rate_findings("net_rail0", "net_rail0", *_window(ratio, **last), exp or Expectations(), None, "t")
           if f.code == "LinkDegrading"]
    return got[0].severity if got else None


def test_two_tiers_warning_well_below_the_fec_limit_critical_at_it() -> None:
    exp = Expectations()
    assert (exp.ber_warning, exp.ber_critical) == (1e-5, 2.4e-4)  # the warning 24x below the RS(544,514) limit
    assert _tier(5e-6) is None
    assert _tier(2e-5) == "warning" and _tier(2.3e-4) == "warning"  # degrading, FEC still hides it
    assert _tier(2.4e-4) == "critical" and _tier(1e-3) == "critical"  # at / above what the FEC corrects
    assert _tier(1e-6, rx_pcs_symbol_err_phy=3) == "critical"  # errors FEC could not correct rose
    # the flags move both edges; a warning edge at or above the critical one leaves only critical
    assert _tier(2e-5, Expectations(ber_warning=1e-4)) is None
    assert _tier(2e-5, Expectations(ber_critical=1e-5)) == "critical"


def test_the_tiered_finding_names_the_worst_lane_with_its_share() -> None:
    # the real lane split of the KB's 2-lane lan0, over 1e13 bits: 1.9e-5, between the two tiers
    lan0 = _blocks(PHY / "ethtool-S-mlx5-cx6dx-100g-2lane-dell-kb000286734.txt")[1]
    zero = {k: 0 for k in lan0}
    a = Sample(0.0, tuple(sorted({**zero, "rx_bits_phy": 0}.items())))
    b = Sample(600.0, tuple(sorted({**lan0, "rx_bits_phy": 10**13}.items())))
    (f,) = rate_findings("net_rail1", "lan0", a, b, Expectations(), None, "recorder")
    assert (f.severity, f.evidence["worst_lane"], f.evidence["worst_lane_share"]) == ("warning", 1, 0.996)
    assert (f.evidence["ber_warning"], f.evidence["ber_critical"]) == (1e-5, 2.4e-4)
    assert "lane 1 carries 99.6 % of the corrected bits, 250.4x lane 0" in f.message


def test_every_degradation_code_has_a_next_step() -> None:
    from agent.findings import CLUSTER_CODES, CODES, NEXT_STEPS

    mine = {"LinkDegrading", "OpticsOutOfRange", "NicTemperatureHigh", "PcieLinkDegraded", "PcieErrors"}
    assert mine <= set(NEXT_STEPS) <= set(CODES) | set(CLUSTER_CODES)
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
