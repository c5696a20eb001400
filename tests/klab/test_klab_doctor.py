"""``railscope doctor --from`` the image recorded in the guest gives what ``doctor`` said live there.

``scenario_doctor_record`` took rail 1 down, ran ``railscope doctor --json`` in the guest, recorded
the node with ``railscope record -o``, and ran doctor again (the node did not change in between: the
two live answers agree, or the comparison would prove nothing). Here, on the host, the same doctor
reads that image offline with the same expectation flags.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]


def _key(finding):
    return finding["code"], finding["severity"], finding["subject"]


@pytest.fixture(scope="module")
def doctors(klab):
    data = klab.scenario("doctor_record")
    live = json.loads((klab.path / "doctor-live.json").read_text())
    after = json.loads((klab.path / "doctor-live-after.json").read_text())
    image = klab.path / data["image"]  # the image packed as a bundle (tar.gz with its top directory)
    assert image.is_file(), f"no node image at {image}"
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(image), "--json",
                           *data["flags"]], capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    offline = json.loads(proc.stdout)
    return {"live": live, "after": after, "offline": offline, "data": data, "offline_rc": proc.returncode}


def test_live_diagnosis_is_stable_across_the_recording(doctors):
    live, after = doctors["live"], doctors["after"]
    assert live["rails"] == after["rails"]
    assert sorted(map(_key, live["findings"])) == sorted(map(_key, after["findings"]))


def test_the_live_diagnosis_saw_the_lab(doctors):
    live = doctors["live"]
    assert live["node"] == "klab-node" and live["kernel"].startswith("6.1.")
    rails = {r["rail"]: r for r in live["rails"]}
    assert rails[0]["netdev"] == "net_rail0" and rails[0]["oper"] == "up" and rails[0]["representors"] == 4
    assert rails[1]["netdev"] == "net_rail1" and rails[1]["oper"] == "down"
    keys = set(map(_key, live["findings"]))
    assert ("RailLinkDown", "critical", "net_rail1") in keys
    assert ("RdmaNetnsModeUnexpected", "warning", "node") in keys


def test_offline_rail_table_is_the_live_one(doctors):
    assert doctors["offline"]["rails"] == doctors["live"]["rails"]


def test_offline_findings_are_the_live_ones(doctors):
    live, offline = doctors["live"], doctors["offline"]
    assert [_key(f) for f in offline["findings"]] == [_key(f) for f in live["findings"]]
    assert (offline["node"], offline["kernel"]) == (live["node"], live["kernel"])
    assert doctors["offline_rc"] == doctors["data"]["doctor_rc"]


def test_a_capture_in_the_guest_replays_on_the_host(doctors, klab):
    """``railscope capture`` in the guest (netdevsim switchdev with VFs and representors, rdma_rxe):
    its bundle checks with sha256sum and gives the guest's live rail table and findings here."""
    data = doctors["data"]
    assert data["capture_rc"] == 0, (klab.path / "capture.stderr").read_text()
    bundle = klab.path / data["capture"]
    check = subprocess.run(["sha256sum", "-c", bundle.name + ".sha256"], cwd=klab.path, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(bundle), "--json",
                           *data["flags"]], capture_output=True, text=True, timeout=120)
    offline = json.loads(proc.stdout)
    live = doctors["live"]
    assert offline["rails"] == live["rails"]
    assert [_key(f) for f in offline["findings"]] == [_key(f) for f in live["findings"]]
    assert proc.returncode == data["doctor_rc"]
    import tarfile

    with tarfile.open(bundle) as tf:
        names = tf.getnames()
        manifest = json.loads(tf.extractfile("capture-guest/manifest.json").read())  # type: ignore[union-attr]
    assert {n.split("/")[0] for n in names} == {"capture-guest"}
    plugins = {p["name"] for p in manifest["plugins"]}
    assert {"replay", "devlink", "rdma", "sriov", "kernel"} <= plugins
    # the capture's own plug-ins read the lab's real devlink and VFs
    ran = {tuple(i["argv"]) for i in manifest["items"] if i.get("argv") and i.get("rc") == 0}
    # per rail PF handle (a node-wide dump would reach functions no rule names), netdevsim's here
    assert ("devlink", "-j", "dev", "info", "netdevsim/netdevsim10") in ran
    assert ("devlink", "-j", "resource", "show", "netdevsim/netdevsim10") in ran
    assert ("devlink", "-j", "dev", "param", "show") not in {tuple(i["argv"]) for i in manifest["items"]
                                                             if i.get("argv")}
    assert any(n.startswith("capture-guest/fs/sys/") and "virtfn" in n for n in names) or \
        any(i["path"].endswith("sriov_numvfs") for i in manifest["items"])
    # netdevsim's ports have no kind: the optics source asks their modules (netdevsim has none, so
    # ethtool answers "not supported"), and the capture holds each rail's read once, the replay's own
    # (the ethtool plug-in's -m step finds it recorded and does not read the module again)
    for rail in ("net_rail0", "net_rail1"):
        reads = [i for i in manifest["items"] if i.get("argv") and i["argv"][0] == "ethtool"
                 and i["argv"][-2:] == ["-m", rail]]
        assert [i.get("plugin") for i in reads] == ["replay"], reads
