"""Where a diagnosis is shown: the doctor rail table's DEGRADED column (PCIe gen/width, worst BER) and the
report's recorder charts of the corrected-bit ratio and symbol errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"


def _text(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    main(args)
    return capsys.readouterr().out


def test_the_rail_table_names_a_pcie_link_trained_below_both_ends(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(["doctor", "--from", str(IMAGES / "pcie-link-degraded")], capsys)
    header = next(ln for ln in out.splitlines() if ln.startswith("RAIL"))
    assert header.endswith("DEGRADED")
    rail0 = next(ln for ln in out.splitlines() if ln.startswith("0 "))
    assert rail0.endswith("PCIe Gen5 x8 (of x16)")


def test_the_rail_table_names_the_worst_ber(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(["doctor", "--from", str(IMAGES / "link-degrading-ber-recorder")], capsys)
    rail1 = next(ln for ln in out.splitlines() if ln.startswith("1 "))
    assert rail1.endswith("BER 5.0e-04")


def test_a_healthy_table_has_no_degraded_column(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(["doctor", "--from", str(IMAGES / "degradation-sources-healthy")], capsys)
    assert "DEGRADED" not in out


def test_the_report_charts_the_corrected_bit_ratio_and_symbol_errors(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(["report", str(IMAGES / "link-degrading-ber-recorder")], capsys)
    assert "Corrected-bit ratio" in out and "peak 5.0e-04" in out and "Symbol errors" in out
    html = tmp_path / "r.html"
    main(["report", str(IMAGES / "link-degrading-symbol-recorder"), "--html", str(html)])
    page = html.read_text()
    assert 'data-metric="ber"' in page and 'data-metric="symbols"' in page
    # a recorder without PHY counters keeps its four columns
    main(["report", str(IMAGES / "pfc-storm-recorder"), "--html", str(html)])
    assert 'data-metric="ber"' not in html.read_text()
