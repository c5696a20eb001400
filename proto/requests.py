"""Capture requests (``proto/SPEC.md`` "Capture requests"): the one definition both sides use.

A request names a fixed, versioned capture plan and its parameters — never a command: the agent maps
the plan name to code it ships, so a collector (or whoever can write to the bucket) cannot make a
privileged pod run anything new. Its id is the bundle id of ``bundle_id(incident, node, plan_ref)``,
so a request captured twice is stored once. The collector writes a request as :meth:`CaptureRequest.dumps`
below ``_requests/<cluster>/<node>/<id>.json``; the agent reads the same document from ``GET /v1/requests``.
Both parse it with :meth:`CaptureRequest.from_json`, which checks every field, so what the bucket holds
is never trusted by either side.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from proto.keys import KeyPartError, bundle_id, check_part

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_PLAN",
    "MAX_POLL_WAIT_S",
    "MAX_REQUEST_BYTES",
    "MAX_SERVED_PER_POLL",
    "MAX_TAKES",
    "PLANS",
    "POLL_WAIT_S",
    "REQUESTS_DIR",
    "REQUEST_SCHEMA",
    "CaptureRequest",
    "PlanSpec",
    "RequestError",
    "check_params",
    "object_key",
    "plan_ref",
    "request_for",
    "take_id",
]

REQUEST_SCHEMA = "railscope.request/v1"
#: The cluster of a capture that names none (the agent's bundles without ``--cluster``, the requests
#: and tokens of a collector without ``--cluster``), and the cluster of a request stored before
#: requests named theirs.
DEFAULT_CLUSTER = "default"
#: The directory of requests below the store prefix (``_`` starts no cluster name: never mixed with bundles).
REQUESTS_DIR = "_requests"
MAX_REQUEST_BYTES = 16 * 1024
#: Bounds on the free-text fields: longer values are cut, never refused (they are labels, not keys).
_TEXT = {"source": 32, "alertname": 200, "severity": 32}
MAX_BUNDLE_KEY = 512
#: The longest a poll is held (under the 60 s idle timeout of common proxies and load balancers),
#: and what an agent asks for.
MAX_POLL_WAIT_S = 54
POLL_WAIT_S = 50
#: The most requests one poll's answer holds. A collector serves a node its oldest pending request,
#: one at a time; the rest is room, not a promise. An answer with more is no collector's: refused
#: whole by the agent, before any request is built from it.
MAX_SERVED_PER_POLL = 8


class RequestError(ValueError):
    """A request that cannot be made or read; the message is one line for a person.

    ``code`` is the SPEC's word for the fault (``schema``, ``plan``, ``params``, ``key_part``, ``id``,
    ``state``, ``time``, ``too_large``, ``not_json``, ``node``), the one the vectors name.
    """

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """A capture plan the agents ship: its version and the parameters a request may set."""

    name: str
    version: int
    #: parameter -> (type, default)
    params: Mapping[str, tuple[type, Any]] = field(default_factory=dict)


#: The plans a request may name. ``node-bundle`` is the full node image of docs/design.md §7 (the replay
#: plug-in plus every plug-in for people); entering pod network namespaces stays off unless asked.
PLANS: dict[str, PlanSpec] = {
    "node-bundle": PlanSpec("node-bundle", 1, {"pod_netns": (bool, False), "redact": (bool, False)}),
}
DEFAULT_PLAN = "node-bundle"


def check_params(plan: object, params: object, plans: Mapping[str, PlanSpec] = PLANS) -> dict[str, Any]:
    """The full parameter set of ``plan`` (defaults filled in), or :class:`RequestError`."""
    spec = plans.get(plan) if isinstance(plan, str) else None
    if spec is None:
        raise RequestError(f"unknown capture plan {str(plan)[:40]!r} (known: {', '.join(sorted(plans))})", "plan")
    if params is not None and not isinstance(params, Mapping):
        raise RequestError(f"plan {spec.name} parameters must be an object", "params")
    given = dict(params or {})
    out = {}
    for name, (kind, default) in spec.params.items():
        value = given.pop(name, default)
        # type() and not isinstance(): True is an int, and 1 is no bool.
        if type(value) is not kind:
            raise RequestError(f"plan {spec.name} parameter {name} must be {kind.__name__}", "params")
        out[name] = value
    if given:
        raise RequestError(f"plan {spec.name} has no parameter {str(sorted(map(str, given))[0])[:40]!r}", "params")
    return out


def plan_ref(plan: str, params: Mapping[str, Any], plans: Mapping[str, PlanSpec] = PLANS) -> str:
    """The plan as the bundle id sees it: ``<name>/v<version>`` then ``;<key>=<JSON value>`` for every
    parameter away from its default, keys sorted (``node-bundle/v1;pod_netns=true``)."""
    spec = plans[plan]
    extra = "".join(f";{k}={json.dumps(v)}" for k, v in sorted(params.items()) if v != spec.params[k][1])
    return f"{spec.name}/v{spec.version}{extra}"


#: captures of one node one incident may ask for (``CaptureRequest.take``)
MAX_TAKES = 20


def take_id(incident: str, node: str, ref: str, take: int = 1) -> str:
    """The request's (and its bundle's) id: ``bundle_id(incident, node, plan ref)`` for the first take,
    the plan ref with ``#take<n>`` after it for a later one."""
    return bundle_id(incident, node, ref if take == 1 else f"{ref}#take{take}")


def object_key(node: str, rid: str, cluster: str = "") -> str:
    """Where the request ``rid`` of ``node`` in ``cluster`` lives below the store prefix:
    ``_requests/<cluster>/<node>/<id>.json``; a request that names no cluster (stored before requests
    named theirs) lives at ``_requests/<node>/<id>.json``, one level up, so the two never meet."""
    where = f"{check_part('cluster', cluster)}/" if cluster else ""
    return f"{REQUESTS_DIR}/{where}{check_part('node', node)}/{check_part('request id', rid)}.json"


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
    #: the n-th capture of this node for this incident (an operator asking again once the first was
    #: stored): part of the id from the second on, so each take is a bundle of its own
    take: int = 1
    #: the cluster whose node must capture (a key part); empty in a request stored before requests
    #: named their cluster: it is then the reader's default cluster (:meth:`in_cluster`)
    cluster: str = ""

    def in_cluster(self, default: str = DEFAULT_CLUSTER) -> str:
        """The cluster this request is for: its own, or ``default`` for one that names none."""
        return self.cluster or default

    @property
    def plan_ref(self) -> str:
        """The plan and its parameters as the bundle id (and the upload ``hello``'s ``plan``) name them."""
        return plan_ref(self.plan, self.params)

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
                "bundle": self.bundle, "done_at": self.done_at, **({"take": self.take} if self.take > 1 else {}),
                **({"cluster": self.cluster} if self.cluster else {})}

    def dumps(self) -> bytes:
        """The canonical encoding (SPEC: keys sorted, no spaces, non-ASCII escaped)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def loads(cls, data: bytes) -> CaptureRequest:
        """A stored request, validated: anything in the bucket is checked before an agent sees it."""
        if len(data) > MAX_REQUEST_BYTES:
            raise RequestError(f"a request larger than {MAX_REQUEST_BYTES // 1024} KiB", "too_large")
        try:
            doc = json.loads(data)
        except RecursionError:
            # 16 KiB of '[' nests past the interpreter's recursion limit: bad input, not a crash.
            raise RequestError("a request that nests too deep", "not_json") from None
        except ValueError as exc:
            raise RequestError(f"a request that is not JSON: {exc}", "not_json") from None
        return cls.from_json(doc)

    @classmethod
    def from_json(cls, doc: object) -> CaptureRequest:
        """A request document (stored, or in a poll's answer), every field checked, or :class:`RequestError`."""
        if not isinstance(doc, dict) or doc.get("schema") != REQUEST_SCHEMA:
            raise RequestError(f"not a {REQUEST_SCHEMA} document", "schema")
        try:
            incident = check_part("incident", doc.get("incident"))
            node = check_part("node", doc.get("node"))
            cluster = check_part("cluster", doc["cluster"]) if "cluster" in doc else ""
        except KeyPartError as exc:
            raise RequestError(str(exc), "key_part") from None
        plan = doc.get("plan")
        params = check_params(plan, doc.get("params"))
        spec = PLANS[plan]  # type: ignore[index]  # check_params accepted it
        if doc.get("plan_version") != spec.version or type(doc.get("plan_version")) is not int:
            raise RequestError(f"plan {spec.name} version {str(doc.get('plan_version'))[:20]!r} is not "
                               f"{spec.version}", "plan")
        take = doc.get("take", 1)
        if type(take) is not int or not 1 <= take <= MAX_TAKES:
            raise RequestError(f"request take {str(take)[:20]!r} is not 1-{MAX_TAKES}", "id")
        rid = take_id(incident, node, plan_ref(spec.name, params), take)
        if doc.get("id") != rid:
            raise RequestError("the request id is not the bundle id of its incident, node and plan", "id")
        state = doc.get("state")
        if state not in ("pending", "done"):
            raise RequestError(f"request state {str(state)[:20]!r}", "state")
        ints = {}
        for name in ("created", "expires"):
            v = doc.get(name)
            if type(v) is not int or v < 0:
                raise RequestError(f"request {name} must be Unix seconds", "time")
            ints[name] = v
        bundle = doc.get("bundle")
        if bundle is not None and (not isinstance(bundle, str) or len(bundle) > MAX_BUNDLE_KEY):
            raise RequestError("request bundle must be a key", "state")
        done_at = doc.get("done_at")
        text = {k: doc[k][:n] if isinstance(doc.get(k), str) else "" for k, n in _TEXT.items()}
        return cls(id=rid, incident=incident, node=node, plan=spec.name, plan_version=spec.version, params=params,
                   created=ints["created"], expires=ints["expires"], source=text["source"] or "alert",
                   alertname=text["alertname"], severity=text["severity"], state=state,
                   bundle=bundle, done_at=done_at if type(done_at) is int else None, take=take,
                   cluster=cluster)

    def object_key(self) -> str:
        """The key below the store prefix."""
        return object_key(self.node, self.id, self.cluster)


def request_for(incident: str, node: str, *, now: float, ttl_s: float, plan: str = DEFAULT_PLAN,
                params: Mapping[str, Any] | None = None, source: str = "alert", alertname: str = "",
                severity: str = "", cluster: str = DEFAULT_CLUSTER) -> CaptureRequest:
    """A new pending request for ``node`` of ``cluster``; :class:`KeyPartError` / :class:`RequestError`
    for a bad part or plan."""
    check_part("incident", incident)
    check_part("node", node)
    check_part("cluster", cluster)
    full = check_params(plan, params)
    return CaptureRequest(id=bundle_id(incident, node, plan_ref(plan, full)), incident=incident, node=node,
                          plan=plan, plan_version=PLANS[plan].version, params=full, created=int(now),
                          expires=int(now + ttl_s), source=source[:_TEXT["source"]],
                          alertname=alertname[:_TEXT["alertname"]], severity=severity[:_TEXT["severity"]],
                          cluster=cluster)
