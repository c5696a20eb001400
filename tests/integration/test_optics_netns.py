"""optics against this machine's real ethtool, on veth rails in a network namespace.

A veth has no module EEPROM, so no module is read here: what is shown is which form the reader runs
for the installed ethtool, its fallback when the real ethtool refuses ``--json -m``, and that the
veth's "Operation not supported" reaches the notes as ethtool said it.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from agent.readers.optics import JSON_SINCE, parse_ethtool_version
from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

READ = """
import json
from agent.host import CmdResult
from agent.host.live import LiveHost
from agent.readers.common import Notes
from agent.readers.optics import read_optics

STAND_IN = {stand_in!r}
seen = []


class Seen(LiveHost):
    def run(self, argv, timeout_s=None, max_bytes=8 << 20, keep="head"):
        seen.append(list(argv))
        if STAND_IN and list(argv) == ["ethtool", "--version"]:
            # a stand-in answer (named so): an ethtool that says it prints JSON for -m
            return CmdResult(tuple(argv), 0, STAND_IN.encode())
        return super().run(argv, timeout_s, max_bytes, keep)


with Seen() as host:
    first, second = Notes(), Notes()
    got = read_optics(host, ["net_rail0", "net_rail1"], 10.0, first)
    again = read_optics(host, ["net_rail0"], 10.0, second)
print(json.dumps({{"seen": seen, "modules": len(got) + len(again), "first": first.unavailable,
                  "second": second.unavailable}}))
"""


def _installed() -> tuple[int, int, int]:
    res = subprocess.run(["ethtool", "--version"], capture_output=True, text=True, timeout=30)
    version = parse_ethtool_version(res.stdout)
    if version is None:
        pytest.skip(f"no ethtool version: {res.stdout.strip() or res.stderr.strip()}")
    return version


def test_the_installed_ethtool_picks_its_form_and_the_veth_says_not_supported(rails: RailNetns) -> None:
    json_form = _installed() >= JSON_SINCE
    got = rails.python(READ.format(stand_in=""))
    form = ["ethtool", "--json", "-m"] if json_form else ["ethtool", "-m"]
    assert got["seen"] == [["ethtool", "--version"], [*form, "net_rail0"], [*form, "net_rail1"], [*form, "net_rail0"]]
    assert got["modules"] == 0
    for source, why in got["first"]:
        assert re.fullmatch(r"ethtool -m net_rail[01]", source)
        assert why == f"{' '.join(form)} {source.split()[-1]}: exit 1: netlink error: Operation not supported"


def test_a_real_ethtool_that_refuses_json_m_falls_back_to_text_for_the_process(rails: RailNetns) -> None:
    if _installed() >= JSON_SINCE:
        pytest.skip("the installed ethtool accepts --json -m: nothing refuses it here")
    # ethtool --version says 6.14 (a stand-in); the ethtool that runs is the real, older one
    got = rails.python(READ.format(stand_in="ethtool version 6.14\n"))
    assert got["seen"] == [["ethtool", "--version"],
                           ["ethtool", "--json", "-m", "net_rail0"],  # refused: "bad command line argument(s)"
                           ["ethtool", "-m", "net_rail0"], ["ethtool", "-m", "net_rail1"],
                           ["ethtool", "-m", "net_rail0"]]  # remembered: the second read never tries --json
    # the notes are the veth's own answer to the text read, not the refused command line
    assert got["first"] == [[f"ethtool -m net_rail{i}",
                             f"ethtool -m net_rail{i}: exit 1: netlink error: Operation not supported"] for i in (0, 1)]
    assert got["second"] == [["ethtool -m net_rail0", "ethtool -m net_rail0: exit 1: netlink error: Operation not supported"]]


SOURCE = """
import json
from agent.config import ReadConfig
from agent.host.live import LiveHost
from agent.readers.snapshot import take_snapshot

seen = []


class Seen(LiveHost):
    def run(self, argv, timeout_s=None, max_bytes=8 << 20, keep="head"):
        seen.append(list(argv))
        return super().run(argv, timeout_s, max_bytes, keep)


with Seen() as host:
    snap = take_snapshot(host, ReadConfig())
print(json.dumps({"seen": seen, "kinds": {lk.ifname: lk.kind for lk in snap.links if lk.ifname.startswith("net_rail")},
                  "optics": len(snap.optics),
                  "notes": [list(u) for u in snap.unavailable if u[0].startswith("ethtool -m")]}))
"""


def test_the_optics_source_asks_no_module_of_a_veth_rail(rails: RailNetns) -> None:
    """Through the whole live read: the kernel's link dump gives the veth rails their kind, so the
    optics source runs no ethtool at all and says why for each rail."""
    got = rails.python(SOURCE)
    assert got["kinds"] == {"net_rail0": "veth", "net_rail1": "veth"}
    assert not [a for a in got["seen"] if a[0] == "ethtool"], got["seen"]
    assert got["optics"] == 0
    assert got["notes"] == [[f"ethtool -m net_rail{i}", "not read: a veth with no device under it is a software "
                             "netdev, no module of its own"] for i in (0, 1)]
