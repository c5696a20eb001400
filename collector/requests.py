"""Capture requests: what the collector asks an agent to capture, and where requests live.

A request names a fixed, versioned capture plan and its parameters — never a command: the agent
maps the plan name to code it ships, so a collector (or whoever can write to the bucket) cannot make
a privileged pod run anything new. A request expires; its id is the bundle id of
``proto.keys.bundle_id(incident, node, plan)``, so a request captured twice (an agent restarted
mid-capture) is stored once, and posting the same alert group again finds the request it made.

Requests live in the object store (``<prefix>/_requests/<node>/<id>.json``; ``_`` can start no
cluster name, so they never mix with bundles), so every collector replica sees every request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from proto.keys import KeyPartError, bundle_id, check_part

__all__ = ["PLANS", "REQUEST_SCHEMA", "CaptureRequest", "PlanSpec", "RequestError", "check_params",
           "plan_ref", "request_for"]

REQUEST_SCHEMA = "railscope.request/v1"
#: The directory of requests below the store prefix.
REQUESTS_DIR = "_requests"
MAX_REQUEST_BYTES = 16 * 1024


class RequestError(ValueError):
    """A request that cannot be made or read; the message is one line for a person."""


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """A capture plan the agents ship: its version and the parameters a request may set."""

    name: str
    version: int
    #: parameter -> (type, default)
    params: Mapping[str, tuple[type, Any]] = field(default_factory=dict)


#: The plans a request may name. ``node-bundle`` is the full node image of DESIGN §7 (the replay
#: plug-in plus every plug-in for people); entering pod network namespaces stays off unless asked.
PLANS: dict[str, PlanSpec] = {
    "node-bundle": PlanSpec("node-bundle", 1, {"pod_netns": (bool, False), "redact": (bool, False)}),
}
DEFAULT_PLAN = "node-bundle"


def check_params(plan: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full parameter set of ``plan`` (defaults filled in), or :class:`RequestError`."""
    spec = PLANS.get(plan) if isinstance(plan, str) else None
    if spec is None:
        raise RequestError(f"unknown capture plan {str(plan)[:40]!r} (known: {', '.join(sorted(PLANS))})")
    params = dict(params or {})
    out = {}
    for name, (kind, default) in spec.params.items():
        value = params.pop(name, default)
        if type(value) is not kind:
            raise RequestError(f"plan {plan} parameter {name} must be {kind.__name__}")
        out[name] = value
    if params:
        raise RequestError(f"plan {plan} has no parameter {sorted(params)[0][:40]!r}")
    return out


def plan_ref(plan: str, params: Mapping[str, Any]) -> str:
    """The plan as the bundle id sees it: name, version, and every parameter away from its default."""
    spec = PLANS[plan]
    extra = "".join(f";{k}={json.dumps(v)}" for k, v in sorted(params.items()) if v != spec.params[k][1])
    return f"{spec.name}/v{spec.version}{extra}"


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    id: str
    incident: str
    node: str
    plan: str
    plan_version: int
    params: Mapping[str, Any]
    created: int
    expires: int
    #: what asked: "alert", "operator" or "local" (an agent's own trigger)
    source: str = "alert"
    alertname: str = ""
    severity: str = ""
    state: str = "pending"  # pending | done
    #: the stored bundle's key (``<cluster>/<date>/<incident>/<name>``) once done
    bundle: str | None = None
    done_at: int | None = None

    def expired(self, now: float) -> bool:
        return self.state == "pending" and now >= self.expires

    def in_flight(self, now: float) -> bool:
        return self.state == "pending" and now < self.expires

    def done(self, bundle: str, now: float) -> CaptureRequest:
        return replace(self, state="done", bundle=bundle, done_at=int(now))

    def to_json(self) -> dict[str, Any]:
        return {"schema": REQUEST_SCHEMA, "id": self.id, "incident": self.incident, "node": self.node,
                "plan": self.plan, "plan_version": self.plan_version, "params": dict(self.params),
                "created": self.created, "expires": self.expires, "source": self.source,
                "alertname": self.alertname, "severity": self.severity, "state": self.state,
                "bundle": self.bundle, "done_at": self.done_at}

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def loads(cls, data: bytes) -> CaptureRequest:
        """A stored request, validated: anything in the bucket is checked before an agent sees it."""
        if len(data) > MAX_REQUEST_BYTES:
            raise RequestError("a stored request larger than 16 KiB")
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise RequestError(f"a stored request is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("schema") != REQUEST_SCHEMA:
            raise RequestError(f"not a {REQUEST_SCHEMA} document")
        try:
            incident = check_part("incident", doc.get("incident"))
            node = check_part("node", doc.get("node"))
            plan = doc.get("plan")
            params = check_params(plan, doc.get("params"))
        except KeyPartError as exc:
            raise RequestError(str(exc)) from None
        spec = PLANS[plan]
        if doc.get("plan_version") != spec.version:
            raise RequestError(f"plan {plan} version {doc.get('plan_version')!r} is not {spec.version}")
        rid = bundle_id(incident, node, plan_ref(plan, params))
        if doc.get("id") != rid:
            raise RequestError("the request id is not the bundle id of its incident, node and plan")
        state = doc.get("state")
        if state not in ("pending", "done"):
            raise RequestError(f"request state {str(state)[:20]!r}")
        ints = {}
        for name in ("created", "expires"):
            v = doc.get(name)
            if type(v) is not int or v < 0:
                raise RequestError(f"request {name} must be Unix seconds")
            ints[name] = v
        bundle = doc.get("bundle")
        if bundle is not None and (not isinstance(bundle, str) or len(bundle) > 512):
            raise RequestError("request bundle must be a key")
        done_at = doc.get("done_at")
        strs = {k: doc.get(k) if isinstance(doc.get(k), str) else "" for k in ("source", "alertname", "severity")}
        return cls(id=rid, incident=incident, node=node, plan=plan, plan_version=spec.version, params=params,
                   created=ints["created"], expires=ints["expires"], source=strs["source"][:32] or "alert",
                   alertname=strs["alertname"][:200], severity=strs["severity"][:32], state=state,
                   bundle=bundle, done_at=done_at if type(done_at) is int else None)

    def object_key(self) -> str:
        """The key below the store prefix."""
        return f"{REQUESTS_DIR}/{self.node}/{self.id}.json"


def request_for(incident: str, node: str, *, now: float, ttl_s: float, plan: str = DEFAULT_PLAN,
                params: Mapping[str, Any] | None = None, source: str = "alert", alertname: str = "",
                severity: str = "") -> CaptureRequest:
    """A new pending request; :class:`KeyPartError` / :class:`RequestError` for a bad part or plan."""
    check_part("incident", incident)
    check_part("node", node)
    full = check_params(plan, params)
    return CaptureRequest(id=bundle_id(incident, node, plan_ref(plan, full)), incident=incident, node=node,
                          plan=plan, plan_version=PLANS[plan].version, params=full, created=int(now),
                          expires=int(now + ttl_s), source=source, alertname=alertname[:200],
                          severity=severity[:32])
