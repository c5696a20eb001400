"""The chart's two halves connect: the agent and collector command lines the chart renders, run as
local processes, put an event capture into the bucket.

The chart is rendered by the real Helm engine (helm-python-sdk) with the collector on and
``captureOn: LinkFlapping``. The DaemonSet's agent container and the Deployment's collector container
are then run as they are rendered, their arguments and environment untouched but for what a cluster
provides: the downward API's fields, the mounts (each pod path is mapped to a local one, and a pod
path nobody mapped fails the test), the Service's DNS name (resolved to the collector's address, as
cluster DNS would) and the API server (the TokenReview stand-in of the unit tests; no API server runs
here). The bucket is a real SeaweedFS. A rail of the node namespace flaps three times: the agent's
event capture must be stored under the fleet's prefix with its ``.sha256``, accepted with the token of
the ServiceAccount the chart gave the agent.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_netns import PORT, flap, get, wait_for
from tests.support.collector_env import AWS_ENV, BUCKET, Weed, free_port
from tests.support.netns import RailNetns

try:
    import helm_python as helm
    import yaml
except (ImportError, OSError) as exc:
    pytest.skip(f"needs helm-python-sdk and PyYAML: {exc}", allow_module_level=True)

from tests.support.tokenreview import (
    COLLECTOR_SA_TOKEN,
    TokenReviewStandIn,
    sa,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "railscope"
RELEASE, NAMESPACE = "rs", "railscope"
NODE, CLUSTER, PREFIX = "chart-node-1", "chart-e2e", "fleet"
# A projected ServiceAccount token's shape (a JWT for the collector's audience): the collector sends
# only such tokens to TokenReview; the stand-in knows this one.
AGENT_TOKEN = sa("projected-sa-token-of-the-agent")


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], capture_output=True, text=True, check=True, timeout=60)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        chart = helm.Chart.load(CHART)
    except helm.HelmLibraryError as exc:
        pytest.skip(f"helm-python-sdk cannot load its Helm library here: {exc}")
    try:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    finally:
        chart.close()
    return [d for path in sorted(out) if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(out[path]) if d]


def the_container(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


def command_line(c: dict[str, Any], fields: dict[str, str], paths: dict[str, str],
                 urls: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The container's argv and environment as a local process: downward API fields, pod paths and
    cluster URLs replaced; anything else exactly as rendered."""
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
            continue
        value = e["value"]
        for url, local in urls.items():
            value = value.replace(url, local)
        if value.startswith("/"):
            assert value in paths, f"{e['name']}={value}: a pod path the test does not map"
            value = paths[value]
        env[e["name"]] = value
    return [sys.executable, "-m", "agent.cli", *c["args"]], env


class StandIn:
    """The TokenReview stand-in, served from a thread of its own."""

    def __init__(self, tokens: dict[str, dict]) -> None:
        from aiohttp import web

        self.standin = TokenReviewStandIn(tokens)
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self.standin.review)
        self.runner = web.AppRunner(app)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "0.0.0.0", self.port).start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def mgmt(rails: RailNetns) -> Iterator[tuple[str, str]]:
    """A veth between the test's namespace (the collector's) and the node's (the agent's)."""
    host_if = f"rsc-{uuid.uuid4().hex[:8]}"
    net = random.randint(128, 191) * 4
    host, node = f"10.98.{net // 256 + 1}.{net % 256 + 1}", f"10.98.{net // 256 + 1}.{net % 256 + 2}"
    _ip("link", "add", host_if, "type", "veth", "peer", "name", "mgmt0", "netns", rails.node)
    _ip("addr", "add", f"{host}/30", "dev", host_if)
    _ip("link", "set", host_if, "up")
    _ip("-n", rails.node, "addr", "add", f"{node}/30", "dev", "mgmt0")
    _ip("-n", rails.node, "link", "set", "mgmt0", "up")
    try:
        yield host, node
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAILSCOPE_")}
    return subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**base, "PYTHONPATH": str(ROOT), **env}, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(5)


def test_the_rendered_agent_and_collector_store_an_event_capture(rails: RailNetns, mgmt: tuple[str, str],
                                                                 tmp_path: Path) -> None:
    host, node_ip = mgmt
    col_port = free_port()
    docs = render({
        "agent": {"cluster": CLUSTER, "rails": 2, "captureOn": "LinkFlapping", "captureCooldown": "10m",
                  "recorderWindow": "1m", "uploadInterval": "2s"},
        "collector": {"enabled": True, "store": f"s3://{BUCKET}/{PREFIX}", "s3CredentialsSecret": "s3",
                      "tokenSecret": "railscope-tokens", "tokenRoles": ["operator"],
                      # loopback between the processes: plain HTTP, as the chart allows when asked
                      "tls": {"plainHttp": True},
                      "flags": {"port": col_port, "captureCooldown": "0"}},
        # no API server to watch here (the collector is no pod): its own tests run it against the stand-in
        "clusterView": {"enabled": False},
    })
    agent_c, collector_c = the_container(docs, "DaemonSet"), the_container(docs, "Deployment")
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "rs-railscope"]

    weed = Weed(tmp_path / "weed")
    weed.start()
    spool, sock = tmp_path / "spool", tmp_path / "run" / "agent.sock"
    sock.parent.mkdir()
    (tmp_path / "agent-token").write_text(AGENT_TOKEN + "\n")
    (tmp_path / "collector-sa-token").write_text(COLLECTOR_SA_TOKEN + "\n")
    (tmp_path / "operator").write_text("operator-token-0123456789abcdef\n")
    (tmp_path / "operator").chmod(0o600)  # token files: their owner's alone
    # What the API server would answer for the agent pod's projected token: its ServiceAccount, as the
    # chart names it, bound to the pod's node.
    standin = StandIn({AGENT_TOKEN: {"username": f"system:serviceaccount:{NAMESPACE}:{sa['metadata']['name']}",
                                     "aud": "railscope-collector",
                                     "extra": {"authentication.kubernetes.io/node-name": [NODE]}}})
    paths = {
        "/host": "/", agent_c_spool(agent_c): str(spool), "/run/railscope/agent.sock": str(sock),
        "/var/run/secrets/railscope/collector-token": str(tmp_path / "agent-token"),
        "/var/run/secrets/kubernetes.io/serviceaccount/token": str(tmp_path / "collector-sa-token"),
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt": "/etc/ssl/certs/ca-certificates.crt",
        "/etc/railscope/tokens/operator": str(tmp_path / "operator"),
    }
    # Token files get the modes their volumes give them in the pods (the agent refuses a token its
    # group or others may read).
    for kind, pod_path in (("DaemonSet", "/var/run/secrets/railscope/collector-token"),
                           ("Deployment", "/var/run/secrets/kubernetes.io/serviceaccount/token"),
                           ("Deployment", "/etc/railscope/tokens/operator")):
        os.chmod(paths[pod_path], pod_mode(docs, kind, pod_path))
    urls = {f"http://rs-railscope-collector.{NAMESPACE}.svc:{col_port}": f"http://{host}:{col_port}",
            "https://kubernetes.default.svc": f"http://{host}:{standin.port}"}
    col_argv, col_env = command_line(collector_c, {"status.podIP": host}, paths, urls)
    agent_argv, agent_env = command_line(agent_c, {"status.hostIP": node_ip, "spec.nodeName": NODE}, paths, urls)
    # The chart connects the halves: the agent is told where the collector is, the collector whose
    # tokens are agents.
    assert agent_env["RAILSCOPE_COLLECTOR"] == f"http://{host}:{col_port}"
    assert f"system:serviceaccount:{NAMESPACE}:rs-railscope" in col_argv
    assert (col_env["RAILSCOPE_RAILS"], agent_env["RAILSCOPE_RAILS"]) == ("2", "2")
    s3 = {"AWS_ACCESS_KEY_ID": AWS_ENV["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}  # the s3CredentialsSecret
    collector = _start(col_argv, {**col_env, **s3, "RAILSCOPE_S3_ENDPOINT_URL": weed.endpoint},
                       tmp_path / "collector.log")
    agent = None
    try:
        assert wait_for(lambda: _ready(f"http://{host}:{col_port}/readyz"), timeout=30, step=0.2), \
            (tmp_path / "collector.log").read_text()[-2000:]
        agent = _start(["ip", "netns", "exec", rails.node, *agent_argv], agent_env, tmp_path / "agent.log")
        assert wait_for(lambda: _ready(f"http://{node_ip}:{PORT}/readyz"), timeout=30, step=0.2), \
            (tmp_path / "agent.log").read_text()[-2000:]
        for _ in range(3):
            flap(rails, 0)

        def stored() -> list[str]:
            return [k for k in weed.objects(f"{PREFIX}/") if k.endswith(".tar.gz")]

        keys = wait_for(stored, timeout=120, step=0.5)
        logs = (tmp_path / "agent.log").read_text()[-3000:] + (tmp_path / "collector.log").read_text()[-3000:]
        assert len(keys) == 1, logs
        (key,) = keys
        assert key.startswith(f"{PREFIX}/{CLUSTER}/") and f"/{NODE}-" in key, key
        assert key + ".sha256" in weed.objects(f"{PREFIX}/"), logs
        assert standin.standin.reviews >= 1
        body = weed.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tf:
            manifest = json.loads(tf.extractfile(next(n for n in tf.getnames()
                                                      if n.endswith("/manifest.json"))).read())  # type: ignore[union-attr]
        failed = [(it.get("path"), it.get("reason")) for it in manifest["items"]
                  if str(it.get("reason", "")).startswith("failed:")]
        # the daemon's event capture read its file steps (they failed while its TrackedHost lacked `.real`)
        assert not failed, failed
    finally:
        if agent is not None:
            _stop(agent)
        _stop(collector)
        standin.stop()
        weed.stop()


def pod_mode(docs: list[dict[str, Any]], kind: str, pod_path: str) -> int:
    """The mode the kubelet gives a file of a projected, secret or configMap volume: the volume's
    defaultMode, else the kubelet's 0644."""
    (doc,) = [d for d in docs if d["kind"] == kind]
    spec = doc["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    (mount,) = [m for m in c["volumeMounts"] if pod_path.startswith(m["mountPath"].rstrip("/") + "/")]
    (vol,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    source = vol.get("projected") or vol.get("secret") or vol.get("configMap") or {}
    return int(source.get("defaultMode", 0o644))


def agent_c_spool(c: dict[str, Any]) -> str:
    return next(e["value"] for e in c["env"] if e["name"] == "RAILSCOPE_SPOOL")


def _ready(url: str) -> bool:
    try:
        return get(url, timeout=2)[0] == 200
    except OSError:
        return False
