"""NicHealthError on the real kernel: netdevsim's ``dummy`` devlink health reporter broken through its
debugfs (``fail_recover`` on, ``break_health``), then recovered with ``devlink health recover``.

``scenario_health`` judged the live node with the doctor pipeline at each step and ran the daemon's
runtime in process, its health source every second, to catch the rising error count as an event.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

HANDLE = "netdevsim/netdevsim10"


@pytest.fixture(scope="module")
def health(klab):
    return klab.scenario("health")


def _dummy(step):
    """The dummy reporter of the NIC under test (netdevsim11, the second NIC, has one too)."""
    (rep,) = [r for r in step["reporters"] if r["name"] == "dummy" and r["dev"] == HANDLE]
    return rep


def test_the_reader_reads_what_devlink_prints(health):
    for step in ("healthy", "broken", "recovered"):
        shown = health[step]["health_show"]["health"][HANDLE]
        assert {(r["reporter"], r["state"], r["error"]) for r in shown} == {
            (r["name"], r["state"], r["error"]) for r in health[step]["reporters"] if r["dev"] == HANDLE}, step


def test_healthy_then_broken_then_recovered(health):
    assert _dummy(health["healthy"])["state"] == "healthy" and health["healthy"]["findings"] == []
    broken = _dummy(health["broken"])
    assert broken["state"] == "error" and broken["error"] >= 1
    assert _dummy(health["healthy"])["error"] == 0
    (f,) = health["broken"]["findings"]  # netdevsim11's reporters stay healthy: one finding
    assert (f["code"], f["severity"], f["subject"]) == ("NicHealthError", "warning", HANDLE)
    assert {"reporter": "dummy", "state": "error"}.items() <= next(
        r for r in f["evidence"]["reporters"] if r["reporter"] == "dummy").items()
    rec = _dummy(health["recovered"])
    assert rec["state"] == "healthy" and rec["recover"] >= 1
    (f,) = health["recovered"]["findings"]  # errors since the driver loaded, now healthy: info
    assert (f["code"], f["severity"], f["subject"]) == ("NicHealthError", "info", HANDLE)


def test_the_daemon_raised_the_rising_count_as_an_event_and_exports_the_counter(health):
    assert health["events"], f"no NicHealthError event within {health['event_after_s']} s"
    ev = health["events"][0]
    assert (ev["code"], ev["severity"], ev["subject"]) == ("NicHealthError", "warning", HANDLE)
    assert ev["evidence"]["reporter"] == "dummy" and ev["evidence"]["rise"] >= 1
    errors = {k: v for k, v in health["metrics"].items() if 'reporter="dummy"' in k}
    assert errors and max(errors.values()) >= 1
