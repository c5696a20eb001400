"""The daemon's node-image capture (``/v1/image``): one at a time, through its own tracked host.

It records a node image now (the readers' commands and files, with the flight recorder's
``recorder.jsonl`` and the event log's ``events.json``) into a temporary directory and packs it as a
``tar.gz``, skipping the tools of reads stuck in the agent's own samplers (a second stuck task helps
no one, DESIGN §7).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable

from agent.config import AgentSettings
from agent.host import Host
from agent.service.events import EventLog
from agent.service.flight_recorder import FlightRecorder
from agent.service.tracked_host import Progress, TrackedHost

__all__ = ["ImageBusy", "ImageCapture", "ImageError"]


class ImageBusy(Exception):
    """A node image is already being recorded."""


class ImageError(Exception):
    """The node image could not be recorded; the message says why."""


class ImageCapture:
    def __init__(self, settings: AgentSettings, host_factory: Callable[[], Host], firmware_lock: threading.Lock,
                 events: EventLog, recorder: FlightRecorder | None, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._host_factory = host_factory
        self._fw_lock = firmware_lock
        self.events = events
        self.recorder = recorder
        self.clock = clock

    def record(self, reason: str, incident: str | None, node: str,
               hung: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, str]:
        """Record the image (blocking: run it in a worker thread); returns (path, bundle name)."""
        from agent.capture.replay import RecordError, record_image

        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{node}-{stamp}")
        work = tempfile.mkdtemp(prefix="railscope-image-")
        try:
            out = os.path.join(work, name)
            host = TrackedHost(self._host_factory(), Progress(), self._fw_lock, hung=hung)
            try:
                record_image(host, out, node=node, cluster=self.settings.cluster, incident=incident,
                             reason=reason, events=self.events.to_json()["events"], cfg=self.settings.read)
            finally:
                host.close()
            if self.recorder is not None:
                _add_generated(out, "recorder.jsonl", self.recorder.to_jsonl().encode())
            path = os.path.join(work, name + ".tar.gz")
            with tarfile.open(path, "w:gz", compresslevel=6) as tf:
                tf.add(out, arcname=name)
            shutil.rmtree(out, ignore_errors=True)
            if os.path.getsize(path) > self.settings.image_max_bytes:
                raise ImageError(f"the node image is larger than {self.settings.image_max_bytes} bytes")
            return path, name
        except RecordError as exc:
            shutil.rmtree(work, ignore_errors=True)
            raise ImageError(str(exc)) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    @staticmethod
    def discard(path: str) -> None:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _add_generated(image: str, rel: str, data: bytes) -> None:
    """Write a generated file into a recorded image and list it in its manifest."""
    with open(os.path.join(image, rel), "wb") as fh:
        fh.write(data)
    mpath = os.path.join(image, "manifest.json")
    with open(mpath, encoding="utf-8") as fh:
        manifest = json.load(fh)
    items = [it for it in manifest.get("items", []) if it.get("path") != rel]
    items.append({"path": rel, "kind": "generated", "argv": None, "rc": None, "duration_s": 0.0,
                  "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "truncated": False,
                  "timed_out": False, "skipped": False})
    manifest["items"] = sorted(items, key=lambda it: str(it.get("path")))
    with open(mpath, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
