"""One capture job (docs/design.md §7, §9): the single place a trigger becomes a capture.

A capture starts from one of four triggers:

- ``cli``: ``railscope capture`` on the node (streamed to the collector with ``--collector``);
- ``event``: a detector event of a ``--capture-on`` code, in the daemon, into the node spool;
- ``request``: a collector's capture request, pulled by the daemon (agent/service/pull.py);
- ``image``: an operator's ``/v1/image`` on the daemon's data endpoint.

A :class:`Job` holds what the trigger says (node, cluster, incident, reason, the plan's parameters,
the bundle's time); from it come the bundle id, the bundle name, the upload ``hello`` and the
runner's :class:`CaptureParams`. In the daemon, :class:`Shared` adds the state every capture of it
shares — the firmware gate its samplers hold, the reads stuck in them, its events and flight recorder
— so a capture of any trigger takes the same locks and skips the same stuck reads.

**Plan** has one meaning here and everywhere: what a capture runs, named as a capture request names
it (``node-bundle/v1``, with the parameters off their default: ``node-bundle/v1;pod_netns=true``). A
bundle id is ``proto.keys.bundle_id(incident, node, plan)``: the same capture of the same node for
the same incident is one object to the collector, whoever asked for it. (The step lists a capture
runs are its plug-ins: ``agent.capture.plugins``, each a ``agent.capture.plugin.Plugin``.)
"""

from __future__ import annotations

import calendar
import dataclasses
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent import __version__
from agent.capture.runner import CaptureParams
from agent.config import ReadConfig, expectations_to_json
from agent.host.firmware import FirmwareGate
from proto.frames import Hello
from proto.keys import KeyPartError, bundle_id
from proto.requests import DEFAULT_PLAN, PLANS
from proto.requests import plan_ref as requests_plan_ref

__all__ = ["DEFAULT_CLUSTER", "Job", "Shared", "event_incident", "event_incident_time", "key_part", "plan_ref"]

#: the cluster of a capture that names none (a key part of the collector's)
DEFAULT_CLUSTER = "default"

_KEY_BAD = re.compile(r"[^a-z0-9._-]")


def key_part(text: str) -> str:
    """``text`` in the collector's key alphabet (an event's incident, a node name in a bundle id)."""
    return _KEY_BAD.sub("-", text.lower()).strip("-.")[:63] or "node"


def plan_ref(params: Mapping[str, Any] | None = None) -> str:
    """The plan a capture runs with ``params`` (``pod_netns``, ``redact``), as a capture request names
    it (``node-bundle/v1;pod_netns=true``): ``proto.requests``' default plan."""
    defaults = {k: default for k, (_kind, default) in PLANS[DEFAULT_PLAN].params.items()}
    return requests_plan_ref(DEFAULT_PLAN, {**defaults, **(params or {})})


def _stamp(ts: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ts))


_EVENT_STAMP = re.compile(r"-(\d{8}t\d{6}z)$")


def event_incident(code: str, now: float) -> str:
    """The incident of an event capture: ``<code>-<yyyymmddThhmmssZ>`` in the key alphabet."""
    return key_part(f"{code}-{_stamp(now)}")


def event_incident_time(incident: str, code: str) -> float | None:
    """When the event capture of ``code`` whose incident is ``incident`` (:func:`event_incident`) was
    asked for, unix s; None for an incident of anything else."""
    if not incident.startswith(code.lower() + "-"):
        return None
    m = _EVENT_STAMP.search(incident)
    if m is None:
        return None
    return float(calendar.timegm(time.strptime(m.group(1).upper(), "%Y%m%dT%H%M%SZ")))


@dataclass(frozen=True)
class Shared:
    """The daemon's state every capture of it shares."""

    #: the firmware gate the samplers hold
    gate: FirmwareGate | None = None
    #: (tool, device) of reads stuck in the daemon's samplers, and firmware reads that hung in its
    #: earlier captures: never started again
    hung_tools: frozenset[tuple[str, str]] = frozenset()
    hung_firmware: frozenset[tuple[str, str]] = frozenset()
    events: list[dict[str, Any]] | None = None
    recorder_jsonl: Callable[[], bytes] | None = None


@dataclass(frozen=True)
class Job:
    trigger: str  # cli | event | request | image
    node: str | None
    reason: str
    cluster: str | None = None
    incident: str | None = None
    #: the request's id (a function of incident, node and plan), else derived from them when the
    #: capture belongs to an incident, else None (a random id)
    bundle_id: str | None = None
    #: the bundle's time (a request's creation: the same request captured again is the same bundle)
    created: float | None = None
    pod_netns: bool = False
    #: the plan's ``redact``: pseudonyms with ``redact_key`` (HMAC), else secrets only
    redact: bool = False
    redact_key: bytes | None = None
    deadline_s: float = 300.0
    parallel: int = 4
    recorder_gap_s: float = 10.0
    cfg: ReadConfig = dataclasses.field(default_factory=ReadConfig)
    events: list[dict[str, Any]] | None = None
    recorder_jsonl: Callable[[], bytes] | None = None
    #: the judging expectations in force where it runs (``agent.config.expectations_to_json``): a
    #: replay of the bundle judges as the agent did
    expectations: dict[str, Any] | None = None
    #: the manifest's first notes (an event capture's wait for the links to settle)
    notes: tuple[str, ...] = ()

    # -- triggers ---------------------------------------------------------------------------------
    @classmethod
    def for_event(cls, code: str, what: str, node: str, settings: Any, now: float) -> Job:
        """A detector event of a ``--capture-on`` code: its own incident, ``<code>-<time>``."""
        return cls.in_incident("event", node, f"event {code}: {what}", event_incident(code, now), settings)

    @classmethod
    def for_image(cls, reason: str, incident: str | None, node: str, settings: Any) -> Job:
        """An operator's ``/v1/image``."""
        return cls.in_incident("image", node, reason, incident, settings)

    @classmethod
    def in_incident(cls, trigger: str, node: str, reason: str, incident: str | None, settings: Any) -> Job:
        bid = None
        if incident:
            try:
                # The collector's id of this capture: a second upload of it is a duplicate, not a copy.
                bid = bundle_id(incident, key_part(node), plan_ref())
            except KeyPartError:
                bid = None
        return cls(trigger, node, reason, cluster=settings.cluster, incident=incident, bundle_id=bid,
                   deadline_s=settings.capture_deadline_s, cfg=settings.read,
                   expectations=expectations_to_json(settings.expectations))

    @classmethod
    def for_request(cls, req: Any, settings: Any, redact_key: bytes | None = None) -> Job:
        """A collector's request (``proto.requests.CaptureRequest``): its id, incident and time."""
        return cls("request", req.node, f"capture request {req.id} ({req.alertname or req.source or 'requested'})",
                   cluster=settings.cluster, incident=req.incident, bundle_id=req.id, created=req.created,
                   pod_netns=bool(req.params.get("pod_netns")), redact=bool(req.params.get("redact")),
                   redact_key=redact_key, deadline_s=settings.capture_deadline_s, cfg=settings.read,
                   expectations=expectations_to_json(settings.expectations))

    def for_upload(self, hostname: str, now: float) -> Job:
        """The CLI's capture streamed to a collector: every key part the collector needs, checked
        (``KeyPartError``); outside any incident, an incident of its own (``manual-<time>``). Its start
        time is in the id (``<plan>@<time in ms>``): a second run is a bundle of its own, never a 409 — even
        one started within the same second (``--recorder-gap 0`` captures in under one)."""
        from proto.keys import check_part

        node = check_part("node", (self.node or hostname).lower())
        incident = check_part("incident", self.incident or time.strftime("manual-%Y%m%d-%H%M%S", time.gmtime(now)))
        cluster = check_part("cluster", self.cluster or DEFAULT_CLUSTER)
        return dataclasses.replace(self, node=node, incident=incident, cluster=cluster, created=now,
                                   bundle_id=bundle_id(incident, node, f"{self.plan}@{int(now * 1000)}"))

    # -- what follows from it -----------------------------------------------------------------------
    @property
    def plan(self) -> str:
        return plan_ref({"pod_netns": self.pod_netns, "redact": self.redact})

    @property
    def name(self) -> str | None:
        """The bundle's name when the trigger fixes it (a request: its node and time), else None (the
        runner names it after the node and the capture's start)."""
        if self.trigger == "request" and self.node and self.created is not None:
            return f"{self.node}-{_stamp(self.created)}"
        return None

    def params(self, shared: Shared | None = None) -> CaptureParams:
        """The runner's parameters; in the daemon, with its ``shared`` state."""
        sh = shared or Shared()
        events, recorder = (sh.events, sh.recorder_jsonl) if shared is not None else (self.events, self.recorder_jsonl)
        hung = sh.hung_tools
        skip = frozenset({dev for _tool, dev in hung if dev} | {dev for _src, dev in sh.hung_firmware if dev})
        return CaptureParams(
            node=self.node, cluster=self.cluster, incident=self.incident, reason=self.reason,
            redact_key=self.redact_key, deadline_s=self.deadline_s, parallel=self.parallel,
            recorder_gap_s=self.recorder_gap_s, cfg=self.cfg, events=events, recorder_jsonl=recorder,
            skip_firmware=skip, hung_tools=hung, firmware_gate=sh.gate, pod_netns=self.pod_netns,
            bundle_id=self.bundle_id, name=self.name, expectations=self.expectations, notes=self.notes)

    def hello(self, *, bundle: str | None = None, node: str | None = None, cluster: str | None = None,
              created: float | None = None, reason: str | None = None) -> Hello:
        """The upload's first frame; what the capture itself decided (its id, node, start) overrides."""
        when = created if created is not None else self.created
        return Hello(bundle=bundle or self.bundle_id or "", node=node or self.node or "",
                     cluster=cluster if cluster is not None else self.cluster or "",
                     incident=self.incident or "", reason=self.reason if reason is None else reason,
                     agent=__version__, created=int(when if when is not None else time.time()), plan=self.plan)
