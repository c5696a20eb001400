"""``railscope doctor`` on a live host (a network namespace with veth rails), and its replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

DOCTOR = ("doctor", "--json", "--rails", "2")


def doctor_live(rails: RailNetns) -> tuple[int, dict]:
    res = rails.railscope(*DOCTOR)
    assert res.returncode in (0, 1, 2), res.stderr
    return res.returncode, json.loads(res.stdout)


def codes(doc: dict, code: str) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == code]


def test_downed_rail_is_rail_link_down(rails: RailNetns) -> None:
    rails.set_peer(0, "down")
    rc, doc = doctor_live(rails)
    assert rc == 2  # a critical finding
    down = codes(doc, "RailLinkDown")
    assert [(f["subject"], f["severity"]) for f in down] == [("net_rail0", "critical")]
    by_rail = {r["rail"]: r for r in doc["rails"]}
    assert (by_rail[0]["netdev"], by_rail[0]["oper"]) == ("net_rail0", "down")
    assert (by_rail[1]["netdev"], by_rail[1]["oper"]) == ("net_rail1", "up")
    assert not codes(doc, "RailMissing")

    rails.set_peer(0, "up")
    _rc, doc = doctor_live(rails)
    assert not codes(doc, "RailLinkDown")
    assert {r["oper"] for r in doc["rails"]} == {"up"}


def test_recorded_image_replays_to_the_live_diagnosis(rails: RailNetns, tmp_path: Path) -> None:
    rails.set_peer(1, "down")
    image = tmp_path / "node-image"
    rec = rails.railscope("record", "-o", str(image))
    assert rec.returncode == 0, rec.stderr
    live_rc, live = doctor_live(rails)

    # The replay runs outside the namespace: nothing of the live node may leak into it.
    res = subprocess.run([sys.executable, "-m", "agent.cli", *DOCTOR, "--from", str(image)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == live_rc, res.stderr
    replay = json.loads(res.stdout)

    assert codes(live, "RailLinkDown") and codes(live, "RailLinkDown")[0]["subject"] == "net_rail1"
    # The whole document, rails and findings with their messages and evidence included: the veth
    # rails carry no counter that moves between the two reads unless traffic flows, and none does.
    assert replay == live
