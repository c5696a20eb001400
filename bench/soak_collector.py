#!/usr/bin/env python3
"""Soak: one collector process, under the chart's memory limit, for ``--minutes``.

At the same time, against one ``railscope collector`` (``--plain-http`` on loopback, SeaweedFS ``weed``
or the local store):

* ``--agents`` simulated agents long-poll ``GET /v1/requests`` (agent role, each its own node and its
  own static token, each from its own loopback address as agents on distinct nodes would be);
* rounds of ``--uploads`` concurrent uploads (msgpack frames, ``CollectorClient.upload``), one node
  each, a new bundle id each, every ``--upload-every`` seconds;
* an operator opens the largest incident page again and again: three hostile bundles (70,000 events
  of 300 characters each, as in issue 21) under one incident;
* ``/healthz`` is probed every second from a thread of its own.

Under attack, as options (issue 32's probes, kept running through the soak):

* ``--tls``: the collector serves TLS (a CA and certificate made for the run) and every client verifies it;
* ``--idle-handshakes N``: N TCP connections from one address that never send a ClientHello (nor any
  byte), each opened again ``--idle-reopen`` seconds after the collector closes it;
* ``--fake-jwts RATE``: RATE unsigned JWTs a second for the agents' audience from one address, each new;
  ``--reviewed-agents K`` of the agents then hold RS256 ServiceAccount tokens that a TokenReview stand-in
  (with the issuer discovery keys kube-apiserver publishes) accepts, and must be served throughout.

The collector runs with the address-space limit of the chart's ``collector.resources.limits.memory``
(``RLIMIT_AS``; ``--memory-limit`` overrides). At the end it prints, and checks: the collector alive
and no ``MemoryError`` (nor a thread it cannot start) in its log; ``/healthz`` answered every probe (failures, max latency); every
upload stored exactly once (the store's bundles are exactly the keys answered, none twice), none partial
(each object as long as the bundle sent, no multipart upload left open); every agent served at least
one poll; the collector's peak RSS (``VmHWM``).

    python bench/soak_collector.py [--minutes 10] [--agents 1000] [--uploads 50] [--store weed|local] [--json]
        [--tls] [--idle-handshakes 2500] [--fake-jwts 131] [--reviewed-agents 50]

Exit status 0 when every property holds, 2 when one does not, 1 when a step failed. Not in CI; the
short version is ``tests/integration/test_collector_soak.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import os
import random
import re
import resource
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy  # noqa: E402
from proto.frames import Hello  # noqa: E402
from tests.support.collector_env import AWS_ENV, BUCKET, Weed, free_port  # noqa: E402
from tests.support.hostile_bundles import hostile_bundle  # noqa: E402
from tests.support.tls_certs import issue, make_ca  # noqa: E402
from tests.support.tokenreview import COLLECTOR_SA_TOKEN, SA, TokenReviewStandIn  # noqa: E402

CLUSTER = "soak"
OPERATOR = "soak-operator-token-0123456789abcdef"
ALERTING = "soak-alerting-token-0123456789abcdef"
HOSTILE_INCIDENT = "soak-largest"
HOSTILE_NODES = ("hostile-a", "hostile-b", "hostile-c")
HELLO = Hello(bundle="", node="", cluster=CLUSTER, incident="", reason="LinkFlapping", agent="0.1.0",
              created=int(time.time()), plan="replay/v1")
#: what running out of address space looks like in the collector's log
MEMORY_ERRORS = ("MemoryError", "can't start new thread")
#: the one address of each attack (the agents are 127.10.0.0/16)
IDLE_SOURCE, FAKE_SOURCE = "127.20.0.1", "127.21.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = "railscope-collector"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9, "": 1}


def chart_memory_limit() -> int:
    """``collector.resources.limits.memory`` of the chart, in bytes."""
    values = yaml.safe_load((ROOT / "deploy/helm/railscope/values.yaml").read_text())
    text = str(values["collector"]["resources"]["limits"]["memory"])
    return parse_bytes(text)


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|K|M|G|)", text.strip())
    if not m:
        raise SystemExit(f"not a memory quantity: {text!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def vm_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and its descendants (the analysis children count against a pod's limit too)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += vm_kib(p, "VmRSS")
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return total


class Probe(threading.Thread):
    """``GET /healthz`` once a second until stopped: answers, failures and the slowest answer."""

    def __init__(self, url: str, pid: int, ctx: ssl.SSLContext | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.pid, self.stop = url + "/healthz", pid, threading.Event()
        self.ctx = ctx
        #: the largest RSS of the collector with its children seen at a probe
        self.tree_kib = 0
        self.ok = self.failed = 0
        self.max_s = 0.0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=5, context=self.ctx) as r:
                    r.read()
                    good = r.status == 200
            except (OSError, urllib.error.URLError) as exc:
                good = False
                if len(self.errors) < 5:
                    self.errors.append(str(exc))
            took = time.monotonic() - t0
            self.tree_kib = max(self.tree_kib, tree_rss_kib(self.pid))
            self.max_s = max(self.max_s, took)
            if good:
                self.ok += 1
            else:
                self.failed += 1
            self.stop.wait(max(0.0, 1.0 - took))


def start_collector(work: Path, store: str, endpoint: str | None, mem_limit: int, ctx: ssl.SSLContext | None = None,
                    extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str, Path]:
    """The collector, plain HTTP on loopback, or with ``ctx`` (the clients' context) TLS with the
    pair under ``work/pki``."""
    port = free_port()
    transport = (["--tls-cert-file", str(work / "pki" / "tls.crt"), "--tls-key-file", str(work / "pki" / "tls.key")]
                 if ctx is not None else ["--plain-http"])
    argv = [sys.executable, "-m", "agent.cli", "collector", "--listen", "127.0.0.1", "--port", str(port),
            "--store", store, *transport, "--agent-token-file", str(work / "agent-tokens"),
            "--operator-token-file", str(work / "operator-token"), "--alerting-token-file", str(work / "alerting-token"),
            "--cluster", CLUSTER, *extra]  # agent tokens are bound to the collector's cluster
    if endpoint:
        argv += ["--s3-endpoint-url", endpoint]

    def limits() -> None:
        # The pod's memory limit as an address-space limit (RLIMIT_AS: a cgroup needs privileges this
        # script should not ask for); enough descriptors for every agent's held poll.
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    # Few malloc arenas: the address space glibc reserves per thread would count against RLIMIT_AS
    # though never touched (a pod's limit counts what is resident).
    env = {**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2"}
    log = work / "collector.log"
    proc = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                            start_new_session=True, preexec_fn=limits)
    url = f"{'https' if ctx is not None else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"collector exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2, context=ctx) as r:
                if r.status == 200:
                    return proc, url, log
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"collector not ready: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def agent_addr(i: int) -> str:
    """A loopback source address of agent ``i``'s own (127.10.0.0/16): the collector caps connections
    per peer address, and on distinct nodes every agent is a peer of its own."""
    return f"127.10.{i // 250}.{i % 250 + 1}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def fake_jwt() -> str:
    """What anyone can mint: a JWT's shape for the agents' audience, a new one each time, signed by nobody."""
    head = _b64(json.dumps({"alg": "RS256", "kid": "k1"}).encode())
    body = _b64(json.dumps({"aud": [AUDIENCE], "iss": ISSUER, "sub": SA, "exp": int(time.time() + 3600),
                            "jti": secrets.token_hex(8)}).encode())
    return f"{head}.{body}.{_b64(secrets.token_bytes(256))}"


class ApiServer(threading.Thread):
    """kube-apiserver's TokenReview and issuer discovery, as a stand-in in a thread of its own: the
    reviewed agents' RS256 tokens, signed with a key made for the run, are accepted."""

    def __init__(self, nodes: list[str]) -> None:
        super().__init__(daemon=True)
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = key.public_key().public_numbers()

        def num(n: int) -> str:
            return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))

        self.jwks = {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": num(pub.n), "e": num(pub.e)}]}
        self.tokens: dict[str, str] = {}
        users: dict[str, dict] = {}
        for node in nodes:
            head = _b64(json.dumps({"alg": "RS256", "kid": "k1"}).encode())
            body = _b64(json.dumps({"aud": [AUDIENCE], "iss": ISSUER, "sub": SA, "exp": int(time.time() + 7200),
                                    "jti": secrets.token_hex(8)}).encode())
            sig = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
            self.tokens[node] = tok = f"{head}.{body}.{_b64(sig)}"
            users[tok] = {"username": SA, "aud": AUDIENCE, "extra": {NODE_CLAIM: [node]}}
        self.standin = TokenReviewStandIn(users)
        self.port = free_port()
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> None:
        from aiohttp import web

        async def discovery(_request: web.Request) -> web.Response:
            return web.json_response({"issuer": ISSUER, "jwks_uri": f"{ISSUER}/openid/v1/jwks"})

        async def keyset(_request: web.Request) -> web.Response:
            return web.json_response(self.jwks)

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self.standin.review)
            app.router.add_get("/.well-known/openid-configuration", discovery)
            app.router.add_get("/openid/v1/jwks", keyset)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self.ready.set()
            await asyncio.Event().wait()

        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(main())
        except RuntimeError:
            pass  # stopped

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)


async def soak(url: str, tokens: dict[str, str], bundle: Path, hostile_keys: list[str], args: argparse.Namespace,
               deadline: float, ctx: ssl.SSLContext | None = None) -> dict:
    stats = {"polls": 0, "poll_errors": 0, "uploads": 0, "upload_errors": [], "keys": [], "pages": 0,
             "page_errors": 0, "page_max_s": 0.0, "page_bytes": 0, "served": set(), "idle_opened": 0,
             "idle_closed": 0, "idle_held_max": 0, "fake": collections.Counter(), "fake_sent": 0}
    nodes = list(tokens)
    tls: ssl.SSLContext | bool = ctx if ctx is not None else False

    async def agent(i: int, node: str) -> None:
        conn = aiohttp.TCPConnector(limit=1, local_addr=(agent_addr(i), 0), ssl=tls)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=args.wait + 30)
        headers = {"Authorization": f"Bearer {tokens[node]}"}
        # A fleet's agents start over some seconds, and back off as the agent's poller does (doubling
        # from 1 s to 60 s, with jitter: agent.service.pull): a fleet retrying in lockstep every second is no fleet.
        rng = random.Random(i)
        await asyncio.sleep(rng.uniform(0, args.ramp))
        backoff = 1.0
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
            while time.monotonic() < deadline:
                wait = max(1, min(args.wait, int(deadline - time.monotonic())))
                try:
                    async with s.get(f"{url}/v1/requests?node={node}&wait={wait}", headers=headers) as r:
                        await r.read()
                        if r.status == 200:
                            stats["polls"] += 1
                            stats["served"].add(node)
                            backoff = 1.0
                            continue
                        stats["poll_errors"] += 1
                except (TimeoutError, aiohttp.ClientError):
                    stats["poll_errors"] += 1
                await asyncio.sleep(min(backoff * (0.5 + rng.random()), max(0.0, deadline - time.monotonic())))
                backoff = min(60.0, backoff * 2)

    async def upload(rnd: int, k: int) -> None:
        # from the node's own address, as its agent uploads (the caps per address are per node)
        idx = k % len(nodes)
        node = nodes[idx]
        hello = replace(HELLO, node=node, bundle=f"s{rnd:04d}{k:04d}{os.urandom(8).hex()}",
                        incident=f"soak-round-{rnd:04d}")
        stats["uploads"] += 1
        conn = aiohttp.TCPConnector(local_addr=(agent_addr(idx), 0), ssl=tls)
        async with aiohttp.ClientSession(connector=conn) as session:
            client = CollectorClient(url, token=tokens[node], session=session,
                                     retry=RetryPolicy(attempts=30, base_s=1.0, cap_s=10.0))
            try:
                res = await client.upload(hello, bundle)
                stats["keys"].append(res.key)
            except CollectorError as exc:
                stats["upload_errors"].append(f"{node}/{hello.bundle}: {exc}")

    async def uploader() -> None:
        rnd = 0
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            await asyncio.gather(*(upload(rnd, k) for k in range(args.uploads)))
            rnd += 1
            await asyncio.sleep(max(0.0, min(args.upload_every - (time.monotonic() - t0), deadline - time.monotonic())))

    async def operator() -> None:
        date = hostile_keys[0].split("/")[1]
        page = f"{url}/ui/incidents/{CLUSTER}/{date}/{HOSTILE_INCIDENT}"
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(ssl=tls)) as s:
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                try:
                    async with s.get(page, headers=headers) as r:
                        data = await r.read()
                        good = r.status == 200 and HOSTILE_NODES[-1].encode() in data
                except (TimeoutError, aiohttp.ClientError):
                    good, data = False, b""
                stats["page_max_s"] = max(stats["page_max_s"], time.monotonic() - t0)
                stats["pages" if good else "page_errors"] += 1
                stats["page_bytes"] = max(stats["page_bytes"], len(data))
                await asyncio.sleep(0.5)

    held = [0]

    async def idle_one() -> None:
        # A TCP connection that never sends a byte (no ClientHello), opened again once closed.
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection(host, int(port), local_addr=(IDLE_SOURCE, 0))
            except OSError:
                await asyncio.sleep(args.idle_reopen)
                continue
            stats["idle_opened"] += 1
            held[0] += 1
            stats["idle_held_max"] = max(stats["idle_held_max"], held[0])
            try:
                await asyncio.wait_for(reader.read(1), max(0.1, deadline - time.monotonic()))
                stats["idle_closed"] += 1
            except (TimeoutError, OSError):
                pass
            finally:
                held[0] -= 1
                writer.close()
            await asyncio.sleep(args.idle_reopen)

    async def fakes() -> None:
        # ``--fake-jwts`` a second from one client, each a new token, each its own request.
        conn = aiohttp.TCPConnector(limit=64, local_addr=(FAKE_SOURCE, 0), ssl=tls)
        timeout = aiohttp.ClientTimeout(total=30)
        pending: set[asyncio.Task] = set()

        async def one(s: aiohttp.ClientSession) -> None:
            try:
                async with s.get(f"{url}/v1/requests?node={nodes[0]}&wait=0",
                                 headers={"Authorization": f"Bearer {fake_jwt()}"}) as r:
                    await r.read()
                    stats["fake"][str(r.status)] += 1
            except (TimeoutError, aiohttp.ClientError):
                stats["fake"]["error"] += 1

        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
            t0, sent = time.monotonic(), 0
            while time.monotonic() < deadline:
                due = int((time.monotonic() - t0) * args.fake_jwts)
                while sent < due:
                    task = asyncio.create_task(one(s))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    sent += 1
                stats["fake_sent"] = sent
                await asyncio.sleep(0.02)
            if pending:
                await asyncio.wait(pending, timeout=30)

    attacks = [idle_one() for _ in range(args.idle_handshakes)]
    if args.fake_jwts > 0:
        attacks.append(fakes())
    await asyncio.gather(*(agent(i, n) for i, n in enumerate(nodes)), uploader(), operator(), *attacks)
    return stats


def stored_bundles(store: str, root: Path | None, weed: Weed | None) -> list[tuple[str, int]]:
    """Every bundle the store holds under the soak's cluster: its ``.tar.gz`` key and its length."""
    if weed is not None:
        prefix = store.split(f"s3://{BUCKET}/", 1)[1] + "/"
        out = []
        for page in weed.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + CLUSTER + "/"):
            out += [(o["Key"][len(prefix):], o["Size"]) for o in page.get("Contents", [])
                    if o["Key"].endswith(".tar.gz") and "/.ids/" not in o["Key"]]
        return out
    assert root is not None
    return [(str(p.relative_to(root)), p.stat().st_size) for p in (root / CLUSTER).rglob("*.tar.gz")
            if not any(part.startswith(".") for part in p.relative_to(root).parts)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--uploads", type=int, default=50, help="concurrent uploads per round")
    ap.add_argument("--upload-every", type=float, default=60.0, help="seconds from one round's start to the next")
    ap.add_argument("--wait", type=int, default=50, help="each poll's wait= (the agent's default)")
    ap.add_argument("--ramp", type=float, default=10.0, help="seconds over which the agents start")
    ap.add_argument("--store", choices=("weed", "local"), default="weed")
    ap.add_argument("--memory-limit", default=None, help="default: the chart's collector limit")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("--tls", action="store_true", help="serve TLS (a CA and pair made for the run); clients verify it")
    ap.add_argument("--idle-handshakes", type=int, default=0,
                    help="connections from one address that never send a ClientHello, each reopened once closed")
    ap.add_argument("--idle-reopen", type=float, default=2.0, help="seconds before a closed idle connection is reopened")
    ap.add_argument("--fake-jwts", type=float, default=0.0, help="unsigned JWTs a second from one address")
    ap.add_argument("--reviewed-agents", type=int, default=None,
                    help="agents holding ServiceAccount tokens (TokenReview); default 50 with --fake-jwts, else 0")
    args = ap.parse_args()
    if args.reviewed_agents is None:
        args.reviewed_agents = min(50, args.agents) if args.fake_jwts > 0 else 0
    if args.agents < max(1, args.uploads) or args.minutes <= 0:
        raise SystemExit("--agents must be at least --uploads (each upload is an agent's node); --minutes > 0")
    mem_limit = parse_bytes(args.memory_limit) if args.memory_limit else chart_memory_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (min(hard, max(soft, 2 * args.agents + args.idle_handshakes + 1024)), hard))

    work = Path(tempfile.mkdtemp(prefix="rs-soak-"))
    weed: Weed | None = None
    proc: subprocess.Popen | None = None
    api: ApiServer | None = None
    try:
        nodes = [f"sim-{i:04d}" for i in range(args.agents)]
        tokens = {n: f"soak-agent-{n}-{os.urandom(8).hex()}" for n in nodes}
        tokens.update({n: f"soak-agent-{n}-{os.urandom(8).hex()}" for n in HOSTILE_NODES})
        (work / "agent-tokens").write_text("".join(f"{n} {t}\n" for n, t in tokens.items()))
        extra: tuple[str, ...] = ()
        reviewed = nodes[:args.reviewed_agents]
        if reviewed:
            # These agents hold ServiceAccount tokens (reviewed), not static ones.
            api = ApiServer(reviewed)
            api.start()
            api.ready.wait(30)
            tokens.update(api.tokens)
            own = work / "own-token"
            own.write_text(COLLECTOR_SA_TOKEN)
            own.chmod(0o600)
            extra = ("--tokenreview-url", f"http://127.0.0.1:{api.port}", "--tokenreview-token-file", str(own))
        ctx: ssl.SSLContext | None = None
        if args.tls:
            ca = make_ca(work / "pki")
            issue(ca, work / "pki" / "tls.crt", work / "pki" / "tls.key")
            ctx = ssl.create_default_context(cafile=str(ca.file))
        (work / "agent-tokens").chmod(0o600)  # token files: their owner's alone
        (work / "operator-token").write_text(OPERATOR + "\n")
        (work / "operator-token").chmod(0o600)  # token files: their owner's alone
        (work / "alerting-token").write_text(ALERTING + "\n")
        (work / "alerting-token").chmod(0o600)  # token files: their owner's alone
        root: Path | None = None
        if args.store == "weed":
            os.environ.update(AWS_ENV)
            weed = Weed(work / "weed")
            weed.start()
            store, endpoint = f"s3://{BUCKET}/soak-{os.getpid()}", weed.endpoint
        else:
            root = work / "store"
            store, endpoint = str(root), None
        bundle = work / "bundle.tar.gz"
        bundle.write_bytes(hostile_bundle(events=50, message=80))
        hostile = hostile_bundle(events=70_000, message=300)
        proc, url, log = start_collector(work, store, endpoint, mem_limit, ctx, extra)
        base_kib = vm_kib(proc.pid, "VmRSS")
        # The limit the collector really runs under, as the kernel has it.
        as_line = next(x for x in Path(f"/proc/{proc.pid}/limits").read_text().splitlines()
                       if x.startswith("Max address space"))
        applied = as_line.split()[3] == str(mem_limit)

        async def seed() -> list[str]:
            keys = []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx if ctx is not None else False)) as s:
                for i, node in enumerate(HOSTILE_NODES):
                    hello = replace(HELLO, node=node, bundle=f"hostile{i}{os.urandom(8).hex()}", incident=HOSTILE_INCIDENT)
                    res = await CollectorClient(url, token=tokens[node], session=s).upload(hello, [hostile])
                    keys.append(res.key)
            return keys

        hostile_keys = asyncio.run(seed())
        probe = Probe(url, proc.pid, ctx)
        probe.start()
        t0 = time.monotonic()
        stats = asyncio.run(soak(url, {n: tokens[n] for n in nodes}, bundle, hostile_keys, args,
                                 t0 + 60 * args.minutes, ctx))
        elapsed = time.monotonic() - t0
        probe.stop.set()
        probe.join(10)
        alive = proc.poll() is None
        peak_kib = vm_kib(proc.pid, "VmHWM") if alive else 0
        end_kib = vm_kib(proc.pid, "VmRSS") if alive else 0
        stored = stored_bundles(store, root, weed)
        listed = [k for k, _n in stored]
        expected = stats["keys"] + hostile_keys
        # Partial: an object shorter or longer than the bundle sent, or a multipart upload left open.
        want = {k: len(hostile) for k in hostile_keys} | {k: bundle.stat().st_size for k in stats["keys"]}
        partial = sum(1 for k, n in stored if k in want and n != want[k])
        open_uploads = len(weed.uploads()) if weed is not None else 0
        reviews = api.standin.reviews if api is not None else 0
        stop(proc)
        log_text = log.read_text(errors="replace")
        oom = sum(log_text.count(m) for m in MEMORY_ERRORS)
        dupes = len(listed) - len(set(listed))
        missing = sorted(set(expected) - set(listed))
        extra_keys = sorted(set(listed) - set(expected))
        figures = {
            "minutes": round(elapsed / 60, 2), "agents": args.agents, "store": args.store,
            "memory_limit_mib": mem_limit >> 20, "memory_limit_applied": applied, "collector_alive": alive, "memory_errors": oom,
            "exit_code": proc.returncode if not alive else None,
            "healthz_ok": probe.ok, "healthz_failed": probe.failed, "healthz_max_s": round(probe.max_s, 3),
            "polls": stats["polls"], "poll_errors": stats["poll_errors"],
            "uploads": stats["uploads"], "uploads_ok": len(stats["keys"]), "upload_errors": len(stats["upload_errors"]),
            "stored": len(listed), "expected": len(expected), "duplicates": dupes, "missing": len(missing),
            "unexpected": len(extra_keys), "pages": stats["pages"], "page_errors": stats["page_errors"],
            "page_max_s": round(stats["page_max_s"], 2), "page_kib": stats["page_bytes"] >> 10,
            "rss_start_mib": round(base_kib / 1024, 1), "rss_end_mib": round(end_kib / 1024, 1),
            "rss_peak_mib": round(peak_kib / 1024, 1), "tree_rss_max_mib": round(probe.tree_kib / 1024, 1),
            "tls": args.tls, "partial": partial, "open_multipart_uploads": open_uploads,
            "agents_served": len(stats["served"]), "reviewed_agents": len(reviewed),
            "reviewed_served": len(stats["served"] & set(reviewed)), "tokenreviews": reviews,
            "idle_handshakes": args.idle_handshakes, "idle_opened": stats["idle_opened"],
            "idle_closed_by_collector": stats["idle_closed"], "idle_held_max": stats["idle_held_max"],
            "fake_jwts_per_s": args.fake_jwts, "fake_jwts_sent": stats["fake_sent"], "fake_jwt_answers": dict(stats["fake"]),
        }
        checks = {
            "collector under the memory limit": applied,
            "collector alive, no memory error": alive and oom == 0,
            "/healthz answered every probe": probe.failed == 0 and probe.ok > 0,
            "every upload stored exactly once": (not stats["upload_errors"] and dupes == 0 and not missing
                                                 and not extra_keys and len(listed) == len(expected)),
            "no bundle partial": partial == 0 and open_uploads == 0,
            "every agent served": len(stats["served"]) == args.agents,
            "incident page answered every time": stats["page_errors"] == 0 and stats["pages"] > 0,
            "polls answered": stats["polls"] > 0,
        }
        f = figures
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; store {f['store']}; "
              f"RLIMIT_AS {f['memory_limit_mib']} MiB "
              f"({'--memory-limit' if args.memory_limit else 'the chart limit'}); {f['minutes']} min")
        print(f"agents {f['agents']} long-polling: {f['polls']} polls answered, {f['poll_errors']} failed")
        print(f"uploads {f['uploads']} ({args.uploads} at once per round): {f['uploads_ok']} ok, {f['upload_errors']} failed; "
              f"store holds {f['stored']} bundles for {f['expected']} expected (with 3 hostile), "
              f"{f['duplicates']} duplicates, {f['missing']} missing, {f['unexpected']} unexpected")
        print(f"incident page ({len(HOSTILE_NODES)} hostile bundles, {f['page_kib']} KiB): {f['pages']} views ok, "
              f"{f['page_errors']} failed, slowest {f['page_max_s']:.2f} s")
        print(f"every bundle whole: {f['partial']} partial, {f['open_multipart_uploads']} multipart uploads left open; "
              f"agents served at least one poll: {f['agents_served']} of {f['agents']} "
              f"({f['reviewed_served']} of {f['reviewed_agents']} reviewed by TokenReview, {f['tokenreviews']} reviews)")
        if args.idle_handshakes or args.fake_jwts:
            print(f"attack: {args.idle_handshakes} idle connections ({'TLS' if args.tls else 'plain'}) from {IDLE_SOURCE}: "
                  f"{f['idle_opened']} opened, {f['idle_closed_by_collector']} closed by the collector, "
                  f"at most {f['idle_held_max']} held open; {args.fake_jwts:g} fake JWTs/s from {FAKE_SOURCE}: "
                  f"{f['fake_jwts_sent']} sent, answers {f['fake_jwt_answers']}")
        print(f"/healthz: {f['healthz_ok']} ok, {f['healthz_failed']} failed, max latency {f['healthz_max_s']:.3f} s")
        print(f"collector: alive {alive}, memory errors in log {oom}; RSS start {f['rss_start_mib']} MiB, "
              f"end {f['rss_end_mib']} MiB, peak (VmHWM) {f['rss_peak_mib']} MiB; "
              f"with its children at most {f['tree_rss_max_mib']} MiB (sampled each second)")
        for e in stats["upload_errors"][:5] + probe.errors:
            print(f"  error: {e}")
        if oom:  # the work directory goes at the end: show the first one's last words
            first = next(x for x in log_text.splitlines() if any(m in x for m in MEMORY_ERRORS))
            print(f"  collector log, first memory error: ...{first[-400:]}")
        for name, ok in checks.items():
            print(f"{'ok    ' if ok else 'FAILED'} {name}")
        if args.json:
            print(json.dumps({**figures, "checks": checks}))
        return 0 if all(checks.values()) else 2
    finally:
        if proc is not None:
            stop(proc)
        if weed is not None:
            weed.stop()
        if api is not None:
            api.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
