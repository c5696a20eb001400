"""ConfigFlapping from real configuration changes: the agent's detector on what its readers saw.

``scenario_config_flapping`` changed netdevsim10 from outside (sysfs ``sriov_numvfs``, ``devlink dev
eswitch set``) and after each change fed the detector engine (``agent.detectors.step``) the values
the live host read back: ``sriov_numvfs`` from sysfs and the eswitch mode parsed from the real
``devlink -j dev eswitch show``, at the real time. netdevsim returns to legacy when its VFs go to 0,
so a numvfs change through 0 is also an eswitch change there (mlx5 keeps the mode): the numvfs
tests look at the ``sriov_numvfs`` events only.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

HANDLE = "netdevsim/netdevsim10"


@pytest.fixture(scope="module")
def phases(klab):
    return klab.scenario("config_flapping")["phases"]


def _events(log):
    return [e for step in log for e in step["events"]]


def test_a_single_change_does_not_fire(phases):
    log = phases["single_change"]
    assert [(s["numvfs"], s["eswitch_mode"]) for s in log][:2] == [(4, "switchdev"), (0, "legacy")]
    assert _events(log) == []


def _numvfs_flaps(log):
    return [e for e in _events(log) if e["code"] == "ConfigFlapping" and e["evidence"].get("name") == "sriov_numvfs"]


def test_reapplying_the_same_vf_count_is_not_a_fight(phases):
    # 4 -> 0 -> 4: the kernel requires the 0, so the detector takes it as a step, not a value.
    log = phases["numvfs_reapply"]
    assert [s["numvfs"] for s in log] == [4, 0, 4]
    assert _numvfs_flaps(log) == []


def test_numvfs_back_and_forth_fires(phases):
    log = phases["numvfs_flap"]
    assert [s["numvfs"] for s in log] == [4, 0, 2, 0, 4]
    flaps = _numvfs_flaps(log)
    assert len(flaps) == 1, _events(log)
    flap = flaps[0]
    assert flap["subject"] == HANDLE and flap["severity"] == "warning"
    assert flap["evidence"]["values"] == [4, 2, 4]
    # it fires when the count comes back, not before
    assert flap in log[-1]["events"]
    assert not any(_numvfs_flaps([s]) for s in log[:-1])


def test_eswitch_mode_back_and_forth_fires(phases):
    log = phases["eswitch_flap"]
    assert [s["eswitch_mode"] for s in log] == ["switchdev", "legacy", "switchdev"]
    assert all(s["numvfs"] == 4 for s in log)
    flaps = [e for e in _events(log) if e["code"] == "ConfigFlapping"]
    assert len(flaps) == 1 and "eswitch_mode" in flaps[0]["message"]
    assert "sriov_numvfs" not in flaps[0]["message"]
    assert log[-1]["events"] == [flaps[0]]
