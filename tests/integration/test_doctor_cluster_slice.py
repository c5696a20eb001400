"""``railscope doctor --from BUNDLE`` with the incident's cluster slice beside it: the operators' intent against
the node (RailIntentMismatch), as the collector stores the slice (collector/cluster/slice.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from collector.cluster.slice import pack
from tests.support import kube_cluster

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "tests" / "images" / "spectrumx-2rail-healthy"  # gpu-node-017: net_rail0 0000:0c:00.0, net_rail1 0000:8d:00.0


def _slice(d: Path, netdev1: str, mtu: int | None = None) -> None:
    objects = kube_cluster.node_slice_objects("gpu-node-017", [("0000:0c:00.0", "net_rail0"), ("0000:8d:00.0", netdev1)],
                                              mtu=mtu)
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


def test_report_of_a_bundle_with_the_slice_beside_it_shows_the_intent(tmp_path: Path) -> None:
    inc = tmp_path / "inc-1"
    inc.mkdir()
    shutil.copytree(IMAGE, inc / IMAGE.name, symlinks=True)
    _slice(inc, "eth_r1")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "report", str(inc / IMAGE.name)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "RailIntentMismatch" in res.stdout and "net_rail1" in res.stdout
    html = tmp_path / "page.html"
    res = subprocess.run([sys.executable, "-m", "agent.cli", "report", str(inc / IMAGE.name), "--html", str(html)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "RailIntentMismatch" in html.read_text()


def test_the_sriov_states_mtu_against_the_rails_mtu(tmp_path: Path) -> None:
    """SriovNetworkNodeState asks 4200 on both PFs; the node's rails run 9000 (doctor's rails[].mtu)."""
    inc = tmp_path / "inc-1"
    inc.mkdir()
    shutil.copytree(IMAGE, inc / IMAGE.name, symlinks=True)
    _slice(inc, "net_rail1", mtu=4200)
    code, doc = doctor(inc / IMAGE.name)
    assert code == 2, doc
    assert [r["mtu"] for r in doc["rails"]] == [9000, 9000]
    got = sorted((f["code"], f["subject"], f["evidence"]["field"], f["evidence"]["want"], f["evidence"]["node_value"])
                 for f in doc["findings"])
    assert got == [("RailIntentMismatch", n, "spec.interfaces[].mtu", 4200, 9000) for n in ("net_rail0", "net_rail1")]
    _slice(inc, "net_rail1", mtu=9000)  # what SR-IOV asks is what the node has
    code, doc = doctor(inc / IMAGE.name)
    assert code == 0 and doc["findings"] == []
