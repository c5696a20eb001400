"""A devlink timeout while VFs are being created is reported as busy, not down.

``scenario_busy`` wrote 1024 to netdevsim10's ``sriov_numvfs`` in switchdev mode: netdevsim creates
one representor per VF while holding the devlink instance lock, for seconds under emulation. A
snapshot taken meanwhile with a 0.3 s command timeout found the real ``devlink`` blocked on that lock;
a second snapshot after the write finished is the contrast.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def busy(klab):
    return klab.scenario("busy")


def test_the_snapshot_really_ran_while_the_vfs_were_created(busy):
    assert busy["snapshot_started_before_write_end"]
    # the write held the devlink lock for longer than the reader's timeout
    assert busy["write_s"] > busy["timeout_s"]
    assert busy["representors_after"] == busy["vfs"]


def test_devlink_timeout_is_busy(busy):
    during = busy["during"]
    assert "devlink" in during["busy"]
    reasons = dict(map(tuple, during["unavailable"]))
    assert "timed out" in reasons.get("devlink", "")
    assert during["ports"] == 0  # nothing half-read is passed off as the port list


def test_busy_is_not_down(busy):
    codes = {code for code, _sev, _subject in busy["during"]["findings"]}
    assert not codes & {"RailLinkDown", "RdmaLinkDown", "RailMissing", "RepresentorStale"}, \
        busy["during"]["findings"]


def test_after_the_write_devlink_answers_again(busy):
    after = busy["after"]
    assert after["busy"] == []
    # netdevsim has neither esw_multiport nor flow_steering_mode: the kernel's "Invalid argument" for
    # those params is a fact of the device, not devlink being unavailable.
    assert not any(src.startswith("devlink") and "Invalid argument" not in why
                   for src, why in after["unavailable"]), after["unavailable"]
    # one representor port per VF + 3 physical ports (netdevsim10 p1, p2; netdevsim11 p1)
    assert after["ports"] == busy["vfs"] + 3
