"""A bundle keeps the expectations it was judged with (docs/design.md §2 "Node image format v1").

The node namespace of the ``rails`` fixture has two veth rails and no udev rules: only ``--rails 2``
makes them rails. A capture made with ``--rails 2`` (a flag, ``RAILSCOPE_RAILS``, or the agent's own
flag) records it in the manifest, and ``doctor --from``, ``report`` and ``diff`` judge with it when
their command line says nothing — the upgrade gate must not say "go" because a flag was not repeated.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from tests.support.agent_netns import StartAgent
from tests.support.netns import RailNetns, ip

pytestmark = pytest.mark.netns


def _manifest(bundle: Path) -> dict:
    with tarfile.open(bundle) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("manifest.json"))
        fh = tf.extractfile(member)
        assert fh is not None
        return json.loads(fh.read())


def _capture(rails: RailNetns, out: Path, *flags: str, env: dict[str, str] | None = None) -> None:
    argv = ["capture", "-o", str(out), "--recorder-gap", "0", *flags]
    if env:
        res = rails.exec(["env", *(f"{k}={v}" for k, v in env.items()), *rails_argv(argv)], timeout=180)
    else:
        res = rails.railscope(*argv, timeout=180)
    assert res.returncode == 0, res.stderr


def rails_argv(argv: list[str]) -> list[str]:
    import sys

    return [sys.executable, "-m", "agent.cli", *argv]


def test_a_capture_with_rails_is_judged_with_them_by_doctor_report_and_diff(rails: RailNetns,
                                                                          tmp_path: Path) -> None:
    before, after = tmp_path / "before.tar.gz", tmp_path / "after.tar.gz"
    _capture(rails, before, "--rails", "2")
    assert _manifest(before)["expectations"]["rails"] == 2

    res = rails.railscope("doctor", "--from", str(before), "--json")
    doc = json.loads(res.stdout)
    assert [r["netdev"] for r in doc["rails"]] == ["net_rail0", "net_rail1"], res.stdout
    assert doc["expectations"]["rails"] == {"value": 2, "from": "bundle"}

    res = rails.railscope("report", str(before))
    assert "no rails found" not in res.stdout.lower(), res.stdout
    assert "net_rail1" in res.stdout
    assert "rails=2 (bundle)" in res.stdout, res.stdout

    rails.set_peer(1, "down")
    ip("-n", rails.node, "link", "set", "net_rail0", "mtu", "1500")
    time.sleep(1.2)  # the manifest's times are whole seconds
    _capture(rails, after, env={"RAILSCOPE_RAILS": "2"})
    assert _manifest(after)["expectations"]["rails"] == 2

    res = rails.railscope("diff", str(before), str(after), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert ("RailDown", "net_rail1") in [(i["code"], i["subject"]) for i in doc["regressions"]], res.stdout
    moved = [(i["code"], i["subject"]) for i in doc["regressions"] + doc["changes"]]
    assert ("MtuChanged", "net_rail0") in moved, res.stdout
    assert doc["before"]["expectations"]["rails"] == {"value": 2, "from": "bundle"}

    res = rails.railscope("diff", str(before), str(after))
    assert res.returncode == 1
    assert "no regressions" not in res.stdout.lower(), res.stdout

    # The command line still wins, and says so: --rails 0 expects no rails at all.
    res = rails.railscope("doctor", "--from", str(after), "--rails", "0", "--json")
    doc = json.loads(res.stdout)
    assert doc["rails"] == [] and "expectations" not in doc  # judged as the command line says
    res = rails.railscope("doctor", "--from", str(after), "--rails", "0")
    assert "judged with: rails=0 (--rails; the bundle had 2)" in res.stdout, res.stdout


def test_an_agent_with_rails_records_them_in_the_images_it_serves(start_agent: StartAgent,
                                                                   tmp_path: Path) -> None:
    agent = start_agent()  # the fixture runs ``railscope agent --rails 2``
    status, body = agent.get("/v1/image", timeout=120)
    assert status == 200, body[:300]
    bundle = tmp_path / "image.tar.gz"
    bundle.write_bytes(body)
    with tarfile.open(fileobj=io.BytesIO(body)) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("manifest.json"))
        fh = tf.extractfile(member)
        assert fh is not None
        assert json.loads(fh.read())["expectations"]["rails"] == 2
    res = agent.rails.railscope("report", str(bundle))
    assert "no rails found" not in res.stdout.lower(), res.stdout
    assert "net_rail0" in res.stdout and "net_rail1" in res.stdout


def _judged(doc: dict) -> set[tuple[str, str]]:
    return {(f["code"], f["subject"]) for f in doc["findings"] if f["code"] in ("MtuMismatch", "DriverNotDoca")}


def test_a_capture_with_the_readiness_expectations_is_judged_with_them(rails: RailNetns, tmp_path: Path) -> None:
    """``--expect-mtu`` / ``--expect-driver`` (flags or variables) are recorded like ``--rails``: the veth
    rails are at MTU 9000 and run no mlx5 driver, so a node judged against 4200 and DOCA has both, live
    and replayed from its bundle."""
    flags = ("--rails", "2", "--expect-mtu", "4200", "--expect-driver", "doca")
    res = rails.railscope("doctor", *flags, "--json")
    live = _judged(json.loads(res.stdout))
    assert {("MtuMismatch", "net_rail0"), ("MtuMismatch", "net_rail1")} <= live, res.stdout

    by_flag, by_env = tmp_path / "flag.tar.gz", tmp_path / "env.tar.gz"
    _capture(rails, by_flag, *flags)
    _capture(rails, by_env, env={"RAILSCOPE_RAILS": "2", "RAILSCOPE_EXPECT_MTU": "4200",
                                 "RAILSCOPE_EXPECT_DRIVER": "doca"})
    for bundle in (by_flag, by_env):
        recorded = _manifest(bundle)["expectations"]
        assert (recorded["expect_mtu"], recorded["expect_driver"]) == (4200, "doca")
        res = rails.railscope("doctor", "--from", str(bundle), "--json")
        assert _judged(json.loads(res.stdout)) == live, res.stdout
        res = rails.railscope("report", str(bundle))
        assert "expect_mtu=4200 (bundle)" in res.stdout, res.stdout

    # the flag overrides the bundle and says so: at 9000 the rails are where they must be
    res = rails.railscope("doctor", "--from", str(by_flag), "--expect-mtu", "9000")
    assert "MtuMismatch" not in res.stdout
    assert "expect_mtu=9000 (--expect-mtu; the bundle had 4200)" in res.stdout, res.stdout
