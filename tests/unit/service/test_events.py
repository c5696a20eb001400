from __future__ import annotations

import json
import threading

import pytest

from agent.findings import CODES, EVENT_CODES
from agent.model import Event
from agent.readers.history import EVENT_VOCABULARY, parse_events
from agent.service.events import EventLog


def ev(ts: float, code: str = "LinkFlapping", subject: str = "net_rail0", **evidence) -> Event:
    return Event(ts=ts, code=code, severity=EVENT_CODES[code], subject=subject, message=f"{code} at {ts}",
                 evidence=tuple(evidence.items()))


def test_event_codes() -> None:
    assert EVENT_CODES == {"LinkFlapping": "warning", "ConfigFlapping": "warning", "RepresentorStale": "warning",
                           "PfcStorm": "critical", "LosslessDrops": "critical", "NicHealthError": "warning",
                           "LinkDegrading": "warning", "OpticsOutOfRange": "warning", "PcieErrors": "warning",
                           "DriverReload": "info", "MtuMismatch": "warning", "RailResourcesLost": "critical"}
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


def test_events_json_reads_back_through_the_history_parser() -> None:
    """``events.json`` has one parser, ``readers/history.py``: what the log writes, it reads."""
    log = EventLog()
    log.add(ev(1.0))
    events, why = parse_events(log.dumps().encode())
    assert (list(events), why) == (log.recent(), None)
    doc = {"events": [{"ts": 2, "code": "PfcStorm", "severity": "critical", "subject": "net_rail1"},
                      {"ts": "x", "code": "PfcStorm", "severity": "critical", "subject": "net_rail1"},
                      "junk", {"ts": 3, "code": "", "severity": "info", "subject": "node"}]}
    events, why = parse_events(json.dumps(doc).encode())
    assert [(e.ts, e.code, e.message, e.evidence) for e in events] == [(2.0, "PfcStorm", "", ())]
    assert why == "events.json: 3 malformed event(s) ignored, 1 unknown code(s)"
    assert parse_events(b'{"events": "nope"}') == ((), 'events.json: expected {"events": [...]}')
    assert parse_events(b"[]") == ((), 'events.json: expected {"events": [...]}')


def test_every_event_code_is_in_the_vocabulary_history_accepts() -> None:
    assert set(EVENT_CODES) <= EVENT_VOCABULARY


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
