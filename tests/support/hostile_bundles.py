"""Hostile bundles for the collector's limits: small archives that unpack into what a page could
render without bound (tens of thousands of events, a recorder naming tens of thousands of netdevs).

Built from the ``spectrumx-2rail-healthy`` node image; ``events.json`` and ``recorder.jsonl`` are
replaced, everything else is the image as it is.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

IMAGES = Path(__file__).resolve().parents[1] / "images"
BASE = "spectrumx-2rail-healthy"
CAPTURED = 1793197200


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    tf.addfile(info, io.BytesIO(data))


def hostile_bundle(events: int = 70_000, message: int = 300, netdevs: int = 0) -> bytes:
    """A ``tar.gz`` of the base image with ``events`` events of ``message`` characters each and a
    recorder of two samples for each of ``netdevs`` netdevs."""
    evs = [{"ts": CAPTURED - events + i, "code": "LinkFlapping", "severity": "warning",
            "subject": f"net_rail{i % 2}", "message": ("x" * message)[:message]} for i in range(events)]
    rec = []
    for i in range(netdevs):
        for k in (0, 1):
            rec.append(json.dumps({"netdev": f"eth{i}", "ts": CAPTURED - 10 + 10 * k,
                                   "counters": {"tx_prio3_pause": 100 * k * i, "rx_prio3_pause": 50 * k,
                                                "carrier_down_count": k}}))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tf:
        for p in sorted((IMAGES / BASE).rglob("*")):
            rel = p.relative_to(IMAGES / BASE)
            if p.is_file() and str(rel) not in ("events.json", "recorder.jsonl", "expected.json", "README.md"):
                _add(tf, f"{BASE}/{rel}", p.read_bytes())
        _add(tf, f"{BASE}/events.json", json.dumps({"events": evs}).encode())
        if netdevs:
            _add(tf, f"{BASE}/recorder.jsonl", ("\n".join(rec) + "\n").encode())
    return buf.getvalue()
