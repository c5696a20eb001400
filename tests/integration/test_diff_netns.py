"""``railscope diff`` on a live node: capture three veth rails, change them, capture again.

The node namespace holds ``net_rail0..2`` (MTU 9000) with their peers in a switch namespace. Between
the two ``railscope record`` runs: rail 0's peer goes down (its carrier drops, as a pulled cable),
rail 1 is renamed away from its template, rail 2's MTU goes to 1500. The diff must name exactly
those three, whether AFTER is the second bundle (``railscope capture``), a recorded image directory
(``railscope record``) or ``live``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netns import RailNetns, ip, netns_available

pytestmark = pytest.mark.netns

RAILS = 3


@pytest.fixture
def three_rails() -> Iterator[RailNetns]:
    why = netns_available()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:8]
    env = RailNetns(node=f"rs-dnode-{tag}", switch=f"rs-dsw-{tag}")
    try:
        ip("netns", "add", env.node)
        ip("netns", "add", env.switch)
        for ns in (env.node, env.switch):
            ip("-n", ns, "link", "set", "lo", "up")
        for i in range(RAILS):
            ip("-n", env.node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth",
                "peer", "name", f"peer{i}", "netns", env.switch)
            ip("-n", env.switch, "link", "set", f"peer{i}", "mtu", "9000", "up")
            ip("-n", env.node, "link", "set", f"net_rail{i}", "up")
        for i in range(RAILS):
            env.set_peer(i, "up")
        yield env
    finally:
        ip("netns", "del", env.node, check=False)
        ip("netns", "del", env.switch, check=False)


def _wait_up(env: RailNetns, ifname: str) -> None:
    # operstate follows an admin up through the kernel's linkwatch work, up to a second later.
    deadline = time.monotonic() + 10
    while json.loads(ip("-n", env.node, "-j", "link", "show", ifname).stdout)[0]["operstate"] != "UP":
        assert time.monotonic() < deadline, f"{ifname} did not come up"
        time.sleep(0.05)


# net_rail2 at MTU 1500 while the other rails stay at 9000: a regression (it no longer matches them), and
# the value's change beside it
EXPECTED_REGRESSIONS = [("MtuMismatched", "net_rail2"), ("RailDown", "net_rail0"), ("RailRenamed", "net_rail1")]
EXPECTED_CHANGES = [("MtuChanged", "net_rail2")]


def _names(doc: dict, part: str) -> list[tuple[str, str]]:
    return sorted((i["code"], i["subject"]) for i in doc[part])


def test_diff_names_exactly_the_changes_made_between_two_live_captures(three_rails: RailNetns,
                                                                         tmp_path: Path) -> None:
    env = three_rails
    before, after = tmp_path / "before.tar.gz", tmp_path / "after.tar.gz"
    res = env.railscope("capture", "-o", str(before), "--recorder-gap", "0", timeout=180)
    assert res.returncode == 0, res.stderr

    env.set_peer(0, "down")
    ip("-n", env.node, "link", "set", "net_rail1", "down")
    ip("-n", env.node, "link", "set", "net_rail1", "name", "ens1f1")
    ip("-n", env.node, "link", "set", "ens1f1", "up")
    _wait_up(env, "ens1f1")
    ip("-n", env.node, "link", "set", "net_rail2", "mtu", "1500")
    time.sleep(1.2)  # the manifest's times are whole seconds: the captures must be apart for rates

    res = env.railscope("capture", "-o", str(after), "--recorder-gap", "0", timeout=180)
    assert res.returncode == 0, res.stderr
    res = env.railscope("record", "-o", str(tmp_path / "after-image"))
    assert res.returncode == 0, res.stderr

    res = env.railscope("diff", str(before), str(after), "--rails", str(RAILS), "--json")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert _names(doc, "regressions") == EXPECTED_REGRESSIONS
    assert _names(doc, "changes") == EXPECTED_CHANGES
    reg = {i["code"]: i for i in doc["regressions"]}
    assert (reg["RailRenamed"]["before"], reg["RailRenamed"]["after"]) == ("net_rail1", "ens1f1")
    assert reg["RailRenamed"]["findings"] == ["RailMissing net_rail1"]
    assert reg["RailDown"]["findings"] == ["RailLinkDown net_rail0"]
    mtu = doc["changes"][0]
    assert (mtu["before"], mtu["after"]) == (9000, 1500)
    carrier = next(c for c in doc["counters"] if c["subject"] == "net_rail0" and c["counter"] == "carrier_down_count")
    assert carrier["delta"] >= 1 and not carrier["reset"]
    assert doc["seconds"] > 0

    # The same against a recorded image directory, and against the node itself, now.
    for other in (str(tmp_path / "after-image"), "live"):
        res = env.railscope("diff", str(before), other, "--rails", str(RAILS), "--json")
        assert res.returncode == 1, res.stderr
        doc = json.loads(res.stdout)
        assert doc["after"]["source"] == other
        assert _names(doc, "regressions") == EXPECTED_REGRESSIONS
        assert _names(doc, "changes") == EXPECTED_CHANGES

    res = env.railscope("diff", str(before), str(after), "--rails", str(RAILS))
    assert res.returncode == 1
    text = res.stdout
    assert text.index("REGRESSIONS (3)") < text.index("CHANGES (1)")
    # columns are as wide as the longest code (MtuMismatched here)
    assert re.search(r"RailRenamed +net_rail1  rail 1: net_rail1 is now ens1f1", text), text
