"""The GPU <-> rail topology in the doctor table and the HTML report: a GPU column on GPU nodes only."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"


def test_the_table_names_each_rails_gpu_and_link(capsys: pytest.CaptureFixture[str]) -> None:
    main(["doctor", "--from", str(IMAGES / "gpu-topology-phb-sys-healthy")])
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(out) if ln.startswith("RAIL"))
    assert out[head].endswith("GPU")
    assert out[head + 1].endswith("0000:0b:00.0 PHB") and out[head + 2].endswith("0000:0b:00.0 SYS")


def test_no_gpu_column_without_gpus(capsys: pytest.CaptureFixture[str], example_image: Path) -> None:
    main(["doctor", "--from", str(example_image)])
    assert "GPU" not in capsys.readouterr().out.split("\n\n")[1]


def test_the_html_report_has_the_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(IMAGES / "gpudirect-hgx-pix-healthy"), "--html", str(out)]) == 0
    page = out.read_text()
    assert "<th>GPU</th>" in page and "0000:8b:00.0 PIX" in page
