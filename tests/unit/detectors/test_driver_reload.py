from __future__ import annotations

import pytest

from agent.config import Thresholds
from agent.detectors import driver_reload
from agent.detectors.observations import DriverObs, LinkObs
from tests.support.detector_replay import replay

DOCA = DriverObs("A1B2C3D4E5F60718293A4B5", "25.10-1.7.1")
INBOX = DriverObs("F00DCAFE0123456789ABCDE", "6.8.0-60-generic")


def link(pci: str, ifindex: int) -> LinkObs:
    return LinkObs(key=(pci, "p0"), netdev="net_rail", ifindex=ifindex, carrier_down_count=1, carrier=1)


CASES = {
    # name: (observations, [(time, reason)] of DriverReload events)
    "same driver sampled": ([(0, DOCA), (60, DOCA), (120, DOCA)], []),
    "the DOCA container ended: the inbox driver is back": ([(0, DOCA), (60, INBOX), (120, INBOX)],
                                                           [(60, "srcversion changed")]),
    "unreadable while the module is unloaded is not a change": (
        [(0, DOCA), (30, DriverObs(None, None)), (60, DOCA)], []),
    "no srcversion on this kernel: the version tells": (
        [(0, DriverObs(None, "25.10-1.7.1")), (60, DriverObs(None, "6.8.0-60-generic"))], [(60, "version changed")]),
    "srcversion appearing is not a change": ([(0, DriverObs(None, "25.10-1.7.1")), (60, DOCA)], []),
    "every rail recreated": (
        [(0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, link("0000:0c:00.0", 14)),
         (103, link("0000:8d:00.0", 15))], [(103, "netdevs recreated")]),
    "one rail recreated": ([(0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)),
                            (100, link("0000:0c:00.0", 14))], []),
    "rails recreated further apart than the grace": (
        [(0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, link("0000:0c:00.0", 14)),
         (200, link("0000:8d:00.0", 15))], []),
    "recreated, then the srcversion change of the same reload": (
        [(0, DOCA), (0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, link("0000:0c:00.0", 14)),
         (101, link("0000:8d:00.0", 15)), (120, INBOX)], [(101, "netdevs recreated")]),
    "srcversion change, then the recreated netdevs": (
        [(0, DOCA), (0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, INBOX),
         (101, link("0000:0c:00.0", 14)), (102, link("0000:8d:00.0", 15))], [(100, "srcversion changed")]),
    "two reloads are two events": (
        [(0, DOCA), (100, INBOX), (500, DOCA)], [(100, "srcversion changed"), (500, "srcversion changed")]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_driver_reload_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(driver_reload.step, driver_reload.initial(), seq)
    assert [(e.ts, dict(e.evidence)["reason"]) for e in events] == fires
    for e in events:
        assert (e.code, e.severity, e.subject) == ("DriverReload", "info", "node")


def test_grace_is_configurable() -> None:
    seq = CASES["rails recreated further apart than the grace"][0]
    _, events = replay(driver_reload.step, driver_reload.initial(Thresholds(reload_grace_s=120)), seq)
    assert [e.ts for e in events] == [200]


def test_srcversion_event_says_what_changed_from_what_to_what() -> None:
    (e,) = replay(driver_reload.step, driver_reload.initial(), [(0, DOCA), (60, INBOX)])[1]
    assert e.message == (f"mlx5_core reloaded: srcversion changed, srcversion {DOCA.srcversion} -> {INBOX.srcversion} "
                         f"(version {DOCA.version} -> {INBOX.version})")
    assert dict(e.evidence) == {"reason": "srcversion changed", "old_srcversion": DOCA.srcversion,
                                "new_srcversion": INBOX.srcversion, "old_version": DOCA.version,
                                "new_version": INBOX.version, "previous_check_ts": 0}


def test_recreated_event_names_every_function_and_the_driver_last_seen() -> None:
    seq = [(0, DOCA), (0, link("0000:0c:00.0", 4)), (0, LinkObs(key=("0000:8d:00.0", ""), netdev="eth5", ifindex=5)),
           (100, link("0000:0c:00.0", 14)), (103, LinkObs(key=("0000:8d:00.0", ""), netdev="eth5", ifindex=15))]
    (e,) = replay(driver_reload.step, driver_reload.initial(), seq)[1]
    assert e.message == "every rail netdev was recreated within 30 s: driver reloaded"
    assert dict(e.evidence) == {"reason": "netdevs recreated", "netdevs": ["0000:0c:00.0/p0", "0000:8d:00.0"],
                                "srcversion": DOCA.srcversion, "version": DOCA.version}


def test_recreations_exactly_a_grace_apart_are_one_reload() -> None:
    seq = [(0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, link("0000:0c:00.0", 14)),
           (130, link("0000:8d:00.0", 15))]
    assert [e.ts for e in replay(driver_reload.step, driver_reload.initial(), seq)[1]] == [130]


def test_a_second_recreation_within_the_grace_of_a_reload_is_the_same_reload() -> None:
    seq = [(0, DOCA), (0, link("0000:0c:00.0", 4)), (100, INBOX), (130, link("0000:0c:00.0", 14)),
           (131, link("0000:0c:00.0", 24))]
    assert [e.ts for e in replay(driver_reload.step, driver_reload.initial(), seq)[1]] == [100, 131]
    assert [e.ts for e in replay(driver_reload.step, driver_reload.initial(), seq[:4])[1]] == [100]


def test_a_link_without_ifindex_and_a_version_only_change_with_srcversion_known() -> None:
    seq = [(0, link("0000:0c:00.0", 4)), (10, LinkObs(key=("0000:0c:00.0", "p0"), netdev="net_rail")),
           (20, link("0000:0c:00.0", 4))]
    assert replay(driver_reload.step, driver_reload.initial(), seq)[1] == []
    # with both srcversions known, the version alone changing is no reload (the same module build)
    same = [(0, DOCA), (60, DriverObs(DOCA.srcversion, "25.10-1.7.2"))]
    assert replay(driver_reload.step, driver_reload.initial(), same)[1] == []
    # a srcversion now unreadable: the version tells
    gone = [(0, DOCA), (60, DriverObs(None, "6.8.0-60-generic"))]
    assert [dict(e.evidence)["reason"] for e in replay(driver_reload.step, driver_reload.initial(), gone)[1]] == [
        "version changed"]


def test_a_reload_seen_from_recreated_netdevs_absorbs_only_the_next_driver_sample() -> None:
    seq = [(0, DOCA), (0, link("0000:0c:00.0", 4)), (0, link("0000:8d:00.0", 5)), (100, link("0000:0c:00.0", 14)),
           (101, link("0000:8d:00.0", 15)), (120, INBOX), (180, INBOX), (500, DOCA)]
    _, events = replay(driver_reload.step, driver_reload.initial(), seq)
    assert [(e.ts, dict(e.evidence)["reason"]) for e in events] == [(101, "netdevs recreated"),
                                                                   (500, "srcversion changed")]


def test_recreations_within_the_grace_of_a_reported_reload_are_that_reload_and_later_ones_another() -> None:
    a, b = "0000:0c:00.0", "0000:8d:00.0"
    seq = [(0, link(a, 4)), (0, link(b, 5)), (100, link(a, 14)), (101, link(b, 15)),
           # the netdevs recreated once more while the driver settles
           (110, link(a, 24)), (111, link(b, 25)),
           # a reload of its own, long after
           (300, link(a, 34)), (301, link(b, 35))]
    _, events = replay(driver_reload.step, driver_reload.initial(), seq)
    assert [(e.ts, dict(e.evidence)["reason"]) for e in events] == [(101, "netdevs recreated"),
                                                                   (301, "netdevs recreated")]
