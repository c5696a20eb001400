"""The budget guard on real processes: a child that burns a core or holds memory stands for the
agent (``process=``), and the guard pauses the optional sources, says so on /metrics, and resumes
them once the use is back under its limit."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from agent.metrics.exporter import NodeMetrics
from agent.metrics.state import MetricsState
from agent.readers.sources import SOURCES
from agent.service.budget import BudgetGuard

BURN = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"
HOLD = "import sys, time\nx = bytearray(64 << 20)\nx[::4096] = b'1' * len(x[::4096])\nprint('ready', flush=True)\ntime.sleep(600)\n"


@pytest.fixture
def child() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(10)


def _guard(proc: psutil.Process, **kw: object) -> tuple[BudgetGuard, list[tuple[str, str]]]:
    acts: list[tuple[str, str]] = []
    guard = BudgetGuard(optional=("processes",), pause=lambda n: acts.append(("pause", n)),
                        resume=lambda n: acts.append(("resume", n)), process=proc, **kw)  # type: ignore[arg-type]
    return guard, acts


def test_a_process_past_its_cpu_budget_pauses_the_optional_sources(child: list) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BURN])
    child.append(busy)
    # A small budget: the machine running the tests is shared, a busy loop may get a fraction of a core.
    guard, acts = _guard(psutil.Process(busy.pid), cpu_limit=0.02, rss_limit=None)
    guard.check()  # the first look has no interval to measure CPU over
    assert acts == []
    time.sleep(0.5)
    status = guard.check()
    assert status.cpu_ratio is not None and status.cpu_ratio >= 0.8 * 0.02
    assert acts == [("pause", "processes")] and status.over == ("cpu",) and status.paused == ("processes",)
    time.sleep(0.2)
    guard.check()
    assert acts == [("pause", "processes")]  # paused once, not again while still over

    # The use drops (the child now sleeps): the sources resume.
    busy.kill()
    busy.wait(10)
    idle = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE)
    child.append(idle)
    assert idle.stdout is not None and idle.stdout.readline() == b"ready\n"  # its start-up CPU is spent
    guard._proc = psutil.Process(idle.pid)
    guard._last = None
    guard.check()
    assert acts == [("pause", "processes")]  # no CPU interval yet: nothing decided
    time.sleep(0.5)
    status = guard.check()
    assert acts == [("pause", "processes"), ("resume", "processes")] and status.paused == ()

    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in NodeMetrics(lambda: MetricsState(budget=status)).collect() for s in fam.samples}
    assert got[("railscope_agent_budget_pauses_total", ())] == 1
    assert got[("railscope_agent_budget_exceeded", (("resource", "cpu"),))] == 0
    assert got[("railscope_agent_budget_limit", (("resource", "cpu"),))] == 0.02


def test_resident_memory_past_its_budget_pauses_and_is_exported(child: list) -> None:
    hold = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE)
    child.append(hold)
    assert hold.stdout is not None and hold.stdout.readline() == b"ready\n"
    guard, acts = _guard(psutil.Process(hold.pid), cpu_limit=None, rss_limit=48 << 20)
    status = guard.check()
    assert status.rss_bytes is not None and status.rss_bytes > 64 << 20
    assert acts == [("pause", "processes")] and status.over == ("rss",)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in NodeMetrics(lambda: MetricsState(budget=status)).collect() for s in fam.samples}
    assert got[("railscope_source_paused", (("source", "processes"),))] == 1
    assert got[("railscope_agent_budget_exceeded", (("resource", "rss"),))] == 1
    assert got[("railscope_agent_budget_limit", (("resource", "rss"),))] == 48 << 20


def test_only_optional_sources_can_be_paused() -> None:
    # nothing depends on them: the daemons' processes, the LLDP neighbours (docs/design.md §3: no frame is never a fault)
    assert [s.name for s in SOURCES if s.optional] == ["processes", "lldp"]
