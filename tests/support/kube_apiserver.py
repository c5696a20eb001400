"""A Kubernetes API server stand-in for the tests (aiohttp): read-only, counted, faithful where clients look.

No kube-apiserver runs on the test machines, so this serves what railscope's cluster side reads, the way
kube-apiserver serves it (API concepts: https://kubernetes.io/docs/reference/using-api/api-concepts/):

- discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``;
  the custom kinds come from the CustomResourceDefinitions loaded into it, so a cluster without an operator's
  CRD has no such path (404), as a real one;
- list with ``limit`` / ``continue`` (the continue token holds the list's resourceVersion; a token older than
  the last compaction is ``410 Gone``, reason ``Expired``), ``resourceVersion`` on the list;
- watch (``?watch=1``) from a ``resourceVersion``: the events after it, newline-delimited JSON, ``BOOKMARK``
  events when ``allowWatchBookmarks=true``, ``timeoutSeconds``; a resourceVersion older than the last compaction
  answers one ``ERROR`` event whose object is a ``Status`` of code 410 (the watch cache's answer), and
  :meth:`KubeApi.expire_watches` ends every open watch that way;
- label selectors (equality and set-based) everywhere; field selectors ``metadata.name`` /
  ``metadata.namespace`` everywhere and the few fields the real server indexes (``spec.nodeName`` and
  ``status.phase`` of pods, ``involvedObject.*`` / ``reason`` / ``type`` of events); any other field is 400;
- bearer tokens, compared on every request against a token file that may be rotated under the server
  (:meth:`KubeApi.rotate_token`): the old token is refused with 401 at once;
- every request counted (:attr:`KubeApi.requests`, by verb and resource); every write refused (403 on a
  resource path, as RBAC would for a read-only ServiceAccount; 405 elsewhere) and counted as ``write``, but
  one: the create (POST) and update (PUT) of a ``coordination.k8s.io/v1`` Lease, the collector's leader
  election, named in :attr:`KubeApi.lease_names` (the chart's Role), counted as ``lease``; an update whose
  ``metadata.resourceVersion`` is not the stored one is ``409 Conflict``, a create of an existing name
  ``409 AlreadyExists``, as the real server answers them;
- ``pods/<name>/log`` (``tailLines``, ``limitBytes``, ``container``): the text of :attr:`KubeApi.logs`, 403
  where ``"pods/log"`` is in :attr:`KubeApi.forbidden`.

Objects are held as serialized JSON (an 80,000-NicDevice cluster must fit beside the client under test).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import contextlib
import itertools
import json
import re
import ssl
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["Kind", "KubeApi"]


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    #: Field selectors this kind's REST storage accepts beyond metadata.name / metadata.namespace.
    fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN = (
    Kind("", "v1", "Node", "nodes", False, "node", ("spec.unschedulable",)),
    Kind("", "v1", "Pod", "pods", True, "pod", ("spec.nodeName", "status.phase", "spec.restartPolicy",
                                                 "spec.schedulerName", "spec.serviceAccountName", "status.podIP",
                                                 "status.nominatedNodeName")),
    Kind("", "v1", "Namespace", "namespaces", False, "namespace", ("status.phase",)),
    Kind("", "v1", "Event", "events", True, "event", (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
        "reportingComponent", "source", "type")),
    Kind("", "v1", "Secret", "secrets", True, "secret", ("type",)),
    Kind("apps", "v1", "DaemonSet", "daemonsets", True, "daemonset"),
    Kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
         "customresourcedefinition"),
    Kind("coordination.k8s.io", "v1", "Lease", "leases", True, "lease"),
)
_LEASE = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?")


class _Gone(Exception):
    pass


class _BadRequest(Exception):
    pass


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(obj, separators=(",", ":")).encode(),
                        content_type="application/json")


# -- selectors (k8s.io/apimachinery/pkg/labels and fields) ------------------------------------------------

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:\b(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_top(sel: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def parse_label_selector(sel: str):  # -> callable(labels) -> bool, or None for no selector
    if not (sel or "").strip():
        return None
    reqs = []
    for term in _split_top(sel or ""):
        m = re.match(r"^\s*([A-Za-z0-9._/-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$", term)
        if m:
            key, op, val = m.groups()
            reqs.append((key, "ne" if op == "!=" else "eq", {val}))
            continue
        m = _SET_RE.match(term)
        if not m:
            raise _BadRequest(f"unable to parse requirement: {term!r}")
        neg, key, op, vals = m.groups()
        if op:
            reqs.append((key, op, {v.strip() for v in vals.split(",") if v.strip()}))
        else:
            reqs.append((key, "absent" if neg else "exists", set()))

    def match(labels: dict[str, str]) -> bool:
        for key, op, vals in reqs:
            has = key in labels
            if op == "eq" and not (has and labels[key] in vals):
                return False
            if op == "ne" and has and labels[key] in vals:
                return False
            if op == "in" and not (has and labels[key] in vals):
                return False
            if op == "notin" and has and labels[key] in vals:
                return False
            if op == "exists" and not has:
                return False
            if op == "absent" and has:
                return False
        return True

    return match


def _dig(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def parse_field_selector(sel: str, kind: Kind):
    if not (sel or "").strip():
        return None
    reqs = []
    for term in _split_top(sel or ""):
        m = re.match(r"^\s*([A-Za-z0-9._]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not m:
            raise _BadRequest(f"invalid selector: {term!r}")
        key, op, val = m.groups()
        if key not in ("metadata.name", "metadata.namespace", *kind.fields):
            raise _BadRequest(f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                              + "".join(f', "{f}"' for f in kind.fields))
        reqs.append((key, op != "!=", val))

    def match(obj: dict[str, Any]) -> bool:
        return all((_dig(obj, k) == v) == want for k, want, v in reqs)

    return match


# -- the store --------------------------------------------------------------------------------------------


@dataclass
class _Entry:
    rv: int
    ns: str
    name: str
    labels: dict[str, str]
    body: bytes  # the object's JSON
    fields: dict[str, str]  # the field-selector values


@dataclass
class _Store:
    kind: Kind
    objects: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    #: the keys in order, made again after a key is added or removed (a LIST pages through it)
    order: list[tuple[str, str]] | None = None
    #: (rv, type, entry) of every change, oldest first; cut at compaction.
    log: list[tuple[int, str, _Entry]] = field(default_factory=list)


class KubeApi:
    """The stand-in: load objects with :meth:`apply`, serve with :meth:`start`, read :attr:`requests`."""

    def __init__(self, *, token: str | None = "railscope-test-token", token_file: str | None = None,
                 bookmark_interval: float = 1.0, max_page: int = 500, minor: str = "31") -> None:
        self._token = token
        self._token_file = token_file
        self.bookmark_interval = bookmark_interval
        self.max_page = max_page
        self.minor = minor
        self._rv = itertools.count(1000)
        self.rv = 999
        self.compacted = 0  # a watch or continue token from before this resourceVersion is 410 Gone
        self._stores: dict[tuple[str, str, str], _Store] = {}
        for k in BUILTIN:
            self._stores[(k.group, k.version, k.plural)] = _Store(k)
        #: (verb, resource) -> count; verbs: discovery, get, list, watch, write, unauthorized, notfound.
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._watchers: set[asyncio.Queue[tuple[str, Any]]] = set()
        #: plurals this ServiceAccount may not read (RBAC): 403 on get, list and watch; "pods/log": no logs
        self.forbidden: set[str] = set()
        #: the Lease names this ServiceAccount may create and update (None: any); every other write is 403
        self.lease_names: set[str] | None = None
        #: (namespace, pod, container or "") -> the log text ``pods/<name>/log`` serves
        self.logs: dict[tuple[str, str, str], str] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- loading ------------------------------------------------------------------------------------------

    def _store_for(self, api_version: str, kind: str) -> _Store:
        group, _, version = api_version.rpartition("/")
        for (g, v, _p), st in self._stores.items():
            if g == group and v == version and st.kind.kind == kind:
                return st
        raise KeyError(f"no kind {kind} in {api_version} (load its CRD first)")

    def _register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        names = spec["names"]
        for ver in spec["versions"]:
            if not ver.get("served", True):
                continue
            key = (spec["group"], ver["name"], names["plural"])
            if key not in self._stores:
                self._stores[key] = _Store(Kind(spec["group"], ver["name"], names["kind"], names["plural"],
                                                spec["scope"] == "Namespaced", names.get("singular", "")))

    def apply(self, objs: Iterable[dict[str, Any]] | dict[str, Any]) -> list[dict[str, Any]]:
        """Create or replace objects (as a controller would: ``generation`` bumps when ``spec`` changes)."""
        if isinstance(objs, dict):
            objs = [objs]
        out = []
        for obj in objs:
            obj = json.loads(json.dumps(obj))
            if obj.get("kind") == "CustomResourceDefinition":
                self._register_crd(obj)
            st = self._store_for(obj["apiVersion"], obj["kind"])
            md = obj.setdefault("metadata", {})
            ns = md.get("namespace", "") if st.kind.namespaced else ""
            if st.kind.namespaced and not ns:
                ns = md["namespace"] = "default"
            old = st.objects.get((ns, md["name"]))
            md.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{st.kind.plural}/{ns}/{md['name']}")))
            md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            if "generation" not in md:
                md["generation"] = 1
                if old is not None:
                    prev = json.loads(old.body)
                    gen = prev["metadata"].get("generation", 1)
                    md["generation"] = gen + (1 if prev.get("spec") != obj.get("spec") else 0)
            rv = next(self._rv)
            self.rv = rv
            md["resourceVersion"] = str(rv)
            entry = _Entry(rv, ns, md["name"], dict(md.get("labels") or {}),
                           json.dumps(obj, separators=(",", ":")).encode(),
                           {f: _dig(obj, f) for f in st.kind.fields})
            if old is None:
                st.order = None
            st.objects[(ns, md["name"])] = entry
            st.log.append((rv, "MODIFIED" if old else "ADDED", entry))
            out.append(obj)
        self._wake()
        return out

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> None:
        st = self._store_for(api_version, kind)
        entry = st.objects.pop((namespace if st.kind.namespaced else "", name))
        st.order = None
        rv = next(self._rv)
        self.rv = rv
        obj = json.loads(entry.body)
        obj["metadata"]["resourceVersion"] = str(rv)
        st.log.append((rv, "DELETED", _Entry(rv, entry.ns, entry.name, entry.labels,
                                              json.dumps(obj).encode(), entry.fields)))
        self._wake()

    def compact(self) -> None:
        """Forget the change history up to now (etcd compaction past every revision a client holds): a watch
        from any resourceVersion held so far, and every continue token, get 410 Gone."""
        self.compacted = self.rv + 1
        # A revision after the compaction (another object's write, in a real cluster): what a new LIST
        # reports from now on, and a watch may start from.
        self.rv = next(self._rv)
        for st in self._stores.values():
            st.log.clear()

    def expire_watches(self) -> None:
        """Compact, and end every open watch with an ERROR event of code 410 (what clients see after a
        long disconnect or an apiserver restart with a small watch cache)."""
        self.compact()
        for q in list(self._watchers):
            q.put_nowait(("gone", None))

    def drop_watches(self) -> None:
        """End every open watch without a word (a connection reset)."""
        for q in list(self._watchers):
            q.put_nowait(("close", None))

    def rotate_token(self, new: str) -> None:
        """A new token: written to the token file (as the kubelet does), the old one refused from now on."""
        self._token = new
        if self._token_file:
            with open(self._token_file + ".tmp", "w") as fh:
                fh.write(new)
            import os
            os.chmod(self._token_file + ".tmp", 0o600)
            os.replace(self._token_file + ".tmp", self._token_file)

    def _wake(self) -> None:
        for q in list(self._watchers):
            q.put_nowait(("wake", None))

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(n for (v, r), n in self.requests.items()
                   if (verb is None or v == verb) and (resource is None or r == resource))

    # -- serving ------------------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.url = f"{'https' if ssl_context else 'http'}://{host}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner:
            await self._runner.cleanup()

    def _authorized(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        return request.headers.get("Authorization", "") == f"Bearer {self._token}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if not self._authorized(request):
            self.requests[("unauthorized", path)] += 1
            return _json(_status(401, "Unauthorized", "Unauthorized"), 401)
        lease = _LEASE.fullmatch(path)
        if lease and request.method in ("POST", "PUT") and (request.method == "POST") == (lease[2] is None):
            return await self._lease_write(request, lease[1], lease[2])
        if request.method not in ("GET", "HEAD"):
            self.requests[("write", path)] += 1
            if path.startswith(("/api/", "/apis/")):
                return _json(_status(403, "Forbidden", f'{request.method.lower()} is forbidden: this ServiceAccount '
                                     "may get, list and watch only"), 403)
            return _json(_status(405, "MethodNotAllowed", "the server does not allow this method"), 405)
        try:
            return await self._get(request, path)
        except _BadRequest as exc:
            return _json(_status(400, "BadRequest", str(exc)), 400)
        except _Gone as exc:
            return _json(_status(410, "Expired", str(exc)), 410)

    async def _lease_write(self, request: web.Request, ns: str, name: str | None) -> web.Response:
        try:
            obj = json.loads(await request.read())
        except ValueError:
            return _json(_status(400, "BadRequest", "the body is not JSON"), 400)
        md = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(md, dict) or obj.get("kind") != "Lease" or not md.get("name"):
            return _json(_status(400, "BadRequest", "not a Lease"), 400)
        if name is not None and md["name"] != name:
            return _json(_status(400, "BadRequest", "the name in the body is not the path's"), 400)
        if self.lease_names is not None and md["name"] not in self.lease_names:
            self.requests[("write", request.path)] += 1
            return _json(_status(403, "Forbidden", f'leases "{md["name"]}" is forbidden: the role names others'), 403)
        self.requests[("lease", request.method)] += 1
        st = self._stores[("coordination.k8s.io", "v1", "leases")]
        old = st.objects.get((ns, md["name"]))
        if request.method == "POST" and old is not None:
            return _json(_status(409, "AlreadyExists", f'leases.coordination.k8s.io "{md["name"]}" already exists'),
                         409)
        if request.method == "PUT":
            if old is None:
                return _json(_status(404, "NotFound", f'leases.coordination.k8s.io "{md["name"]}" not found'), 404)
            if str(md.get("resourceVersion") or "") != str(old.rv):
                return _json(_status(409, "Conflict", "Operation cannot be fulfilled on leases.coordination.k8s.io "
                                     f'"{md["name"]}": the object has been modified; please apply your changes to '
                                     "the latest version and try again"), 409)
        md["namespace"] = ns
        md.pop("resourceVersion", None)
        md.pop("generation", None)
        (stored,) = self.apply(obj)
        return _json(stored, 201 if request.method == "POST" else 200)

    def _log(self, request: web.Request, ns: str, pod: str) -> web.Response:
        self.requests[("get", "pods/log")] += 1
        if "pods/log" in self.forbidden:
            return _json(_status(403, "Forbidden", f'pods "{pod}" is forbidden: User "system:serviceaccount:railscope:'
                                 f'railscope-collector" cannot get resource "pods/log" in API group "" in the '
                                 f'namespace "{ns}"'), 403)
        st = self._stores[("", "v1", "pods")]
        if (ns, pod) not in st.objects:
            return _json(_status(404, "NotFound", f'pods "{pod}" not found'), 404)
        text = self.logs.get((ns, pod, request.query.get("container", "")), "")
        if "tailLines" in request.query:
            n = int(request.query["tailLines"])
            text = "".join(text.splitlines(keepends=True)[-n:]) if n > 0 else ""
        data = text.encode()
        if "limitBytes" in request.query:
            data = data[:int(request.query["limitBytes"])]
        return web.Response(body=data, content_type="text/plain")

    def _groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for g, v, _p in self._stores:
            if g and v not in out.setdefault(g, []):
                out[g].append(v)
        return out

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        res = []
        for (g, v, _p), st in sorted(self._stores.items()):
            if g == group and v == version:
                k = st.kind
                res.append({"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced,
                            "kind": k.kind, "verbs": ["delete", "deletecollection", "get", "list", "patch",
                                                       "create", "update", "watch"]})
                if k.kind in ("Node", "Pod", "DaemonSet") or group not in ("", "apps"):
                    res.append({"name": f"{k.plural}/status", "singularName": "", "namespaced": k.namespaced,
                                "kind": k.kind, "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": res}

    async def _get(self, request: web.Request, path: str) -> web.StreamResponse:
        parts = [p for p in path.split("/") if p]
        if path == "/version":
            self.requests[("discovery", path)] += 1
            return _json({"major": "1", "minor": self.minor, "gitVersion": f"v1.{self.minor}.0",
                          "platform": "linux/amd64"})
        if path == "/api":
            self.requests[("discovery", path)] += 1
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]})
        if path == "/apis":
            self.requests[("discovery", path)] += 1
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                       "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                      for g, vs in sorted(self._groups().items())]
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if parts[:2] == ["api", "v1"] and len(parts) == 2:
            self.requests[("discovery", path)] += 1
            return _json(self._resource_list("", "v1"))
        if parts[0] == "apis" and len(parts) == 2:
            vs = self._groups().get(parts[1])
            if not vs:
                return self._notfound(path)
            self.requests[("discovery", path)] += 1
            return _json({"kind": "APIGroup", "apiVersion": "v1", "name": parts[1],
                          "versions": [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in vs],
                          "preferredVersion": {"groupVersion": f"{parts[1]}/{vs[0]}", "version": vs[0]}})
        if parts[0] == "apis" and len(parts) == 3:
            if parts[2] not in self._groups().get(parts[1], []):
                return self._notfound(path)
            self.requests[("discovery", path)] += 1
            return _json(self._resource_list(parts[1], parts[2]))
        # resource paths
        if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return self._notfound(path)
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if group == "" and ns is not None and len(rest) == 3 and rest[0] == "pods" and rest[2] == "log":
            return self._log(request, ns, rest[1])
        st = self._stores.get((group, version, rest[0]))
        if st is None or (ns is not None and not st.kind.namespaced) or len(rest) > 2:
            return self._notfound(path)
        if len(rest) == 2:
            self.requests[("get", st.kind.plural)] += 1
            entry = st.objects.get((ns or "", rest[1]))
            if entry is None:
                return _json(_status(404, "NotFound", f'{st.kind.plural} "{rest[1]}" not found'), 404)
            return web.Response(body=entry.body, content_type="application/json")
        if st.kind.plural in self.forbidden:
            self.requests[("forbidden", st.kind.plural)] += 1
            return _json(_status(403, "Forbidden", f'{st.kind.plural} is forbidden: User "system:serviceaccount:'
                                 f'railscope:railscope-collector" cannot list resource "{st.kind.plural}"'), 403)
        q = request.query
        lmatch = parse_label_selector(q.get("labelSelector", ""))
        fmatch = parse_field_selector(q.get("fieldSelector", ""), st.kind)
        if q.get("watch") in ("1", "true", "True"):
            self.requests[("watch", st.kind.plural)] += 1
            return await self._watch(request, st, ns, lmatch, fmatch)
        self.requests[("list", st.kind.plural)] += 1
        return self._list(st, ns, lmatch, fmatch, q)

    def _notfound(self, path: str) -> web.Response:
        self.requests[("notfound", path)] += 1
        return _json(_status(404, "NotFound", "the server could not find the requested resource"), 404)

    @staticmethod
    def _matches(entry: _Entry, ns: str | None, lmatch, fmatch) -> bool:
        if ns is not None and entry.ns != ns:
            return False
        if lmatch is not None and not lmatch(entry.labels):
            return False
        if fmatch is None:
            return True
        fake = {"metadata": {"name": entry.name, "namespace": entry.ns}}
        for k, v in entry.fields.items():
            cur = fake
            *head, last = k.split(".")
            for h in head:
                cur = cur.setdefault(h, {})
            cur[last] = v
        return fmatch(fake)

    def _list(self, st: _Store, ns: str | None, lmatch, fmatch, q) -> web.Response:
        limit = int(q.get("limit") or 0)
        start_after: tuple[str, str] | None = None
        list_rv = self.rv
        if q.get("continue"):
            try:
                tok = json.loads(base64.urlsafe_b64decode(q["continue"]))
                list_rv, start_after = int(tok["rv"]), (tok["ns"], tok["name"])
            except Exception:
                raise _BadRequest("continue key is not valid") from None
            if list_rv < self.compacted:
                raise _Gone("The provided continue parameter is too old to display a consistent list result. "
                            "You can start a new list without the continue parameter.")
        if st.order is None:
            st.order = sorted(st.objects)
        keys = st.order
        items: list[bytes] = []
        last = None
        more = False
        start = bisect.bisect_right(keys, start_after) if start_after is not None else 0
        for key in itertools.islice(keys, start, None):
            entry = st.objects.get(key)
            if entry is None or not self._matches(entry, ns, lmatch, fmatch):
                continue
            if limit and len(items) >= limit:
                more = True  # remainingItemCount is optional (and unset by the real server with selectors)
                break
            items.append(entry.body)
            last = key
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if more and last is not None:
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"rv": list_rv, "ns": last[0], "name": last[1]}).encode()).decode()
        head = json.dumps({"kind": f"{st.kind.kind}List", "apiVersion": st.kind.api_version,
                           "metadata": meta}, separators=(",", ":")).encode()
        body = head[:-1] + b',"items":[' + b",".join(items) + b"]}"
        return web.Response(body=body, content_type="application/json")

    async def _watch(self, request: web.Request, st: _Store, ns: str | None, lmatch, fmatch) -> web.StreamResponse:
        q = request.query
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        timeout = float(q.get("timeoutSeconds") or 1800)
        rv_s = q.get("resourceVersion", "")
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        await resp.prepare(request)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._watchers.add(queue)

        def line(kind: str, obj: bytes) -> bytes:
            return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"

        try:
            if rv_s in ("", "0"):
                # "Start at any": the current objects as ADDED, then what follows.
                sent = self.rv
                for entry in list(st.objects.values()):
                    if self._matches(entry, ns, lmatch, fmatch):
                        await resp.write(line("ADDED", entry.body))
            else:
                sent = int(rv_s)
                if sent < self.compacted:
                    await resp.write(line("ERROR", json.dumps(_status(
                        410, "Expired", f"too old resource version: {sent} ({self.compacted})")).encode()))
                    return resp
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            next_bookmark = loop.time() + self.bookmark_interval
            while True:
                pending = [e for e in st.log if e[0] > sent] if st.log and st.log[-1][0] > sent else []
                for rv, typ, entry in pending:
                    if self._matches(entry, ns, lmatch, fmatch):
                        await resp.write(line(typ, entry.body))
                    sent = rv
                now = loop.time()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    mark = {"kind": st.kind.kind, "apiVersion": st.kind.api_version,
                            "metadata": {"resourceVersion": str(max(sent, self.rv)),
                                         "annotations": {"k8s.io/initial-events-end": "true"}}}
                    sent = max(sent, self.rv)
                    await resp.write(line("BOOKMARK", json.dumps(mark).encode()))
                    next_bookmark = now + self.bookmark_interval
                wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                try:
                    what, _ = await asyncio.wait_for(queue.get(), timeout=max(wait, 0.01))
                except TimeoutError:
                    continue
                if what == "gone":
                    await resp.write(line("ERROR", json.dumps(_status(
                        410, "Expired", f"too old resource version: {sent} ({self.compacted})")).encode()))
                    break
                if what == "close":
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.discard(queue)
        with contextlib.suppress(Exception):
            await resp.write_eof()
        return resp


def serve_main(argv: list[str] | None = None) -> None:
    """``python -m tests.support.kube_apiserver --scenario NAME [--nodes N] [--tls DIR]``: serve a fixture cluster
    in a process of its own (the benchmarks measure a client without the server in its RSS). Prints the URL,
    then one line per command read from stdin: ``count`` (the request counts as JSON), ``expire``
    (410 every watch), ``rotate TOKEN``, ``touch NODE`` (a change to the node's NicDevice's status), ``forbid
    PLURAL...`` (403 from now on), ``log POD CONTAINER WORD...`` (the operator namespace's pod crashloops, its log a line per word)."""
    import argparse
    import sys

    from tests.support import kube_cluster

    p = argparse.ArgumentParser()
    p.add_argument("--scenario", default="healthy")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--nics", type=int, default=8)
    p.add_argument("--tls", default="")
    p.add_argument("--token-file", default="")
    p.add_argument("--bookmark-interval", type=float, default=1.0)
    a = p.parse_args(argv)

    async def main() -> None:
        token = open(a.token_file).read().strip() if a.token_file else "railscope-test-token"
        api = KubeApi(token=token, token_file=a.token_file or None, bookmark_interval=a.bookmark_interval)
        kube_cluster.load(api, a.scenario, nodes=a.nodes, nics=a.nics)
        ctx = None
        if a.tls:
            from pathlib import Path

            from tests.support import tls_certs
            d = Path(a.tls)
            ca = tls_certs.make_ca(d)
            tls_certs.issue(ca, d / "server.crt", d / "server.key")
            (d / "ca.crt").write_bytes(ca.file.read_bytes())
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(d / "server.crt", d / "server.key")
        url = await api.start(ssl_context=ctx)
        print(url, flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().split():
            cmd, *args = line
            if cmd == "count":
                print(json.dumps({f"{v} {r}": n for (v, r), n in sorted(api.requests.items())}), flush=True)
            elif cmd == "expire":
                api.expire_watches()
                print("ok", flush=True)
            elif cmd == "rotate":
                api.rotate_token(args[0])
                print("ok", flush=True)
            elif cmd == "converge-railpool":
                kube_cluster.converge_railpool(api)
                print("ok", flush=True)
            elif cmd == "touch":
                kube_cluster.touch(api, args[0])
                print("ok", flush=True)
            elif cmd == "forbid":  # RBAC leaves these plurals out (or "pods/log")
                api.forbidden.update(args)
                print("ok", flush=True)
            elif cmd == "log":  # log POD CONTAINER WORD...: the pod's log, one line per word; its pod crashloops
                api.logs[(kube_cluster.NS, args[0], args[1])] = "".join(w + "\n" for w in args[2:])
                kube_cluster.crashloop(api, args[0])
                print("ok", flush=True)
        await api.stop()

    asyncio.run(main())


if __name__ == "__main__":
    serve_main()
