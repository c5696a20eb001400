from __future__ import annotations

import json
import threading

import pytest

from agent.findings import CODES, EVENT_CODES
from agent.model import Event
from agent.service.events import EventLog, events_from_json


def ev(ts: float, code: str = "LinkFlapping", subject: str = "net_rail0", **evidence) -> Event:
    return Event(ts=ts, code=code, severity=EVENT_CODES[code], subject=subject, message=f"{code} at {ts}",
                 evidence=tuple(evidence.items()))


def test_event_codes() -> None:
    assert EVENT_CODES == {"LinkFlapping": "warning", "ConfigFlapping": "warning", "RepresentorStale": "warning",
                           "PfcStorm": "critical", "LosslessDrops": "critical", "DriverReload": "info"}
    # DriverReload is an event, never a doctor finding
    assert "DriverReload" not in CODES


def test_bounded_oldest_dropped_counts_kept() -> None:
    log = EventLog(max_events=3)
    for i in range(5):
        log.add(ev(float(i), "PfcStorm" if i % 2 else "LinkFlapping"))
    assert [e.ts for e in log.recent()] == [2.0, 3.0, 4.0]
    assert len(log) == 3
    assert log.dropped == 2
    assert log.counts() == {"LinkFlapping": 3, "PfcStorm": 2}


def test_recent_since_and_json_document() -> None:
    log = EventLog()
    log.extend([ev(10.0, values=(8, 0, 8)), ev(20.5, "DriverReload", "node")])
    assert [e.ts for e in log.recent(since=20.0)] == [20.5]
    doc = json.loads(log.dumps())
    assert doc == {"events": [
        {"ts": 10.0, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail0",
         "message": "LinkFlapping at 10.0", "evidence": {"values": [8, 0, 8]}},
        {"ts": 20.5, "code": "DriverReload", "severity": "info", "subject": "node",
         "message": "DriverReload at 20.5", "evidence": {}},
    ]}
    assert log.to_json(since=15) == {"events": [doc["events"][1]]}
    log.add(ev(15.0, "ConfigFlapping", "pci/0000:1a:00.0"))  # added late, from another thread
    assert [e["ts"] for e in log.to_json()["events"]] == [10.0, 15.0, 20.5]


def test_events_from_json_is_tolerant() -> None:
    log = EventLog()
    log.add(ev(1.0))
    events, bad = events_from_json(log.to_json())
    assert (events, bad) == (log.recent(), 0)
    doc = {"events": [{"ts": 2, "code": "PfcStorm", "severity": "critical", "subject": "net_rail1"},
                      {"ts": "x", "code": "PfcStorm", "severity": "critical", "subject": "net_rail1"},
                      "junk", {"ts": 3, "code": "", "severity": "info", "subject": "node"}]}
    events, bad = events_from_json(doc)
    assert [(e.ts, e.code, e.message, e.evidence) for e in events] == [(2.0, "PfcStorm", "", ())]
    assert bad == 3
    assert events_from_json({"events": "nope"}) == ([], 1)
    assert events_from_json([]) == ([], 1)


def test_invalid_bound() -> None:
    with pytest.raises(ValueError):
        EventLog(max_events=0)


def test_concurrent_adds_and_reads() -> None:
    log = EventLog(max_events=500)
    per_thread, threads = 2000, 4
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        for i in range(per_thread):
            log.add(ev(float(i), "LinkFlapping" if k % 2 else "PfcStorm", f"net_rail{k}"))

    def reader() -> None:
        try:
            for _ in range(200):
                doc = log.to_json()
                assert len(doc["events"]) <= 500
                json.dumps(doc)
        except BaseException as exc:  # an assert in a thread is lost unless handed back
            errors.append(exc)

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(threads)] + [threading.Thread(target=reader)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert sum(log.counts().values()) == per_thread * threads
    assert len(log) == 500
    assert log.dropped == per_thread * threads - 500
