"""The firmware source on the real kernel (netdevsim). What the lab can give: ``devlink dev info`` of
the rail PF with ``fw.mgmt`` running and stored, read live for the rail PFs only, no
FirmwarePendingActivation while they agree, the series served. What it cannot: a flash that changes
the stored version (netdevsim's flash only notifies; ``nsim_dev_info_get`` prints fixed versions), so
the pending case is the live snapshot with its stored version changed, judged by the same pipeline.

Run alone: ``KLAB_ONLY=firmware python3 -m pytest tests/klab/test_klab_firmware.py -m klab``.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

HANDLE = "netdevsim/netdevsim10"


@pytest.fixture(scope="module")
def firmware(klab):
    return klab.scenario("firmware")


def test_the_reader_reads_what_devlink_prints(firmware):
    info = firmware["dev_info"]["info"][HANDLE]
    assert info["versions"]["running"] == {"fw.mgmt": "10.20.30"}
    assert info["versions"]["stored"] == {"fw.mgmt": "10.20.30"}
    got = {fi["handle"]: fi for fi in firmware["firmware"]}
    assert set(got) <= {HANDLE, "netdevsim/netdevsim11"} and HANDLE in got  # rail PFs only
    assert got[HANDLE]["running"] == [["fw.mgmt", "10.20.30"]] and got[HANDLE]["stored"] == [["fw.mgmt", "10.20.30"]]
    assert firmware["unavailable"] == []


def test_running_equals_stored_is_no_finding_and_the_series_says_so(firmware):
    assert firmware["findings"] == []
    assert firmware["metrics"], firmware["metrics"]
    assert all(v == 0 for v in firmware["metrics"].values())
    assert any('running="10.20.30"' in ln and 'stored="10.20.30"' in ln for ln in firmware["pf_firmware_info"])


def test_a_stored_version_ahead_of_the_running_one_is_pending(firmware):
    (f,) = [f for f in firmware["pending_findings"] if f["subject"] == HANDLE]
    assert (f["code"], f["severity"]) == ("FirmwarePendingActivation", "info")
    assert f["evidence"]["pending"] == [{"handle": HANDLE, "running": "10.20.30", "stored": "10.20.31",
                                         "version": "fw.mgmt"}]


def test_the_lab_cannot_flash_a_new_stored_version(firmware):
    # devlink dev flash on netdevsim "succeeds" (status notifications only) and changes nothing
    assert firmware["dev_info_after_flash"] == firmware["dev_info"]
