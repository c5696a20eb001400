"""railscope diff: a rail whose LLDP neighbour moved to another leaf or port is a regression (RailPeerChanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"
CABLING = str(Path(__file__).resolve().parents[2] / "fixtures/cabling/RECONSTRUCTED-gpu-node-017.csv")


def _diff(before: Path, after: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, int]:
    code = main(["diff", str(before), str(after), "--json", *extra])
    return json.loads(capsys.readouterr().out), code


def test_a_rail_cabled_to_another_leaf_is_a_regression(capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = _diff(IMAGES / "lldp-peers-healthy", IMAGES / "rail-peer-mismatch", capsys, "--cabling", CABLING)
    assert code == 1
    regs = doc["regressions"]
    assert [(i["code"], i["subject"], i["before"], i["after"]) for i in regs] == [
        ("RailPeerChanged", "net_rail1", "leaf-02:swp2", "leaf-03:swp2")]
    # the cabling map's finding is the same cause: folded into the regression, not listed again
    assert not [i for i in regs if i["code"] == "FindingNew"]


def test_a_neighbour_heard_on_one_side_only_is_not_a_recabling(capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = _diff(IMAGES / "spectrumx-2rail-healthy", IMAGES / "lldp-peers-healthy", capsys)
    assert code == 0 and not [i for i in doc["regressions"] if i["code"] == "RailPeerChanged"]
