"""OpticsOutOfRange on real modules: only lanes in use are judged, the module's flags lead, a dark port is
the link's finding (docs/design.md §4; fixtures in tests/fixtures/public/optics/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from agent.analysis.checks.degradation import _optics_findings
from agent.model import ModuleOptics
from agent.readers.optics import parse_ethtool_m, parse_ethtool_m_json

OPTICS = Path(__file__).resolve().parents[3] / "fixtures" / "public" / "optics"
AVAGO_ONE_LANE = "ethtool-m-qsfp-plus-avago-sr4-mlx4-one-lane.txt"
AOC_JSON = "ethtool-6.14-json-m-qsfp56-aoc-mfs1s00-rx-los-unwrapped.json"
SR8_JSON = "ethtool-6.14-json-m-qsfp-dd-sr8-ftcd8613-rx-los-unwrapped.json"
LASER_OFF = "ethtool-m-qsfp28-finisar-cwdm4-laser-off.txt"


def text(name: str) -> str:
    return "".join(ln + "\n" for ln in (OPTICS / name).read_text().splitlines() if not ln.startswith(("#", "$ ")))


def module(name: str, replace: tuple[str, str] | None = None) -> ModuleOptics:
    body = text(name)
    if replace:
        assert replace[0] in body
        body = body.replace(*replace)
    return parse_ethtool_m_json(body, "net_rail1") if name.endswith(".json") else parse_ethtool_m(body, "net_rail1")


def judge(mod: ModuleOptics, link_up: bool | None = True) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in _optics_findings(mod, "net_rail1", link_up)]


def test_lanes_a_module_does_not_use_are_not_judged() -> None:
    # A QSFP+ SR4 on mlx4 using lane 1: lanes 2-4 read 0 mA / 0 mW with every flag Off, below the low
    # alarm of 0.5 mA. Before: critical, "TX bias lane 2 0.0 mA below the module's low alarm threshold".
    assert judge(module(AVAGO_ONE_LANE)) == []


def test_lanes_in_use_are_still_judged_and_the_evidence_names_them() -> None:
    mod = module(AVAGO_ONE_LANE, ("Laser bias current low warning  (Chan 1)  : Off",
                                  "Laser bias current low warning  (Chan 1)  : On"))
    (f,) = _optics_findings(mod, "net_rail1", True)
    assert f.evidence["lanes_judged"] == [1] and f.evidence["lanes_not_in_use"] == [2, 3, 4]
    assert "(lane 1 judged; 2-4 not in use)" in f.message


def test_a_raised_warning_flag_is_a_warning_though_the_value_is_inside_the_thresholds() -> None:
    # lane 1's RX 0.7682 mW is inside the module's thresholds; the module says otherwise: its flag decides.
    # Before: no finding (values alone were judged).
    mod = module(AVAGO_ONE_LANE, ("Laser rx power low warning  (Channel 1)   : Off",
                                  "Laser rx power low warning  (Channel 1)   : On"))
    (got,) = judge(mod)
    assert got[0] == "warning" and "RX power low warning flag on lane 1" in got[1]


def test_an_rx_power_low_alarm_alone_says_no_light_from_the_far_end() -> None:
    # The QSFP56 AOC of "qsfp: Enable JSON output support for SFF8636 modules" with the far end down: its only
    # raised flags are RX power low alarm / warning on lanes 1-4; TX bias reads 0 mA, under its low alarm
    # 5.492 mA, with its own bias flags clear. Before: "TX bias lane 1 0.0 mA below the module's low alarm".
    for up in (True, False):
        (got,) = judge(module(AOC_JSON), up)
        assert got[0] == "critical"
        assert "RX power low alarm flag on lanes 1-4: no light from the far end (check the fibre and the far end)" \
            in got[1]
        assert "TX bias" not in got[1]


def test_the_local_laser_leads_where_both_its_flag_and_the_rx_flag_are_raised() -> None:
    (got,) = judge(module(LASER_OFF))
    assert got[0] == "critical" and "TX bias low alarm flag on lane 1: its own laser is off" in got[1]


def test_a_dark_port_is_the_links_finding_not_an_optics_one() -> None:
    # A QSFP-DD SR8 with RX loss of signal on all 8 lanes, bias 0 mA, TX / RX 0.0001 mW, no flag raised,
    # on a rail that is down. Before: critical OpticsOutOfRange ("TX bias lane 1 0.0 mA below ... 3.0 mA").
    assert judge(module(SR8_JSON), link_up=False) == []
    # a dark port with a flag raised is still judged: the module said something
    raised = module(SR8_JSON, ('"module_temperature_high_warning": false', '"module_temperature_high_warning": true'))
    (got,) = judge(raised, link_up=False)
    assert got[0] == "warning" and "module temperature high warning flag" in got[1]


def test_lanes_without_printed_flags_are_judged_by_value() -> None:
    # the laser-off dump with its lane-1 flags cleared: lanes 2-4 print no flags, so their values decide
    mod = module(LASER_OFF, ("Laser bias current low alarm    (Chan 1)  : On",
                             "Laser bias current low alarm    (Chan 1)  : Off"))
    assert [s for s, _ in judge(mod, link_up=True)] == ["critical"]


def test_a_dark_cmis_module_of_the_v2_json_shape_is_not_judged_on_its_unused_lanes() -> None:
    # Before: critical ("TX bias lane 1 0.0 mA below the module's low alarm threshold 3.0 mA"), RX unread.
    assert judge(module("ethtool-json-m-v2-series-qsfp-dd-sr8-ftcd8613-units-unwrapped.json")) == []


def test_a_400g_dr4_using_4_of_8_lanes_is_judged_on_its_4_and_its_flag_leads() -> None:
    # Daniel Zahka's Arista QDD-400G-XDR4: lanes 5-8 at 0 mA / 0 mW, 70.49 °C with its temperature high warning
    # flag On. Before: critical, "module temperature 70.49 °C above ... (13 value(s) out of range)".
    (f,) = _optics_findings(module("ethtool-m-qsfp-dd-400g-xdr4-arista-4-of-8-lanes-unwrapped.txt"), "net_rail1", True)
    assert f.severity == "warning"
    assert "module temperature high warning flag: it runs hot (check the airflow over the module)" in f.message
    assert f.evidence["lanes_judged"] == [1, 2, 3, 4] and f.evidence["lanes_not_in_use"] == [5, 6, 7, 8]
    assert f.evidence["beyond"] == [] and f.evidence["module_state"] == "ModuleReady"


def test_the_v1_series_json_of_the_aoc_gives_the_same_far_end_finding() -> None:
    # module flags under their text names, the RX array under "rcvr_signal_avg_optical_power".
    # Before: critical, "TX bias lane 1 0.0 mA below the module's low alarm threshold 5.492 mA".
    mod = module("ethtool-json-m-v1-series-qsfp56-aoc-mfs1s00-units-unwrapped.json")
    assert [ln.rx_power_mw for ln in mod.lanes] == [0.0388, 0.041, 0.0417, 0.0392] and len(mod.flags) == 8
    (got,) = judge(mod, link_up=False)
    assert got[0] == "critical" and "RX power low alarm flag on lanes 1-4: no light from the far end" in got[1]
