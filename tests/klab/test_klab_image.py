"""The node image recorded in the kernel lab, judged offline on every run (no QEMU needed).

``tests/images/klab-netdevsim-switchdev`` is what ``railscope record`` wrote inside the lab guest, and
its ``doctor-live.json`` what ``railscope doctor --json`` said live there (README beside it). Replaying
the image must keep giving the live diagnosis: a reader or check change that breaks on real kernel
output (netdevsim's non-PCI parent bus, real ``devlink -j`` / ``rdma -j`` answers, rxe's sysfs) fails here
without booting anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.cli import main

IMAGE = Path(__file__).resolve().parents[1] / "images" / "klab-netdevsim-switchdev"
FLAGS = ["--expect-rdma-netns", "exclusive", "--expect-eswitch-mode", "switchdev"]


def _key(finding):
    return finding["code"], finding["severity"], finding["subject"]


@pytest.fixture(scope="module")
def live():
    return json.loads((IMAGE / "doctor-live.json").read_text())


def test_replay_gives_the_live_rail_table_and_findings(live, capsys):
    status = main(["doctor", "--from", str(IMAGE), "--json", *FLAGS])
    offline = json.loads(capsys.readouterr().out)
    assert status == 2  # critical findings
    # doctor-live.json was recorded before rails[] gained ``peer`` (the lldp source): the fields it has must
    # be the same, and a field added since must say "not known" for a node that recorded none of it
    recorded = [{k: r[k] for k in live_r} for r, live_r in zip(offline["rails"], live["rails"], strict=True)]
    assert recorded == live["rails"]
    assert all(r.get("peer") is None for r in offline["rails"])
    assert [_key(f) for f in offline["findings"]] == [_key(f) for f in live["findings"]]
    assert (offline["node"], offline["kernel"]) == ("klab-node", "6.1.0-57-amd64")


def test_the_recorded_node_is_what_the_readme_says(live):
    rails = {r["rail"]: r for r in live["rails"]}
    assert (rails[0]["netdev"], rails[0]["oper"], rails[0]["representors"]) == ("net_rail0", "up", 4)
    assert (rails[1]["netdev"], rails[1]["oper"], rails[1]["rdma_state"]) == ("net_rail1", "down", "DOWN")
    assert sorted(map(_key, live["findings"])) == [
        ("RailLinkDown", "critical", "net_rail1"),
        ("RdmaLinkDown", "critical", "rdma_rail1"),
        ("RdmaNetnsModeUnexpected", "warning", "node"),
    ]


def test_metrics_of_the_image_count_the_representors(capsys):
    assert main(["metrics", "--from", str(IMAGE)]) == 0
    counts = {}
    for line in capsys.readouterr().out.splitlines():
        m = re.match(r'railscope_representors\{(.*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            counts[labels["pci"]] = float(m.group(2))
    assert counts == {"netdevsim10": 4.0, "netdevsim11": 0.0}
