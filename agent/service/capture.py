"""The daemon's captures (DESIGN §6, §7): the capture runner in process, one at a time, niced, with
the live flight recorder and event log.

- ``/v1/image`` captures now and streams the bundle (``record``);
- a detector event of a configured code (``--capture-on``) captures into the node spool
  (``--spool``), at most once per code and node per ``--capture-cooldown``, so that a storm of
  events is one bundle (``on_event``);
- reads that hung in the agent's own samplers, and firmware reads that hung in an earlier capture,
  are not tried again (a second stuck task helps no one); the latter are exported as
  ``railscope_source_hung`` like the samplers' own.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.capture.runner import CaptureError, CaptureParams, CaptureResult, capture_to_file
from agent.capture.spool import Spool
from agent.capture.trigger import CaptureTrigger
from agent.config import AgentSettings, expectations_to_json
from agent.host import Host
from agent.model import Event
from agent.service.events import EventLog
from agent.service.flight_recorder import FlightRecorder
from agent.service.tracked_host import Progress, TrackedHost

__all__ = ["CaptureFailed", "ImageBusy", "ImageCapture"]

log = logging.getLogger("railscope.agent.capture")

#: the versioned plan a bundle of this agent was made with (the collector's requests name it too)
PLAN = "railscope.capture/v1"
#: event captures waiting while one runs; beyond this they are dropped (the cooldown would too)
_PENDING = 8


class ImageBusy(Exception):
    """A capture is already running."""


class CaptureFailed(Exception):
    """The bundle could not be made; the message says why. (Not ``agent.host.image.ImageError``, which
    refuses an input as a node image.)"""


def _part(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]", "-", text.lower()).strip("-.")[:63] or "node"


class ImageCapture:
    def __init__(self, settings: AgentSettings, host_factory: Callable[[], Host], firmware_lock: threading.Lock,
                 events: EventLog, recorder: FlightRecorder | None, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._host_factory = host_factory
        self._fw_lock = firmware_lock
        self.events = events
        self.recorder = recorder
        self.clock = clock
        self._busy = threading.Lock()  # one capture at a time, /v1/image and event captures alike
        self.trigger = CaptureTrigger(settings.capture_on, settings.capture_cooldown_s)
        self.spool: Spool | None = Spool(settings.spool_dir, settings.spool_max_bytes) if settings.spool_dir else None
        #: (source, device) of firmware reads that hung in a capture: skipped by the next ones
        self.hung: set[tuple[str, str]] = set()
        self.captures: dict[tuple[str, str], int] = {}  # (trigger, outcome) -> count
        self._pending: queue.Queue[tuple[Event, str]] = queue.Queue(_PENDING)
        self._worker: threading.Thread | None = None
        self._wlock = threading.Lock()
        self._hung_now: Callable[[], frozenset[tuple[str, str]]] | None = None

    # -- one capture ----------------------------------------------------------------------------
    def _params(self, reason: str, incident: str | None, node: str,
                hung: frozenset[tuple[str, str]]) -> CaptureParams:
        recorder = self.recorder
        skip = frozenset({dev for _tool, dev in hung if dev} | {dev for _src, dev in self.hung if dev})
        bid = None
        if incident:
            from proto.keys import KeyPartError, bundle_id

            try:
                # The collector's id of this capture: a second upload of it is a duplicate, not a copy.
                bid = bundle_id(incident, _part(node), PLAN)
            except KeyPartError:
                bid = None
        return CaptureParams(
            node=node, cluster=self.settings.cluster, incident=incident, reason=reason, bundle_id=bid,
            deadline_s=self.settings.capture_deadline_s,
            cfg=self.settings.read, events=self.events.to_json()["events"],
            recorder_jsonl=(lambda: recorder.to_jsonl().encode()) if recorder is not None else None,
            skip_firmware=skip, hung_tools=hung, firmware_lock=self._fw_lock,
            # the agent's judging flags: a replay of this bundle judges as the agent did
            expectations=expectations_to_json(self.settings.expectations))

    def _run(self, out: str, params: CaptureParams, hung: frozenset[tuple[str, str]], trigger: str,
             spool: Spool | None = None) -> CaptureResult:
        host = TrackedHost(self._host_factory(), Progress(), self._fw_lock, hung=hung)
        try:
            if spool is not None:
                res = spool.capture(host, params, plan=PLAN).result
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

    def _count(self, trigger: str, outcome: str) -> None:
        key = (trigger, outcome)
        self.captures[key] = self.captures.get(key, 0) + 1

    def record(self, reason: str, incident: str | None, node: str,
               hung: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, str]:
        """Capture now into a temporary file (blocking: run it in a worker thread); returns (path,
        bundle name). ``ImageBusy`` while another capture runs."""
        if not self._busy.acquire(blocking=False):
            raise ImageBusy()
        work = tempfile.mkdtemp(prefix="railscope-image-")
        try:
            res = self._run(work + "/", self._params(reason, incident, node, hung), hung, "request")
            assert res.path is not None
            if os.path.getsize(res.path) > self.settings.image_max_bytes:
                raise CaptureFailed(f"the bundle is larger than {self.settings.image_max_bytes} bytes")
            return res.path, res.name
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        finally:
            self._busy.release()

    @staticmethod
    def discard(path: str) -> None:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    # -- event captures -------------------------------------------------------------------------
    def on_event(self, ev: Event, node: str, hung: Callable[[], frozenset[tuple[str, str]]] | None = None) -> bool:
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
        self._hung_now = hung
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
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
            incident = _part(f"{ev.code}-{stamp}")
            hung = self._hung_now() if self._hung_now is not None else frozenset()
            with self._busy:
                try:
                    res = self._run("", self._params(f"event {ev.code}: {ev.message or ev.subject}", incident,
                                                     node, hung), hung, "event", spool=self.spool)
                    log.info("event capture spooled", extra={"event": ev.code, "bundle": res.name})
                except CaptureFailed as exc:
                    log.error("event capture failed", extra={"event": ev.code, "reason": str(exc)})
                except Exception:  # a capture bug must never take the event worker down
                    log.exception("event capture failed", extra={"event": ev.code})

    def idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no event capture is queued or running (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            w = self._worker
            if self._pending.empty() and (w is None or not w.is_alive()) and not self._busy.locked():
                return True
            time.sleep(0.05)
        return False

    # -- metrics --------------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("railscope_captures", "Captures by trigger (request, event) and outcome.",
                                  labels=["trigger", "outcome"])
        for (trigger, outcome), n in sorted(self.captures.items()):
            fam.add_metric([trigger, outcome], n)
        yield fam
        if self.spool is not None:
            yield CounterMetricFamily("railscope_spool_dropped", "Bundles dropped from the node spool, oldest "
                                      "first, to stay within --spool-max-bytes.", value=self.spool.dropped_total)
            entries = self.spool.entries()
            yield GaugeMetricFamily("railscope_spool_bundles", "Bundles in the node spool waiting for upload.",
                                    value=len(entries))
            yield GaugeMetricFamily("railscope_spool_bytes", "Bytes of the bundles in the node spool.",
                                    value=sum(e.bytes for e in entries))

    def describe(self) -> list[Metric]:
        return []


