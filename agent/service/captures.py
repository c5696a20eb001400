"""The daemon's captures (docs/design.md §6, §7): the capture runner in process, one at a time, niced, with
the live flight recorder and event log. Every capture of the daemon — an operator's ``/v1/image``, a
``--capture-on`` event, a collector's request — is a ``Job`` (agent/capture/job.py) run by
:meth:`Captures.run`: through the daemon's worker host, under the firmware gate its samplers hold,
skipping the reads stuck in them, counted in ``railscope_captures``.

- ``/v1/image`` captures now and streams the bundle (``record``);
- a detector event of a configured code (``--capture-on``) captures into the node spool
  (``--spool``), at most once per code and node per ``--capture-cooldown``, so that a storm of
  events is one bundle (``on_event``); it waits until the rails' links have settled, so that a flap's
  bundle shows the rail as the flap left it (``agent.capture.trigger.settle_wait``; the wait is a note
  of the manifest);
- a collector's request captures into a work directory the puller uploads (agent/service/pull.py);
- reads that hung in the agent's own samplers, and firmware reads that hung in an earlier capture,
  are not tried again (a second stuck task helps no one); the latter are exported as
  ``railscope_source_hung`` like the samplers' own.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.capture.job import Job, Shared
from agent.capture.manifest import settle_note
from agent.capture.recorder import FlightRecorder
from agent.capture.runner import CaptureError, CaptureResult, capture_to_file
from agent.capture.spool import Spool
from agent.capture.trigger import SETTLE_S, CaptureTrigger, settle_wait
from agent.config import AgentSettings
from agent.host import Host
from agent.host.firmware import FirmwareGate
from agent.model import Event
from agent.service.events import EventLog
from agent.service.tracked_host import Progress, TrackedHost

__all__ = ["CaptureBusy", "CaptureFailed", "CaptureMetrics", "Captures"]

log = logging.getLogger("railscope.agent.capture")

#: event captures waiting while one runs; beyond this they are dropped (the cooldown would too)
_PENDING = 8
#: ``railscope_captures``' trigger label of each job's trigger (an operator's image and a collector's
#: request are both requests)
_LABEL = {"event": "event", "image": "request", "request": "request", "cli": "cli"}


class CaptureBusy(Exception):
    """A capture is already running."""


class CaptureFailed(Exception):
    """The bundle could not be made; the message says why. (Not ``agent.host.image.ImageError``, which
    refuses an input as a node image.)"""


class Captures:
    """Every capture of the daemon, one at a time (see the module docstring)."""

    def __init__(self, settings: AgentSettings, host_factory: Callable[[], Host], gate: FirmwareGate,
                 events: EventLog, recorder: FlightRecorder | None, clock: Callable[[], float],
                 hung_tools: Callable[[], frozenset[tuple[str, str]]] = frozenset,
                 rail_change: Callable[[], tuple[float, str, bool] | None] = lambda: None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """``rail_change``: (unix s, netdev, oper up) of the newest change of a rail's link, read from
        the event captures' thread; ``sleep`` paces their wait for the links to settle."""
        self.settings = settings
        self._host_factory = host_factory
        self.gate = gate
        self.events = events
        self.recorder = recorder
        self.clock = clock
        #: (tool, device) of the reads stuck in the daemon's samplers, now
        self._hung_tools = hung_tools
        self._rail_change = rail_change
        self._sleep = sleep
        self._busy = threading.Lock()  # one capture at a time, whatever its trigger
        self.trigger = CaptureTrigger(settings.capture_on, settings.capture_cooldown_s)
        self.spool: Spool | None = Spool(settings.spool_dir, settings.spool_max_bytes) if settings.spool_dir else None
        #: (source, device) of firmware reads that hung in a capture: skipped by the next ones
        self.hung: set[tuple[str, str]] = set()
        self.captures: dict[tuple[str, str], int] = {}  # (trigger, outcome) -> count
        self._pending: queue.Queue[tuple[Event, str]] = queue.Queue(_PENDING)
        self._worker: threading.Thread | None = None
        self._wlock = threading.Lock()

    # -- one capture ----------------------------------------------------------------------------
    def shared(self) -> Shared:
        """The daemon's state a capture starting now shares."""
        recorder = self.recorder
        return Shared(gate=self.gate, hung_tools=self._hung_tools(), hung_firmware=frozenset(self.hung),
                      events=self.events.to_json()["events"],
                      recorder_jsonl=(lambda: recorder.to_jsonl().encode()) if recorder is not None else None)

    def run(self, job: Job, out: str | None, *, wait: bool = True) -> CaptureResult:
        """Run ``job`` into ``out`` (a file or directory; None: the spool), one capture at a time:
        blocking (run it in a worker thread). ``CaptureBusy`` when another runs and ``wait`` is False."""
        if not self._busy.acquire(blocking=wait):
            raise CaptureBusy()
        try:
            shared = self.shared()
            params = job.params(shared)
            # A firmware read of a capture waits for a sampler's no longer than a slice of its deadline.
            host = TrackedHost(self._host_factory(), Progress(), self.gate, hung=shared.hung_tools,
                               firmware_wait_s=min(30.0, job.deadline_s / 8))
            trigger = _LABEL.get(job.trigger, job.trigger)
            try:
                if out is None:
                    assert self.spool is not None
                    res = self.spool.capture(host, params, hello=job.hello).result
                else:
                    res = capture_to_file(host, out, params)
            except (CaptureError, OSError) as exc:
                self._count(trigger, "failed")
                raise CaptureFailed(str(exc)) from None
            finally:
                host.close()
            self.hung.update(res.hung)
            self._count(trigger, "partial" if res.partial else "ok")
            return res
        finally:
            self._busy.release()

    def _count(self, trigger: str, outcome: str) -> None:
        key = (trigger, outcome)
        self.captures[key] = self.captures.get(key, 0) + 1

    def record(self, reason: str, incident: str | None, node: str) -> tuple[str, str]:
        """An operator's ``/v1/image``: capture now into a temporary file (blocking: run it in a worker
        thread); returns (path, bundle name). ``CaptureBusy`` while another capture runs."""
        work = tempfile.mkdtemp(prefix="railscope-image-")
        try:
            res = self.run(Job.for_image(reason, incident, node, self.settings), work + "/", wait=False)
            assert res.path is not None
            if os.path.getsize(res.path) > self.settings.image_max_bytes:
                raise CaptureFailed(f"the bundle is larger than {self.settings.image_max_bytes} bytes")
            return res.path, res.name
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    @staticmethod
    def discard(path: str) -> None:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    # -- event captures -------------------------------------------------------------------------
    def on_event(self, ev: Event, node: str) -> bool:
        """Called for every detector event (on the event loop: never blocks). True when it starts a
        capture into the spool."""
        if self.spool is None or not self.trigger.wants(ev.code, node, self.clock()):
            return False
        try:
            self._pending.put_nowait((ev, node))
        except queue.Full:
            log.warning("event capture dropped: captures are queued already", extra={"event": ev.code})
            self._count("event", "dropped")
            return False
        with self._wlock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._drain, name="capture-events", daemon=True)
                self._worker.start()
        return True

    def _drain(self) -> None:
        while True:
            try:
                ev, node = self._pending.get(timeout=1.0)
            except queue.Empty:
                return
            job = Job.for_event(ev.code, ev.message or ev.subject, node, self.settings, self.clock())
            note = self.settle()
            if note is not None:
                job = replace(job, notes=(note,))
            try:
                res = self.run(job, None)
                log.info("event capture spooled", extra={"event": ev.code, "bundle": res.name})
            except CaptureFailed as exc:
                log.error("event capture failed", extra={"event": ev.code, "reason": str(exc)})
            except Exception:  # a capture bug must never take the event worker down
                log.exception("event capture failed", extra={"event": ev.code})

    def settle(self) -> str | None:
        """Wait (in the event captures' thread) until no rail's link changed for ``SETTLE_S``, at most
        ``SETTLE_MAX_S``; the manifest's note of the wait, None when there was none."""
        since = self.clock()
        while True:
            change = self._rail_change()
            wait = settle_wait(change[0] if change is not None else None, self.clock(), since)
            if wait <= 0:
                break
            self._sleep(min(wait, 0.25))  # a change meanwhile moves the end of the wait
        now = self.clock()
        settled = change is None or now - change[0] >= SETTLE_S
        return settle_note(now - since, change, settled)

    def idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no event capture is queued or running (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            w = self._worker
            if self._pending.empty() and (w is None or not w.is_alive()) and not self._busy.locked():
                return True
            time.sleep(0.05)
        return False


class CaptureMetrics:
    """``railscope_captures`` by trigger and outcome, and the node spool's ``railscope_spool_*``."""

    def __init__(self, captures: Captures) -> None:
        self.captures = captures

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("railscope_captures", "Captures by trigger (request, event) and outcome.",
                                  labels=["trigger", "outcome"])
        for (trigger, outcome), n in sorted(self.captures.captures.items()):
            fam.add_metric([trigger, outcome], n)
        yield fam
        spool = self.captures.spool
        if spool is not None:
            yield CounterMetricFamily("railscope_spool_dropped", "Bundles dropped from the node spool, oldest "
                                      "first, to stay within --spool-max-bytes.", value=spool.dropped_total)
            entries = spool.entries()
            yield GaugeMetricFamily("railscope_spool_bundles", "Bundles in the node spool waiting for upload.",
                                    value=len(entries))
            yield GaugeMetricFamily("railscope_spool_bytes", "Bytes of the bundles in the node spool.",
                                    value=sum(e.bytes for e in entries))

    def describe(self) -> list[Metric]:
        return []
