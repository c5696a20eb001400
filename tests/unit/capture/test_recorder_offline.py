"""A capture made without a running agent samples the rail counters twice, ``recorder_gap_s`` apart
(docs/design.md §6): the rail PF's AER totals are on both lines, so a correctable total that rose while the
capture waited is PcieErrors (warning) from the bundle, as the daemon would judge it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agent.analysis.checks.degradation import recorder_check
from agent.analysis.topology import build_topology
from agent.capture.context import CaptureContext
from agent.capture.plugins.agent import _recorder
from agent.config import Expectations, ReadConfig
from agent.host.recorded import RecordedHost
from agent.readers.history import parse_recorder
from agent.readers.snapshot import take_snapshot

IMAGE = Path(__file__).resolve().parents[2] / "images" / "degradation-sources-healthy"
AER = "/sys/bus/pci/devices/0000:0c:00.0/aer_dev_correctable"


class Counting:
    """The degradation image, whose rail0 PF counts correctable AER errors while the capture waits (a
    stand-in for the kernel: the image's files do not change). Not an image for the plan: it has no
    events or recorder of its own to carry over."""

    image = None

    def __init__(self, inner: RecordedHost) -> None:
        self._inner, self.errors = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        text = self._inner.read_text(path, max_bytes)
        if path.endswith(AER) and text is not None and self.errors:
            text = text.replace("TOTAL_ERR_COR 0", f"TOTAL_ERR_COR {self.errors}")
        return text


def _ctx(host: Counting, snap: Any, gap: float) -> CaptureContext:
    def wait(seconds: float) -> None:
        host.errors = 3  # the kernel counted three while the capture slept
        time.sleep(0.6)  # the recorder keeps lines at least half its 1 s interval apart

    return CaptureContext(host=host, cfg=ReadConfig(), snapshot=snap,  # type: ignore[arg-type]
                          rail_pf={"net_rail0": "0000:0c:00.0", "net_rail1": "0000:8d:00.0"},
                          recorder_gap_s=gap, deadline=time.monotonic() + 60, sleep=wait)


def test_a_correctable_total_that_rose_during_the_capture_is_a_warning_from_the_bundle() -> None:
    with RecordedHost(str(IMAGE)) as inner:
        snap = take_snapshot(inner)
        host = Counting(inner)
        jsonl = _recorder(_ctx(host, snap, gap=5.0))
    lines = [json.loads(ln) for ln in jsonl.decode().splitlines()]
    rail0 = [ln["counters"] for ln in lines if ln["netdev"] == "net_rail0"]
    assert [c["aer_dev_correctable"] for c in rail0] == [0, 3]
    assert rail0[0]["aer_pci_function"] == rail0[1]["aer_pci_function"] == 0x0C00
    rec, why = parse_recorder(jsonl)
    assert rec is not None and why is None
    exp = Expectations()
    (f,) = recorder_check(build_topology(snap, exp), exp, rec)
    assert (f.code, f.severity, f.subject) == ("PcieErrors", "warning", "pci/0000:0c:00.0")
    assert f.evidence["increase"] == {"aer_dev_correctable": 3}


def test_totals_that_did_not_move_are_quiet() -> None:
    with RecordedHost(str(IMAGE)) as inner:
        snap = take_snapshot(inner)
        host = Counting(inner)
        ctx = _ctx(host, snap, gap=5.0)
        ctx.sleep = lambda s: time.sleep(0.6)
        jsonl = _recorder(ctx)
    rec, _ = parse_recorder(jsonl)
    exp = Expectations()
    assert recorder_check(build_topology(snap, exp), exp, rec) == []
