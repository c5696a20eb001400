"""The Kubernetes API client, on ``kubernetes_asyncio``, with informers: reads, and one write, a Lease.

Here in ``proto`` because both programs speak to the API server (``railscope rollout`` / ``snapshot --cluster``
/ ``preflight`` through ``agent.clients.kubernetes``, which re-exports this module, and the collector's cluster
watch, ``collector.cluster``), as ``proto.tokens`` is the one token-file reader of both; it imports neither
``agent`` nor ``collector``, only ``proto.tokens`` and the library.

Why this library: measured by ``bench/bench_kube_clients.py`` against the API stand-in over TLS with the
in-cluster configuration, 80,000 NicDevices listed and held (each library in its own environment; 2 shared
cores, so times are loose):

=================== ========= ============ ============== ================================ ==============
library             import    RSS, 80,000  list (pages)   watch after 410 Gone             rotated token
=================== ========= ============ ============== ================================ ==============
kubernetes_asyncio  0.63 s    434 MiB      32 s (500)     raises 410: the caller relists    401 up to 60 s
lightkube 1.0.1     0.25 s    406 MiB      28 s (500)     rewatches from "any": 80,001      re-read each
                                                          events, no DELETED for the gap    request
kr8s 0.20.15        0.40 s    1,487 MiB    207 s (one)    loops at the stale version        re-auth on 401
=================== ========= ============ ============== ================================ ==============

kubernetes_asyncio is taken: it speaks aiohttp on the caller's loop (railscope's HTTP stack already; lightkube
brings httpx2, h2 and msgspec, kr8s httpx, anyio and python-box), loads the in-cluster configuration
(``KUBERNETES_SERVICE_HOST`` / ``_PORT``, the ServiceAccount's token and CA) and does TLS and auth; the objects
are never held as the library's (the views keep small records), so its RSS column does not apply; its two weak
points measured are taken over here:

- the token: the library re-reads a rotated ServiceAccount token at most once a minute (a request in
  between goes out with the old one, 401 where the old one is revoked); here the token file is read on every
  request (:func:`proto.tokens.read_token` for a ``--api-token-file``; the kubelet's projected token,
  group-readable by default, without the mode rule);
- ``410 Gone``: its watch retries once at the same stale resourceVersion and raises; :class:`Informer`
  relists (one LIST, pages of 500) and drops what the new list lacks, so no object deleted in the gap stays.

Informers: one LIST per kind, then WATCH from the list's resourceVersion with bookmarks, resumed from the
last resourceVersion seen (bookmarks keep it fresh) after a dropped connection or the server's timeout;
never a list per node. Objects are handed to the caller's callback as parsed JSON and not kept here.
Nothing here writes: there is no method for any verb but GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from proto.tokens import TokenFileError, read_token

__all__ = ["SA_DIR", "Gone", "Informer", "KubeClient", "KubeConfig", "KubeError", "LeaseLock", "discover", "slim",
           "watch_kinds"]

log = logging.getLogger("railscope.kubernetes")

#: Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: One watch event is one object; a Node with its images list can reach hundreds of KiB.
MAX_EVENT_BYTES = 4 << 20
#: A Lease's path, the one a write may go to (:class:`LeaseLock`).
_LEASE_PATH = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/[a-z0-9.-]{1,253}/leases(/[a-z0-9.-]{1,253})?")
#: Page size of a LIST (kube-apiserver serves up to 500 a page from its watch cache cheaply).
PAGE = 500


class KubeError(Exception):
    """A request the API server answered with an error, or could not be reached (status 0)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class Gone(KubeError):
    """410: the resourceVersion (or continue token) is older than the server keeps; relist."""


@dataclass(frozen=True)
class KubeConfig:
    server: str  # https://host:port
    token_file: str | None = None
    ca_file: str | None = None
    #: tokens.py's rules (owner-only mode among them) for the token file; off for the kubelet's token
    #: (in-cluster), whose default mount (mode 0644 through the ..data symlink) would fail it.
    owner_only: bool = True
    namespace: str | None = None

    @classmethod
    def in_cluster(cls, sa_dir: str = SA_DIR, environ: Mapping[str, str] | None = None) -> KubeConfig:
        """The pod's own: ``KUBERNETES_SERVICE_HOST`` / ``_PORT`` and ``sa_dir``'s token and ca.crt
        (through the library's loader, which checks them); :class:`KubeError` (status 0) outside a pod."""
        from kubernetes_asyncio.client import Configuration
        from kubernetes_asyncio.config.config_exception import ConfigException
        from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

        env = dict(os.environ if environ is None else environ)
        conf = Configuration()
        try:
            InClusterConfigLoader(token_filename=f"{sa_dir}/token", cert_filename=f"{sa_dir}/ca.crt",
                                  environ=env, try_refresh_token=False).load_and_set(conf)
        except ConfigException as exc:
            raise KubeError(0, "NotInCluster", str(exc)) from None
        ns = None
        with contextlib.suppress(OSError):
            with open(f"{sa_dir}/namespace") as fh:
                ns = fh.read().strip() or None
        return cls(conf.host, f"{sa_dir}/token", f"{sa_dir}/ca.crt", owner_only=False, namespace=ns)

    def token(self) -> str | None:
        if not self.token_file:
            return None
        if self.owner_only:
            return read_token(self.token_file, "--api-token-file")
        try:
            with open(self.token_file, "rb") as fh:
                tok = fh.read(16 * 1024).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"token file {self.token_file}: {exc}") from None
        if not tok:
            raise TokenFileError(f"token file {self.token_file}: empty")
        return tok


def _error(status: int, body: bytes) -> KubeError:
    reason, message = "Error", ""
    with contextlib.suppress(ValueError, AttributeError):
        doc = json.loads(body)
        reason, message = str(doc.get("reason") or reason), str(doc.get("message") or "")
    return (Gone if status == 410 else KubeError)(status, reason, message[:500])


class KubeClient:
    """GET requests to one API server. ``async with KubeClient(config) as c: await c.get_json("/api")``."""

    def __init__(self, config: KubeConfig, timeout: float = 30.0) -> None:
        from kubernetes_asyncio.client import ApiClient, Configuration

        self.config = config
        self.timeout = timeout
        conf = Configuration(host=config.server.rstrip("/"))
        if config.ca_file:
            conf.ssl_ca_cert = config.ca_file
        if config.token_file:
            conf.api_key_prefix["BearerToken"] = "Bearer"
            conf.api_key["BearerToken"] = "-"

            def refresh(c: Any, *_a: Any) -> None:
                # Every request: a projected token is rotated in place by the kubelet (see the module doc).
                c.api_key["BearerToken"] = config.token()

            conf.refresh_api_key_hook = refresh
        self._api = ApiClient(conf)
        #: requests made, by verb ("list", "watch", "get", "discovery"): the benchmarks read it.
        self.requests: dict[str, int] = {}

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._api.close()

    async def _get(self, path: str, query: list[tuple[str, str]], timeout: float | None, verb: str,
                   method: str = "GET", body: Any = None) -> Any:
        from kubernetes_asyncio.client.exceptions import ApiException

        self.requests[verb] = self.requests.get(verb, 0) + 1
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            resp = await self._api.call_api(path, method, query_params=query, header_params=headers, body=body,
                                            auth_settings=["BearerToken"], _preload_content=False,
                                            _request_timeout=timeout)
        except ApiException as exc:  # raised by the library for a status it does not like
            raise _error(exc.status or 0, (exc.body or b"") if isinstance(exc.body, bytes)
                         else str(exc.body or "").encode()) from None
        except TokenFileError as exc:
            raise KubeError(0, "TokenFile", str(exc)) from None
        except (TimeoutError, OSError) as exc:
            raise KubeError(0, "Unreachable", f"{self.config.server}: {exc}") from None
        except Exception as exc:  # aiohttp's client errors, without importing aiohttp here
            if type(exc).__module__.startswith("aiohttp"):
                raise KubeError(0, "Unreachable", f"{self.config.server}: {exc}") from None
            raise
        if resp.status >= 400:
            body = await resp.read()
            resp.release()
            raise _error(resp.status, body)
        return resp

    async def get_json(self, path: str, query: Mapping[str, str] | None = None, verb: str = "get",
                       max_bytes: int = 256 << 20) -> Any:
        """One GET's JSON; a body over ``max_bytes`` is an error, never held whole."""
        return await self._json(await self._get(path, list((query or {}).items()), self.timeout, verb), path,
                                max_bytes)

    async def get_text(self, path: str, query: Mapping[str, str] | None = None, max_bytes: int = 1 << 20) -> str:
        """One GET of a text body (a pod's log: ``pods/<name>/log``), cut at ``max_bytes``."""
        resp = await self._get(path, list((query or {}).items()), self.timeout, "get")
        try:
            body = bytearray()
            async for chunk in resp.content.iter_any():
                body.extend(chunk[:max_bytes - len(body)])
                if len(body) >= max_bytes:
                    break
            return body.decode("utf-8", "replace")
        finally:
            resp.release()

    async def _write_lease(self, method: str, path: str, body: dict[str, Any]) -> Any:
        """The one write (POST / PUT of a Lease): only :class:`LeaseLock` calls it, with its own path."""
        if method not in ("POST", "PUT") or not _LEASE_PATH.fullmatch(path):
            raise ValueError(f"{method} {path}: the only write is a coordination.k8s.io/v1 Lease")
        return await self._json(await self._get(path, [], self.timeout, "lease", method, body), path, 1 << 20)

    async def _json(self, resp: Any, path: str, max_bytes: int) -> Any:
        try:
            body = bytearray()
            async for chunk in resp.content.iter_any():
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise KubeError(0, "TooLarge", f"GET {path}: larger than {max_bytes} bytes")
            return json.loads(body)
        finally:
            resp.release()

    async def stream(self, path: str, query: Mapping[str, str], timeout: float) -> AsyncIterator[dict[str, Any]]:
        """The watch events of ``path`` (``watch=true`` added), as they come; ends when the server ends it.

        Lines are split here, each bounded by :data:`MAX_EVENT_BYTES`: aiohttp's readline caps a line far
        below what one Node object (its images list) can reach."""
        import aiohttp

        resp = await self._get(path, [*query.items(), ("watch", "true")],
                               aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=timeout),
                               "watch")
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = await resp.content.readany()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise KubeError(0, "Unreachable", f"watch {path}: {exc}") from None
                if not chunk:
                    if buf.strip():
                        yield json.loads(bytes(buf))
                    return
                buf.extend(chunk)
                while (nl := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:nl]).strip()
                    del buf[:nl + 1]
                    if line:
                        yield json.loads(line)
                if len(buf) > MAX_EVENT_BYTES:
                    raise KubeError(0, "TooLarge", f"watch {path}: an event larger than {MAX_EVENT_BYTES} bytes")
        finally:
            resp.release()


def resource_path(group: str, version: str, plural: str, namespace: str | None) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{base}/namespaces/{quote(namespace, safe='')}/{plural}" if namespace else f"{base}/{plural}"


async def discover(client: KubeClient, groups: set[str]) -> dict[str, dict[str, set[str]]]:
    """Which of ``groups`` the server serves: group → version → plurals (the core group as ``""``).

    ``/api/v1`` and ``/apis`` once, then each wanted group's versions (a handful of requests, whatever the
    cluster's size)."""
    out: dict[str, dict[str, set[str]]] = {}
    core = await client.get_json("/api/v1", verb="discovery")
    out[""] = {"v1": {r["name"] for r in core.get("resources", ()) if "/" not in r["name"]}}
    listing = await client.get_json("/apis", verb="discovery")
    for g in listing.get("groups", ()):
        if g.get("name") not in groups:
            continue
        for v in g.get("versions", ()):
            try:
                res = await client.get_json(f"/apis/{v['groupVersion']}", verb="discovery")
            except KubeError as exc:
                if exc.status == 404:
                    continue
                raise
            out.setdefault(g["name"], {})[v["version"]] = {r["name"] for r in res.get("resources", ())
                                                          if "/" not in r["name"]}
    return out


Handler = Callable[[str, dict[str, Any]], None]


class Informer:
    """One kind: LIST (pages), then WATCH with bookmarks from the list's resourceVersion, for ever.

    ``handler(type, object)`` gets ``ADDED`` / ``MODIFIED`` / ``DELETED`` for every change; after a relist
    (410) ``DELETED`` for each object the new list no longer has. ``synced`` is set after the first list.
    """

    def __init__(self, client: KubeClient, path: str, handler: Handler, *, label_selector: str = "",
                 field_selector: str = "", watch_timeout: int = 300, page: int = PAGE) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.selectors = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        self.watch_timeout = watch_timeout
        self.page = page
        self.rv = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self._keys: set[tuple[str, str]] = set()

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        md = obj.get("metadata") or {}
        return (md.get("namespace", ""), md.get("name", ""))

    async def list(self) -> None:
        """One LIST of every page; objects the last list or watch had and this one lacks are DELETED."""
        while True:
            seen: set[tuple[str, str]] = set()
            cont = ""
            try:
                while True:
                    q = dict(self.selectors, limit=str(self.page))
                    if cont:
                        q["continue"] = cont
                    doc = await self.client.get_json(self.path, q, verb="list")
                    for obj in doc.get("items") or ():
                        seen.add(self._key(obj))
                        self.handler("ADDED" if self._key(obj) not in self._keys else "MODIFIED", obj)
                    md = doc.get("metadata") or {}
                    cont = md.get("continue") or ""
                    if not cont:
                        self.rv = md.get("resourceVersion", "")
                        break
            except Gone:
                continue  # the continue token outlived the server's history: list again from the start
            for ns, name in self._keys - seen:
                self.handler("DELETED", {"metadata": {"namespace": ns, "name": name}})
            self._keys = seen
            self.synced.set()
            return

    async def watch_once(self) -> None:
        """One WATCH from ``self.rv`` until the server ends it; :class:`Gone` when the rv is too old."""
        q = dict(self.selectors, resourceVersion=self.rv, allowWatchBookmarks="true",
                 timeoutSeconds=str(self.watch_timeout))
        async for ev in self.client.stream(self.path, q, timeout=self.watch_timeout + 30):
            typ = ev.get("type")
            obj = ev.get("object") or {}
            if typ == "ERROR":
                raise _error(int(obj.get("code") or 500), json.dumps(obj).encode())
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if typ != "BOOKMARK":
                key = self._key(obj)
                if typ == "DELETED":
                    self._keys.discard(key)
                else:
                    self._keys.add(key)
                self.handler(str(typ), obj)
            if rv:
                self.rv = rv

    async def run(self) -> None:
        """List, then watch for ever: resume from the last resourceVersion, relist on 410, back off on errors."""
        delay = 0.5
        while True:
            try:
                if not self.synced.is_set() or not self.rv:
                    await self.list()
                await self.watch_once()
                delay = 0.5
            except Gone:
                self.relists += 1
                log.info("watch %s: 410 Gone at resourceVersion %s, relisting", self.path, self.rv)
                self.rv = ""
            except KubeError as exc:
                log.warning("watch %s: %s; again in %.1f s", self.path, exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 30.0)


class _KindLike(Protocol):
    """What :func:`watch_kinds` needs of a kind (``agent.analysis.rollout.Kind`` is one)."""

    key: str
    name: str
    group: str
    versions: tuple[str, ...]
    plural: str
    namespaced: bool
    label_selector: str
    field_selector: str


async def watch_kinds(client: KubeClient, kinds: Iterable[_KindLike], namespace: str,
                      handler_for: Callable[[str], Handler],
                      selectors_for: Callable[[_KindLike], tuple[str, str]] | None = None,
                      watch_timeout: int = 300) -> tuple[dict[str, Informer], list[str]]:
    """The informers of ``kinds`` the server serves (by kind key), each listed once, and the names of the
    kinds skipped: not served (the cluster lacks the operator) or forbidden (403: the role leaves the kind
    out). The namespaced kinds are watched in ``namespace``, the others cluster-wide. ``run()`` each
    informer to keep watching."""
    kinds = tuple(kinds)
    served = await discover(client, {k.group for k in kinds if k.group})
    informers: dict[str, Informer] = {}
    missing: list[str] = []
    names: dict[str, str] = {}
    for kind in kinds:
        versions = served.get(kind.group, {})
        version = next((v for v in kind.versions if kind.plural in versions.get(v, ())), None)
        if version is None:
            missing.append(kind.name)
            continue
        label, field = selectors_for(kind) if selectors_for else (kind.label_selector, kind.field_selector)
        names[kind.key] = kind.name
        informers[kind.key] = Informer(client, resource_path(kind.group, version, kind.plural,
                                                             namespace if kind.namespaced else None),
                                       handler_for(kind.key), label_selector=label, field_selector=field,
                                       watch_timeout=watch_timeout)
    # The first lists run side by side (a handful of kinds, each paged).
    results = await asyncio.gather(*(inf.list() for inf in informers.values()), return_exceptions=True)
    for key, res in zip(list(informers), results, strict=True):
        if isinstance(res, KubeError) and res.status == 403:
            del informers[key]
            missing.append(f"{names[key]} (forbidden)")
        elif isinstance(res, BaseException):
            raise res
    return informers, missing


def slim(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What a cluster snapshot (and an incident's slice) keeps of an object, changed in place: no
    managedFields, no Node image list (hundreds of KiB a node), and no literal environment value of a pod or
    DaemonSet template (a value may be a password typed in; the name stays)."""
    md = obj.get("metadata") or {}
    md.pop("managedFields", None)
    if key == "nodes":
        (obj.get("status") or {}).pop("images", None)
    if key in ("pods", "daemonsets"):
        spec = obj.get("spec") or {}
        if key == "daemonsets":
            spec = (spec.get("template") or {}).get("spec") or {}
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            for env in c.get("env") or ():
                if "value" in env:
                    env["value"] = "<redacted>"
    return obj


def micro_time(t: float) -> str:
    """Kubernetes' MicroTime (RFC 3339 with microseconds, UTC), as a Lease's renewTime carries it."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLock:
    """Leader election on one Lease, ``namespace/name``, held by ``identity`` (client-go's leaderelection).

    Call :meth:`try_acquire` every few seconds (well within ``duration_s``): it creates the Lease when there
    is none, renews it while this identity holds it, and takes it over once another holder stopped renewing.
    Whether another holder's Lease expired is judged by this process's own monotonic clock since it last saw
    the Lease change (its resourceVersion), never by comparing the holder's renewTime with this clock: two
    replicas' clocks may disagree. Every update carries the resourceVersion read, so of two replicas taking
    over at once one gets 409 Conflict and stays a follower."""

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, duration_s: int = 15,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.clock = clock
        self.monotonic = monotonic
        self.held = False
        self.transitions = 0
        self._seen: tuple[str, float] | None = None  # (resourceVersion, when this process saw it change)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def _spec(self, prev: Mapping[str, Any], now: float) -> dict[str, Any]:
        ours = prev.get("holderIdentity") == self.identity
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s,
                "acquireTime": prev.get("acquireTime") if ours and prev.get("acquireTime") else micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": int(prev.get("leaseTransitions") or 0) + (0 if ours or not prev else 1)}

    async def try_acquire(self) -> bool:
        """Hold the Lease, or learn who does; whether this identity leads now. ``KubeError`` when the server
        cannot be asked (the caller stops leading: it can no longer prove that it does)."""
        try:
            cur = await self.client.get_json(self.path, verb="lease", max_bytes=1 << 20)
        except KubeError as exc:
            if exc.status != 404:
                self.held = False
                raise
            cur = None
        now = self.clock()
        if cur is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec({}, now)}
            return await self._write("POST", self.path.rsplit("/", 1)[0], body)
        md, spec = cur.get("metadata") or {}, cur.get("spec") or {}
        rv = str(md.get("resourceVersion") or "")
        mono = self.monotonic()
        if self._seen is None or self._seen[0] != rv:
            self._seen = (rv, mono)
        holder = spec.get("holderIdentity") or ""
        duration = int(spec.get("leaseDurationSeconds") or self.duration_s)
        if holder and holder != self.identity and mono < self._seen[1] + duration:
            self.held = False
            return False
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": rv},
                "spec": self._spec(spec, now)}
        return await self._write("PUT", self.path, body)

    async def _write(self, method: str, path: str, body: dict[str, Any]) -> bool:
        try:
            got = await self.client._write_lease(method, path, body)
        except KubeError as exc:
            self.held = False
            if exc.status == 409:  # another replica wrote first (created, renewed or took it over)
                return False
            raise
        self.transitions = int((got.get("spec") or {}).get("leaseTransitions") or 0)
        self._seen = (str((got.get("metadata") or {}).get("resourceVersion") or ""), self.monotonic())
        self.held = True
        return True

    async def release(self) -> None:
        """Give the Lease up (a clean stop): another replica takes over at its next try, not a duration later."""
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(KubeError):
            cur = await self.client.get_json(self.path, verb="lease", max_bytes=1 << 20)
            spec = dict(cur.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time(self.clock()))
            await self.client._write_lease("PUT", self.path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": (cur.get("metadata") or {}).get("resourceVersion")}, "spec": spec})
