"""devlink health reporters: ``devlink -j health show`` parsed from a real netdevsim recording and
the shapes mlx5 prints."""

from __future__ import annotations

import json

import pytest

from agent.readers.common import Notes
from agent.readers.health import ARGV, parse_health, read_health
from tests.support.imagekit import recorded_body


def test_netdevsim_recording() -> None:
    text, rc = recorded_body("netdevsim/39-devlink-health-show.txt")
    assert rc == 0
    reps = parse_health(json.loads(text))
    assert [(r.handle, r.dev, r.port, r.name, r.state, r.error, r.recover) for r in reps] == [
        ("netdevsim/netdevsim10", "netdevsim/netdevsim10", None, "empty", "healthy", 0, 0),
        ("netdevsim/netdevsim10", "netdevsim/netdevsim10", None, "dummy", "healthy", 0, 0)]


def test_port_handles_string_counts_and_missing_state() -> None:
    doc = {"health": {
        "pci/0000:0c:00.0": [{"reporter": "fw_fatal", "state": "error", "error": 1, "recover": 0}],
        "auxiliary/mlx5_core.eth.0/65535": [{"reporter": "tx", "state": "healthy", "error": "3", "recover": "3"}],
        "pci/0000:0c:00.0/1": [{"reporter": "rx", "error": -1}],
        "pci/0000:0c:00.0/x": [{"reporter": "rx", "state": "error"}],  # not a port index: skipped
        "bogus": [{"reporter": "rx", "state": "error"}],
        "pci/0000:0c:00.1": [{"state": "error"}, "junk"],
    }}
    reps = parse_health(doc)
    assert [(r.dev, r.port, r.name, r.state, r.error, r.recover) for r in reps] == [
        ("pci/0000:0c:00.0", None, "fw_fatal", "error", 1, 0),
        ("auxiliary/mlx5_core.eth.0", 65535, "tx", "healthy", 3, 3),
        ("pci/0000:0c:00.0", 1, "rx", None, None, None),
    ]


@pytest.mark.parametrize("doc", [{}, {"health": []}, [], "x"])
def test_not_a_health_document(doc: object) -> None:
    with pytest.raises(ValueError):
        parse_health(doc)


class _Host:
    live = False

    def __init__(self, out: bytes, rc: int = 0) -> None:
        self.out, self.rc = out, rc

    def run(self, argv, timeout_s=10.0, max_bytes=8 << 20):
        from agent.host import CmdResult

        assert tuple(argv) == ARGV  # never health dump / diagnose
        return CmdResult(tuple(argv), self.rc, self.out, b"devlink answers: Operation not supported" if self.rc else b"")


def test_read_health_notes_why_nothing_was_read() -> None:
    notes = Notes()
    assert read_health(_Host(b"{not json"), notes=notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable[0][0] == "devlink health" and "not valid JSON" in notes.unavailable[0][1]
    notes = Notes()
    assert read_health(_Host(b"", rc=1), notes=notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable[0][0] == "devlink health" and "exit 1" in notes.unavailable[0][1]


def test_a_bad_handle_or_reporter_skips_itself_only() -> None:
    doc = {"health": {
        "pci/0000:0c:00.0/1/2": [{"reporter": "rx", "state": "error"}],  # four parts: no handle devlink prints
        "pci/0000:0c:00.0/x": [{"reporter": "rx", "state": "error"}],
        "pci/0000:0c:00.1": None,
        "pci/0000:0c:00.2": 7,
        "pci/0000:0c:00.3": {"reporter": "fw"},
        "pci/0000:0c:00.0": ["junk", {"reporter": ""}, {"reporter": 3}, {"reporter": "fw", "state": "healthy"}],
    }}
    assert [(r.handle, r.name, r.state) for r in parse_health(doc)] == [("pci/0000:0c:00.0", "fw", "healthy")]


@pytest.mark.parametrize("state", ["", 5, True, ["error"]])
def test_a_state_that_is_no_word_is_none(state: object) -> None:
    (rep,) = parse_health({"health": {"pci/0000:0c:00.0": [{"reporter": "fw", "state": state}]}})
    assert rep.state is None


def test_another_document_is_noted_with_the_shape_expected() -> None:
    notes = Notes()
    assert read_health(_Host(b'{"dev": {}}'), notes=notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("devlink health", 'devlink -j health show: expected {"health": {<handle>: [...]}}')]


class _Recording(_Host):
    def run(self, argv, timeout_s=10.0, max_bytes=8 << 20):
        self.timeout = timeout_s
        from agent.host import CmdResult

        return CmdResult(tuple(argv), 0, self.out, truncated=True)


def test_health_is_asked_with_the_callers_timeout_and_a_cut_answer_says_so() -> None:
    host = _Recording(b'{"health": {"pci/0000:0c:00.0": [{"reporter": "fw"')
    notes = Notes()
    assert read_health(host, timeout_s=2.0, notes=notes) == ()  # type: ignore[arg-type]
    assert host.timeout == 2.0
    assert notes.unavailable == [("devlink health", "devlink -j health show: not valid JSON (Expecting ',' delimiter "
                                                    "at line 1 column 51, output cut at the size cap)")]
    read_health(host)  # type: ignore[arg-type]
    assert host.timeout == 10.0
