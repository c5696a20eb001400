"""The history parser's rules: events.json and recorder.jsonl from an untrusted image.

A bad value -- a time that is not a finite non-negative number, a code outside the vocabulary, a
name that is no name, a counter outside ``[0, 2**64)`` -- is dropped and counted, never a crash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.model import Event
from agent.readers.history import History, Recorder, Sample, load_history, parse_events, parse_recorder


def events_doc(*events: Any) -> bytes:
    return json.dumps({"events": list(events)}).encode()


def ev(**kw: Any) -> dict[str, Any]:
    return {"ts": 100, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail0", **kw}


def lines(*rows: Any) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


def row(**kw: Any) -> dict[str, Any]:
    return {"ts": 100, "netdev": "net_rail0", "counters": {"rx_prio3_discards": 1}, **kw}


# -- times and names, both files --------------------------------------------------------------


@pytest.mark.parametrize("ts", [-1, -0.5, True, False, "100", None, [1], {"t": 1}, 1e400])
def test_a_time_that_is_not_a_finite_non_negative_number_drops_the_event(ts: Any) -> None:
    got, why = parse_events(events_doc(ev(ts=ts), ev(ts=5)))
    assert [e.ts for e in got] == [5.0]
    assert why == "events.json: 1 malformed event(s) ignored"


@pytest.mark.parametrize("ts", [-1, True, "100", None, 1e400])
def test_a_time_that_is_not_a_finite_non_negative_number_drops_the_recorder_line(ts: Any) -> None:
    rec, why = parse_recorder(lines(row(ts=ts), row(ts=5)))
    assert rec is not None and [s.ts for s in rec.of("net_rail0")] == [5.0]
    assert why == "recorder.jsonl: 1 malformed line(s) ignored (first: line 1)"


def test_time_zero_is_a_time_and_integer_times_read_as_floats() -> None:
    got, why = parse_events(events_doc(ev(ts=0)))
    assert why is None and got[0].ts == 0.0 and isinstance(got[0].ts, float)
    rec, why = parse_recorder(lines(row(ts=0)))
    assert why is None and rec is not None
    assert rec.of("net_rail0")[0].ts == 0.0 and isinstance(rec.of("net_rail0")[0].ts, float)


@pytest.mark.parametrize("subject", ["", "   ", "x" * 257, 7, None, ["net_rail0"]])
def test_a_subject_that_is_not_a_short_string_drops_the_event(subject: Any) -> None:
    got, why = parse_events(events_doc(ev(subject=subject)))
    assert got == () and why == "events.json: 1 malformed event(s) ignored"


def test_a_subject_of_256_characters_is_still_a_name() -> None:
    got, why = parse_events(events_doc(ev(subject="x" * 256)))
    assert why is None and got[0].subject == "x" * 256


@pytest.mark.parametrize("netdev", ["", " ", "n" * 257, 3, None])
def test_a_netdev_that_is_not_a_short_string_drops_the_recorder_line(netdev: Any) -> None:
    rec, why = parse_recorder(lines(row(netdev=netdev)))
    assert rec is None and why == "recorder.jsonl: 1 malformed line(s) ignored (first: line 1)"


def test_a_netdev_of_256_characters_is_still_a_name() -> None:
    rec, why = parse_recorder(lines(row(netdev="n" * 256)))
    assert why is None and rec is not None and rec.netdevs == ("n" * 256,)


# -- events.json ------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"{not json", b"\xff\xfe", b"[" * 100 + b"]" * 100])
def test_an_unreadable_events_file_is_a_reason(data: bytes) -> None:
    got, why = parse_events(data)
    assert got == () and why is not None and why.startswith("events.json: ")


@pytest.mark.parametrize("data", [b"[]", b'{"events": {}}', b'{"events": null}', b"{}", b"7"])
def test_an_events_file_without_an_events_list_is_a_reason(data: bytes) -> None:
    assert parse_events(data) == ((), 'events.json: expected {"events": [...]}')


def test_events_come_out_oldest_first_whatever_the_file_order() -> None:
    got, why = parse_events(events_doc(ev(ts=30, subject="c"), ev(ts=10, subject="a"), ev(ts=20, subject="b")))
    assert why is None and [e.subject for e in got] == ["a", "b", "c"]


@pytest.mark.parametrize("e", [7, "LinkFlapping", None, [], ev(code=None), ev(code=3), {"ts": 1}])
def test_an_event_that_is_no_event_object_is_dropped_and_counted(e: Any) -> None:
    got, why = parse_events(events_doc(e, e, ev()))
    assert len(got) == 1 and why == "events.json: 2 malformed event(s) ignored"


def test_unknown_codes_are_dropped_counted_and_the_distinct_codes_told() -> None:
    got, why = parse_events(events_doc(ev(code="Nope"), ev(code="Nope"), ev(code="Other"), ev()))
    assert [e.code for e in got] == ["LinkFlapping"]
    assert why == "events.json: 3 malformed event(s) ignored, 2 unknown code(s)"


def test_an_unknown_code_is_not_a_crash_however_long() -> None:
    got, why = parse_events(events_doc(ev(code="X" * 100_000)))
    assert got == () and why == "events.json: 1 malformed event(s) ignored, 1 unknown code(s)"


def test_the_agents_own_event_codes_and_the_finding_codes_are_both_accepted() -> None:
    got, why = parse_events(events_doc(ev(code="DriverReload"), ev(code="RailLinkDown")))
    assert why is None and sorted(e.code for e in got) == ["DriverReload", "RailLinkDown"]


@pytest.mark.parametrize("sev", [None, "fatal", 1, "CRITICAL"])
def test_a_severity_outside_the_three_is_the_codes_own(sev: Any) -> None:
    got, _ = parse_events(events_doc(ev(code="RailLinkDown", severity=sev), ev(code="DriverReload", severity=sev),
                                     ev(code="PfcStorm", severity=sev, ts=101)))
    assert {e.code: e.severity for e in got} == {"RailLinkDown": "critical", "DriverReload": "info",
                                                 "PfcStorm": "critical"}


def test_a_valid_severity_is_kept_even_when_it_differs_from_the_codes_own() -> None:
    got, _ = parse_events(events_doc(ev(code="RailLinkDown", severity="info")))
    assert got[0].severity == "info"


def test_an_event_reads_back_whole() -> None:
    got, why = parse_events(events_doc(ev(message="carrier lost 5 times", evidence={"b": 2, "a": 1})))
    assert why is None
    assert got == (Event(100.0, "LinkFlapping", "warning", "net_rail0", "carrier lost 5 times",
                         (("a", 1), ("b", 2))),)


@pytest.mark.parametrize("evidence", [None, [["a", 1]], "a=1", 3])
def test_evidence_that_is_not_an_object_reads_as_none(evidence: Any) -> None:
    got, why = parse_events(events_doc(ev(evidence=evidence)))
    assert why is None and got[0].evidence == ()


@pytest.mark.parametrize("message", [None, 3, ["x"]])
def test_a_message_that_is_not_a_string_reads_as_empty(message: Any) -> None:
    got, why = parse_events(events_doc(ev(message=message)))
    assert why is None and got[0].message == ""


def test_a_message_is_cut_at_4096_characters() -> None:
    got, _ = parse_events(events_doc(ev(message="m" * 5000), ev(message="k" * 4096, ts=101)))
    assert [len(e.message) for e in got] == [4096, 4096]


@pytest.mark.slow
def test_only_the_newest_100000_events_are_read_and_the_rest_told() -> None:
    got, why = parse_events(events_doc(*(ev(ts=i) for i in range(100_002))))
    assert len(got) == 100_000 and got[0].ts == 2.0 and got[-1].ts == 100_001.0
    assert why == "events.json: 2 oldest event(s) beyond 100000 ignored"


@pytest.mark.slow
def test_exactly_100000_events_are_all_read() -> None:
    got, why = parse_events(events_doc(*(ev(ts=i) for i in range(100_000))))
    assert len(got) == 100_000 and why is None


# -- recorder.jsonl ---------------------------------------------------------------------------


def test_blank_lines_are_no_lines_and_the_first_bad_line_is_named_from_1() -> None:
    rec, why = parse_recorder(lines(row(), "", "   ", "garbage", row(ts=101), "[1]", row(ts=102)))
    assert rec is not None and len(rec.of("net_rail0")) == 3
    assert why == "recorder.jsonl: 2 malformed line(s) ignored (first: line 4)"


@pytest.mark.parametrize("counters", [None, [1, 2], "x", 3])
def test_a_line_whose_counters_are_no_object_is_malformed(counters: Any) -> None:
    rec, why = parse_recorder(lines(row(counters=counters), row(ts=101)))
    assert rec is not None and len(rec.of("net_rail0")) == 1
    assert why == "recorder.jsonl: 1 malformed line(s) ignored (first: line 1)"


def padded(size: int, **kw: Any) -> bytes:
    """A valid recorder line of exactly ``size`` bytes (JSON whitespace before the closing brace)."""
    text = json.dumps(row(**kw))
    return (text[:-1] + " " * (size - len(text)) + "}").encode()


def test_a_line_of_64_kib_is_read_and_a_longer_one_is_malformed_however_valid() -> None:
    rec, why = parse_recorder(padded(1 << 16) + b"\n" + padded((1 << 16) + 1, ts=101))
    assert rec is not None and [s.ts for s in rec.of("net_rail0")] == [100.0]
    assert why == "recorder.jsonl: 1 malformed line(s) ignored (first: line 2)"


@pytest.mark.parametrize("value", [-1, 1 << 64, 1.5, 2.0, True, False, "7", None, [1], {"v": 1}])
def test_a_counter_that_is_not_an_integer_in_0_to_2_64_is_left_out_and_counted(value: Any) -> None:
    rec, why = parse_recorder(lines(row(counters={"bad": value, "good": 5}), row(ts=101, counters={"bad": value})))
    assert rec is not None
    samples = rec.of("net_rail0")
    assert [s.counters for s in samples] == [(("good", 5),), ()]
    assert samples[0].get("bad") is None  # absent, never 0
    assert why == "recorder.jsonl: 2 counter value(s) that are not integers in [0, 2^64) dropped"


def test_the_bounds_of_a_counter_are_0_and_2_64_minus_1() -> None:
    rec, why = parse_recorder(lines(row(counters={"lo": 0, "hi": (1 << 64) - 1})))
    assert why is None and rec is not None
    assert rec.of("net_rail0")[0].counters == (("lo", 0), ("hi", (1 << 64) - 1))


def test_a_counter_name_longer_than_256_is_left_out_and_256_is_kept() -> None:
    rec, why = parse_recorder(lines(row(counters={"k" * 257: 1, "k" * 256: 2})))
    assert rec is not None and rec.of("net_rail0")[0].counters == (("k" * 256, 2),)
    assert why == "recorder.jsonl: 1 counter value(s) that are not integers in [0, 2^64) dropped"


def test_a_counter_name_is_read_without_surrounding_blanks() -> None:
    rec, _ = parse_recorder(lines(row(counters={" rx_prio3_discards\t": 4})))
    assert rec is not None and rec.of("net_rail0")[0].get("rx_prio3_discards") == 4


def test_malformed_lines_and_dropped_counters_are_both_told() -> None:
    rec, why = parse_recorder(lines("x", row(counters={"a": -1})))
    assert rec is not None
    assert why == ("recorder.jsonl: 1 malformed line(s) ignored (first: line 1), "
                   "1 counter value(s) that are not integers in [0, 2^64) dropped")


def test_samples_are_per_netdev_oldest_first_and_netdevs_sorted() -> None:
    rec, why = parse_recorder(lines(row(netdev="net_rail1", ts=3), row(ts=2), row(netdev="net_rail1", ts=1), row(ts=1)))
    assert why is None and rec is not None
    assert rec.netdevs == ("net_rail0", "net_rail1")
    assert [s.ts for s in rec.of("net_rail0")] == [1.0, 2.0]
    assert [s.ts for s in rec.of("net_rail1")] == [1.0, 3.0]


def test_a_netdev_or_counter_the_recorder_does_not_have_is_none() -> None:
    rec, _ = parse_recorder(lines(row()))
    assert rec is not None and rec.of("net_rail9") == ()
    assert rec.of("net_rail0")[0].get("tx_prio3_pause") is None
    assert Recorder(()).netdevs == ()
    assert Sample(1.0, ()).get("x") is None


@pytest.mark.parametrize("data", [b"", b"\n\n  \n"])
def test_a_recorder_without_lines_has_no_samples(data: bytes) -> None:
    assert parse_recorder(data) == (None, "recorder.jsonl: no samples")


def test_a_recorder_of_bad_lines_only_tells_why() -> None:
    assert parse_recorder(b"x\ny\n") == (None, "recorder.jsonl: 2 malformed line(s) ignored (first: line 1)")


# -- load_history -----------------------------------------------------------------------------


@dataclass
class _Image:
    files: dict[str, bytes] = field(default_factory=dict)
    manifest: Any = None
    problems: tuple[tuple[str, str], ...] = ()

    def file(self, name: str) -> bytes | None:
        return self.files.get(name)


@dataclass
class _Host:
    image: _Image | None


class _Manifest:
    def time_of(self, key: str = "ended_at") -> float | None:
        return 1234.5 if key == "ended_at" else None


def test_a_live_host_has_no_history() -> None:
    assert load_history(_Host(None)) == History()  # type: ignore[arg-type]


def test_an_image_without_the_files_has_an_empty_history_and_no_reasons() -> None:
    assert load_history(_Host(_Image())) == History()  # type: ignore[arg-type]


def test_an_image_history_carries_events_recorder_capture_time_and_reasons() -> None:
    image = _Image({"events.json": events_doc(ev(), 7), "recorder.jsonl": lines(row(), "x")}, _Manifest())
    hist = load_history(_Host(image))  # type: ignore[arg-type]
    assert [e.code for e in hist.events] == ["LinkFlapping"]
    assert hist.recorder is not None and hist.recorder.netdevs == ("net_rail0",)
    assert hist.capture_time == 1234.5
    assert hist.unavailable == (("events", "events.json: 1 malformed event(s) ignored"),
                                ("recorder", "recorder.jsonl: 1 malformed line(s) ignored (first: line 2)"))


def test_clean_files_give_no_reasons() -> None:
    hist = load_history(_Host(_Image({"events.json": events_doc(ev()), "recorder.jsonl": lines(row())})))  # type: ignore[arg-type]
    assert hist.unavailable == () and len(hist.events) == 1 and hist.capture_time is None
