"""``railscope doctor --from BUNDLE`` with the incident's cluster slice beside it: the operators' intent against
the node (RailIntentMismatch), as the collector stores the slice (collector/cluster/slice.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from agent.analysis.rollout import KIND_BY_KEY
from collector.cluster.slice import pack
from tests.support import kube_cluster

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "tests" / "images" / "spectrumx-2rail-healthy"  # gpu-node-017: net_rail0 0000:0c:00.0, net_rail1 0000:8d:00.0
BY_KIND = {k.kind: k.key for k in KIND_BY_KEY.values()}


def _slice(d: Path, netdev1: str) -> None:
    objects: dict[str, list[dict]] = {}
    for obj in kube_cluster.scenario("healthy", nodes=1, nics=2):
        key = BY_KIND.get(obj["kind"])
        if key:
            objects.setdefault(key, []).append(obj)
    pcis = ["0000:0c:00.0", "0000:8d:00.0"]
    for k, dev in enumerate(objects["nicdevices"]):
        dev["status"]["node"] = "gpu-node-017"
        dev["status"]["ports"] = [{"pci": pcis[k], "networkInterface": ["net_rail0", netdev1][k]}]
    objects["nodes"][0]["metadata"]["name"] = "gpu-node-017"
    objects["sriovnetworknodestates"] = []
    (d / "cluster.tar.gz").write_bytes(pack({"schema": "railscope.cluster-snapshot/v1", "taken_at": 0,
                                             "incident": "inc-1", "nodes": ["gpu-node-017"]}, objects))


def doctor(source: Path) -> tuple[int, dict]:
    res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(source), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {"stderr": res.stderr}


def test_the_slice_beside_the_bundle_judges_the_intent(tmp_path: Path) -> None:
    inc = tmp_path / "inc-1"
    inc.mkdir()
    shutil.copytree(IMAGE, inc / IMAGE.name, symlinks=True)
    code, doc = doctor(inc / IMAGE.name)
    assert code == 0 and doc["findings"] == []  # no slice: the node alone
    _slice(inc, "eth_r1")  # the NicDevice says eth_r1 was applied at 0000:8d:00.0; the node has net_rail1
    code, doc = doctor(inc / IMAGE.name)
    assert code == 2, doc  # critical
    (f,) = doc["findings"]
    assert (f["code"], f["subject"], f["evidence"]["field"]) == ("RailIntentMismatch", "net_rail1",
                                                                 "status.ports[].networkInterface")
    _slice(inc, "net_rail1")  # the intent matches the node
    code, doc = doctor(inc / IMAGE.name)
    assert code == 0 and doc["findings"] == []
