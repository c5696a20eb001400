"""railscope_rail_peer_info: one series per rail with an LLDP neighbour, peer names only there (never on counters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"


def _series(image: str, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, dict[str, str], float]]:
    assert main(["metrics", "--from", str(IMAGES / image)]) == 0
    text = capsys.readouterr().out
    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_one_peer_series_per_rail_and_no_peer_label_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    got = _series("lldp-peers-healthy", capsys)
    peers = [(lab["rail"], lab["device"], lab["peer_system"], lab["peer_port"], v)
             for n, lab, v in got if n == "railscope_rail_peer_info"]
    assert peers == [("0", "net_rail0", "leaf-02", "swp1", 1.0), ("1", "net_rail1", "leaf-02", "swp2", 1.0)]
    assert not [n for n, lab, _ in got if n != "railscope_rail_peer_info" and "peer_system" in lab]


def test_a_hostile_peer_name_reaches_the_label_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    got = _series("lldp-frames-hostile-healthy", capsys)
    (lab,) = [lab for n, lab, _ in got if n == "railscope_rail_peer_info"]
    assert lab["peer_system"] == "leaf\\x1b[2J\\u202e-evil" and lab["peer_port"] == "swp\\x07"
    assert len(lab["peer_system"]) <= 64


def test_no_neighbour_no_series(capsys: pytest.CaptureFixture[str]) -> None:
    assert not [n for n, _, _ in _series("spectrumx-2rail-healthy", capsys) if n == "railscope_rail_peer_info"]
