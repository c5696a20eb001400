"""Which Kubernetes client library: each candidate measured against the API stand-in (issue 30, item 1).

    .venv/bin/python bench/bench_kube_clients.py --nodes 10000 LIB=VENV_PYTHON ...

e.g. ``kubernetes_asyncio=/tmp/kv-kubernetes_asyncio/bin/python lightkube=/tmp/kv-lightkube/bin/python
kr8s=/tmp/kv-kr8s/bin/python`` (each library in a virtual environment of its own, so neither its import time
nor its RSS includes another's). The stand-in serves the fixture cluster over TLS in a process of its own, with
a ServiceAccount directory (token, ca.crt) and ``KUBERNETES_SERVICE_HOST`` / ``_PORT`` as a pod has them. Each
probe, in a fresh process:

1. imports the library (time), loads the in-cluster configuration from that directory;
2. lists every NicDevice in pages of 500 and keeps the library's objects (RSS: ``VmRSS`` before and after);
3. watches NicDevices from the list's resourceVersion; the stand-in then compacts and ends the watch with
   410 Gone, and changes one NicDevice: does the library's own watch loop resume and deliver the change, or
   raise (the caller relists), or loop?
4. the stand-in rotates the token in the file (the kubelet's projected token) and refuses the old one: does
   the next request succeed?
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r'''
import asyncio, json, os, sys, time
T0 = time.perf_counter()
LIB = sys.argv[1]; SA = sys.argv[2]; NS = "nvidia-network-operator"
G, V, P = "configuration.net.nvidia.com", "v1alpha1", "nicdevices"
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
out = {"lib": LIB, "rss_start_mib": rss()}
def say(k, v=None):
    out[k] = v
    print(json.dumps({k: v}), flush=True)
def wait_line():
    return sys.stdin.readline().strip()

async def main():
    if LIB == "kubernetes_asyncio":
        from kubernetes_asyncio import client, config, watch
        from kubernetes_asyncio.client.rest import ApiException
        say("import_s", round(time.perf_counter() - T0, 3))
        say("rss_imported_mib", rss())
        conf = client.Configuration()
        config.incluster_config.InClusterConfigLoader(token_filename=f"{SA}/token", cert_filename=f"{SA}/ca.crt",
                                                      try_refresh_token=True).load_and_set(conf)
        api = client.CustomObjectsApi(client.ApiClient(conf))
        t = time.perf_counter(); items = []; cont = None
        while True:
            r = await api.list_namespaced_custom_object(G, V, NS, P, limit=500, _continue=cont)
            items += r["items"]; cont = r["metadata"].get("continue")
            if not cont: break
        rv = r["metadata"]["resourceVersion"]
        say("list_s", round(time.perf_counter() - t, 2)); say("items", len(items)); say("rss_listed_mib", rss())
        w = watch.Watch()
        seen = []
        async def run():
            try:
                async for ev in w.stream(api.list_namespaced_custom_object, G, V, NS, P, resource_version=rv,
                                         allow_watch_bookmarks=True):
                    seen.append(ev["type"])
                    if ev["type"] == "MODIFIED": return "resumed, change delivered"
            except ApiException as e:
                return f"raised ApiException {e.status} (the caller relists)"
        task = asyncio.ensure_future(run())
        say("watching"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try: say("after_410", await asyncio.wait_for(task, 15))
        except asyncio.TimeoutError: say("after_410", f"nothing in 15 s (events seen: {seen[-3:]})")
        say("rotate"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try:
            await api.list_namespaced_custom_object(G, V, NS, P, limit=1); say("after_rotation", "ok")
        except ApiException as e:
            say("after_rotation", f"HTTP {e.status} (token re-read at most once a minute)")
    elif LIB == "lightkube":
        from lightkube import AsyncClient, KubeConfig
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.core.exceptions import ApiError
        from lightkube.types import on_error_retry
        say("import_s", round(time.perf_counter() - T0, 3)); say("rss_imported_mib", rss())
        NicDevice = create_namespaced_resource(G, V, "NicDevice", P)
        c = AsyncClient(KubeConfig.from_service_account(service_account=SA))
        t = time.perf_counter()
        it = c.list(NicDevice, namespace=NS, chunk_size=500)
        items = [x async for x in it]
        rv = it.resourceVersion
        say("list_s", round(time.perf_counter() - t, 2)); say("items", len(items)); say("rss_listed_mib", rss())
        seen = []
        async def run():
            try:
                async for typ, obj in c.watch(NicDevice, namespace=NS, resource_version=rv, on_error=on_error_retry):
                    seen.append(typ)
                    if typ == "MODIFIED": return f"resumed from scratch, change delivered after {len(seen)} events"
            except ApiError as e:
                return f"raised ApiError {e.status.code}"
        task = asyncio.ensure_future(run())
        say("watching"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try: say("after_410", await asyncio.wait_for(task, 60))
        except asyncio.TimeoutError: say("after_410", f"nothing in 60 s ({len(seen)} events)")
        say("rotate"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try:
            [x async for x in c.list(NicDevice, namespace=NS, chunk_size=1, fields={"metadata.name": "x"})]; say("after_rotation", "ok")
        except ApiError as e:
            say("after_rotation", f"HTTP {e.status.code}")
    elif LIB == "kr8s":
        import kr8s.asyncio
        say("import_s", round(time.perf_counter() - T0, 3)); say("rss_imported_mib", rss())
        api = await kr8s.asyncio.api(serviceaccount=SA)
        kind = f"{P}.{G}"
        t = time.perf_counter()
        items = [x async for x in api.async_get(kind, namespace=NS)]
        say("list_s", round(time.perf_counter() - t, 2)); say("items", len(items)); say("rss_listed_mib", rss())
        rv = max(int(x.metadata.resourceVersion) for x in items)
        seen = []
        async def run():
            async for typ, obj in api.async_watch(kind, namespace=NS, since=str(rv)):
                seen.append(typ)
                if typ == "MODIFIED": return "resumed, change delivered"
        task = asyncio.ensure_future(run())
        say("watching"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try: say("after_410", await asyncio.wait_for(task, 15))
        except asyncio.TimeoutError: say("after_410", f"nothing in 15 s (restarts at the stale resourceVersion)")
        except Exception as e: say("after_410", f"raised {type(e).__name__}")
        say("rotate"); await asyncio.get_running_loop().run_in_executor(None, wait_line)
        try:
            [x async for x in api.async_get(kind, namespace=NS, field_selector="metadata.name=x")]
            say("after_rotation", "ok")
        except Exception as e:
            say("after_rotation", f"raised {type(e).__name__}: {str(e)[:60]}")
    print(json.dumps({"done": out}), flush=True)
asyncio.run(main())
'''


def main() -> int:
    args = sys.argv[1:]
    nodes = 10000
    if args[:1] == ["--nodes"]:
        nodes, args = int(args[1]), args[2:]
    tmp = Path(tempfile.mkdtemp(prefix="kube-clients-"))
    sa = tmp / "sa"
    sa.mkdir()
    (sa / "token").write_text("token-0")
    (sa / "token").chmod(0o600)
    (sa / "namespace").write_text("nvidia-network-operator")
    t = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "tests.support.kube_apiserver", "--scenario", "healthy",
                               "--nodes", str(nodes), "--tls", str(sa), "--token-file", str(sa / "token")],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    url = server.stdout.readline().strip()  # type: ignore[union-attr]
    print(f"stand-in: {url} with {nodes} nodes ({nodes * 8} NicDevices), loaded in {time.perf_counter() - t:.1f} s",
          flush=True)
    host, port = url.removeprefix("https://").split(":")

    def server_cmd(cmd: str) -> str:
        server.stdin.write(cmd + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return server.stdout.readline().strip()  # type: ignore[union-attr]

    results = []
    try:
        for n, spec in enumerate(args):
            lib, py = spec.split("=", 1)
            server_cmd(f"rotate token-{n}x")
            env = {"PATH": os.environ["PATH"], "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
            probe = subprocess.Popen([py, "-c", PROBE, lib, str(sa)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
            res: dict = {}
            for line in probe.stdout:  # type: ignore[union-attr]
                msg = json.loads(line)
                if "watching" in msg:
                    time.sleep(1)
                    server_cmd("expire")
                    time.sleep(0.5)
                    server_cmd("touch gpu-node-00001")
                    probe.stdin.write("go\n")
                    probe.stdin.flush()  # type: ignore[union-attr]
                    time.sleep(8)
                    server_cmd("touch gpu-node-00002")  # type: ignore[union-attr]
                    probe.stdin.flush()  # type: ignore[union-attr]
                elif "rotate" in msg:
                    server_cmd(f"rotate token-{n}-rotated")
                    probe.stdin.write("go\n")  # type: ignore[union-attr]
                    probe.stdin.flush()  # type: ignore[union-attr]
                elif "done" in msg:
                    res = msg["done"]
                else:
                    print(f"  {lib}: {msg}", flush=True)
            probe.wait(timeout=60)
            results.append(res)
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=30)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
