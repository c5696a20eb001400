from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from agent.capture.recorder import FlightRecorder, incident_counters
from agent.readers.history import parse_recorder

RAILS = [f"net_rail{i}" for i in range(8)]


def counters(t: int, rail: int) -> dict[str, int]:
    # large cumulative values, as a busy port has after weeks: every value is its own int object
    base = 10**12 + rail * 10**9 + t * 1_000_003
    return {name: base + i for i, name in enumerate(incident_counters(3))}


def test_incident_counters_follow_the_lossless_prio() -> None:
    names = incident_counters(5)
    assert {"tx_prio5_pause_duration", "rx_prio5_pause", "rx_prio5_discards", "rx_prio5_buf_discard",
            "rx_prio5_cong_discard", "tx_pause_storm_error_events", "carrier_down_count",
            "outbound_pci_stalled_rd", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
            "np_cnp_sent", "rp_cnp_handled"} <= set(names)
    assert not [n for n in names if "prio3" in n]
    assert len(names) == len(set(names))


def test_bounded_after_twenty_minutes_of_eight_rails() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        rec = FlightRecorder(incident_counters(3), window_s=900)
        t0 = 1_764_480_000
        for t in range(20 * 60):
            for r, netdev in enumerate(RAILS):
                rec.add(t0 + t, netdev, counters(t, r))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(rec) == 8 * 901  # the last 15 minutes, both ends included
    lines = rec.to_jsonl().splitlines()
    assert json.loads(lines[0])["ts"] == t0 + 1200 - 1 - 900
    assert json.loads(lines[-1])["ts"] == t0 + 1199
    # 8 rails x 900 s x 24 counters: a few MB at most (2.6 MB measured)
    assert held < 4 * 1024 * 1024, held
    assert rec.nbytes() < 4 * 1024 * 1024


def test_jsonl_lines_follow_the_design_schema_and_round_trip() -> None:
    rec = FlightRecorder(window_s=60)
    rec.add(100.0, "net_rail1", {"tx_prio3_pause_duration": 5, "carrier_down_count": 2, "rx_bytes": 9})
    rec.add(100.0, "net_rail0", {"tx_prio3_pause_duration": 7})
    rec.add(101.0, "net_rail0", {"tx_prio3_pause_duration": 8, "out_of_sequence": 0})
    text = rec.to_jsonl()
    assert text.endswith("\n")
    docs = [json.loads(line) for line in text.splitlines()]
    # oldest first, one line per rail per second; counters by raw name; absent and unknown names left out
    assert docs == [
        {"ts": 100, "netdev": "net_rail0", "counters": {"tx_prio3_pause_duration": 7}},
        {"ts": 100, "netdev": "net_rail1", "counters": {"tx_prio3_pause_duration": 5, "carrier_down_count": 2}},
        {"ts": 101, "netdev": "net_rail0", "counters": {"tx_prio3_pause_duration": 8, "out_of_sequence": 0}},
    ]
    # recorder.jsonl has one parser, readers/history.py: what the recorder writes, it reads
    loaded, why = parse_recorder(text.encode())
    assert why is None and loaded is not None
    assert {n: [(s.ts, dict(s.counters)) for s in loaded.of(n)] for n in loaded.netdevs} == {
        "net_rail0": [(100.0, {"tx_prio3_pause_duration": 7}),
                      (101.0, {"tx_prio3_pause_duration": 8, "out_of_sequence": 0})],
        "net_rail1": [(100.0, {"tx_prio3_pause_duration": 5, "carrier_down_count": 2})],
    }


def test_load_skips_and_counts_bad_lines() -> None:
    good = '{"ts": 1.5, "netdev": "net_rail0", "counters": {"rx_prio3_discards": 4, "x": "NaN", "y": -1, "z": NaN}}'
    text = "\n".join([
        good,
        '{"ts": 2, "netdev": "net_rail0", "counters": {"rx_prio3_dis',  # cut short by a capture deadline
        "[1, 2]",
        '{"ts": "yesterday", "netdev": "net_rail0", "counters": {}}',
        '{"ts": 3, "netdev": "", "counters": {}}',
        '{"ts": 3, "netdev": "net_rail0", "counters": []}',
        "",
        '{"ts": 0.5, "netdev": "net_rail0", "counters": {"rx_prio3_discards": 3}}',
        '{"ts": Infinity, "netdev": "net_rail0", "counters": {}}',
        '{"ts": NaN, "netdev": "net_rail0", "counters": {}}',
    ])
    loaded, why = parse_recorder(text.encode())
    assert why == ("recorder.jsonl: 7 malformed line(s) ignored (first: line 2), "
                   "3 counter value(s) that are not integers in [0, 2^64) dropped")
    assert loaded is not None
    assert [(s.ts, dict(s.counters)) for s in loaded.of("net_rail0")] == [
        (0.5, {"rx_prio3_discards": 3}), (1.5, {"rx_prio3_discards": 4})]


def test_write_to_text_and_binary_files() -> None:
    rec = FlightRecorder()
    rec.add(1.25, "net_rail0", {"carrier_down_count": 1})
    text, binary = io.StringIO(), io.BytesIO()
    n = rec.write(text)
    assert rec.write(binary) == n == len(binary.getvalue())
    assert text.getvalue() == binary.getvalue().decode() == rec.to_jsonl()
    assert json.loads(text.getvalue())["ts"] == 1.25


def test_window_interval_and_netdev_bounds() -> None:
    rec = FlightRecorder(window_s=10, max_netdevs=2)
    for t in range(30):
        rec.add(t, "net_rail0", {"carrier_down_count": t})
        rec.add(t + 0.1, "net_rail0", {"carrier_down_count": t})  # a burst replaces, never evicts
    assert len(rec) == 11
    rec.add(5, "net_rail0", {"carrier_down_count": 0})  # the clock stepped back
    assert rec.refused == 1
    rec.add(30, "net_rail1", {})
    rec.add(30, "net_rail2", {})
    assert rec.netdevs() == ["net_rail0", "net_rail1"]
    assert rec.refused == 2
    # a netdev with nothing left in the window is forgotten and makes room
    rec.add(100, "net_rail2", {})
    assert rec.netdevs() == ["net_rail2"]


def test_since_limits_the_lines() -> None:
    rec = FlightRecorder()
    for t in range(10):
        rec.add(t, "net_rail0", {"carrier_down_count": 0})
    assert [json.loads(line)["ts"] for line in rec.lines(since=7)] == [7, 8, 9]


def test_bad_values_are_not_recorded() -> None:
    rec = FlightRecorder()
    rec.add(1, "net_rail0", {"carrier_down_count": True, "rx_prio3_discards": -1, "tx_prio3_pause": 2**64,
                             "rx_prio3_pause": 3})
    assert json.loads(rec.to_jsonl())["counters"] == {"rx_prio3_pause": 3}


@pytest.mark.parametrize("kw", [{"window_s": 0}, {"interval_s": -1}])
def test_invalid_configuration(kw) -> None:
    with pytest.raises(ValueError):
        FlightRecorder(**kw)
