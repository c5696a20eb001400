"""A daemon's own captures, read back from what they stored: ``railscope agent --capture-on`` in a
network namespace with veth rails, the rail flapped for real, the spooled bundle opened.

Each file step of the capture plug-ins (``/proc/cmdline``, ``/etc/modprobe.d/*`` ...) must be in the
bundle with its bytes, the same as ``railscope capture`` stores them, never a failed step.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.support.agent_netns import StartAgent, flap, spooled, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow]



def _manifest(bundle: Path) -> tuple[dict, dict[str, int]]:
    """The bundle's manifest and the size of each member (path inside the bundle -> bytes)."""
    with tarfile.open(bundle) as tf:
        sizes = {m.name.split("/", 1)[1]: m.size for m in tf.getmembers() if m.isfile() and "/" in m.name}
        top = bundle.name[: -len(".tar.gz")]
        doc = json.loads(tf.extractfile(f"{top}/manifest.json").read())  # type: ignore[union-attr]
    return doc, sizes


def test_an_event_capture_stores_every_file_step_with_its_bytes(start_agent: StartAgent, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    agent = start_agent("--capture-on", "LinkFlapping", "--spool", str(spool))
    for _ in range(3):
        flap(agent.rails, 0)
    bundles = wait_for(lambda: spooled(spool), timeout=90, step=0.2)
    assert len(bundles) == 1, agent.log_path.read_text()[-3000:]
    failed_logs = [x for x in agent.logs() if x.get("msg") == "capture step failed"]
    assert failed_logs == [], failed_logs[:3]
    doc, sizes = _manifest(bundles[0])
    items = {it["path"]: it for it in doc["items"]}
    failed = {p: it["reason"] for p, it in items.items() if str(it.get("reason") or "").startswith("failed")}
    assert failed == {}
    # Every node has a kernel command line; the plug-in's file step stores it, bytes and all.
    cmdline = items.get("fs/proc/cmdline")
    assert cmdline is not None and not cmdline.get("skipped"), cmdline
    assert cmdline["bytes"] > 0 and sizes["fs/proc/cmdline"] == cmdline["bytes"]
    # Every file item that is not skipped has its bytes in the bundle, and they are not all empty.
    files = [it for it in doc["items"] if it["kind"] == "file" and not it.get("skipped")]
    assert files
    for it in files:
        if it["path"] in sizes:
            assert sizes[it["path"]] == it["bytes"], it
    plugin_files = [it for it in files if it.get("plugin") not in (None, "replay") and it["path"] in sizes]
    assert plugin_files and any(sizes[it["path"]] > 0 for it in plugin_files)



#: In the node namespace: the daemon (its live host) serves a collector's request while its 1 s sampler
#: is in the middle of a firmware read of net_rail0 (it holds that NIC's firmware lock for 3 s). The
#: live host is wrapped to note when each firmware read of net_rail0 reached it.
_REQUEST_WHILE_SAMPLING = r'''
import json, tempfile, threading, time
from prometheus_client import generate_latest
from agent.config import AgentSettings
from agent.host.live import LiveHost
from agent.service.daemon import Agent
from agent.capture.job import Job
from proto.keys import bundle_id
from proto.requests import CaptureRequest

reads = []  # (what, while the sampler held the lock)
sampling = threading.Event()

class NotedHost(LiveHost):
    def ethtool_stats(self, ifname):
        reads.append(("ETHTOOL_GSTATS " + ifname, sampling.is_set()))
        return super().ethtool_stats(ifname)

    def run(self, argv, timeout_s=None, max_bytes=8 << 20):
        if argv[0] == "ethtool" and argv[1] in ("-S", "-m"):
            reads.append((" ".join(argv), sampling.is_set()))
        return super().run(argv, timeout_s, max_bytes)

agent = Agent(AgentSettings(port=0, watch_links=False, node="gpu-node-017", cluster="lab", capture_deadline_s=60),
              host_factory=lambda: NotedHost("/"))
now = int(time.time())
req = CaptureRequest(id=bundle_id("inc-fw", "gpu-node-017", "node-bundle/v1"), incident="inc-fw", node="gpu-node-017",
                  plan="node-bundle", plan_version=1, params={"pod_netns": False, "redact": False}, created=now,
                  expires=now + 600, alertname="RailscopePfcStorm")

def sampler():
    HOLD(agent, "net_rail0")
    sampling.set()
    time.sleep(3)
    sampling.clear()
    RELEASE(agent, "net_rail0")

th = threading.Thread(target=sampler)
th.start()
while not sampling.is_set():
    time.sleep(0.01)
agent.run_request(Job.for_request(req, agent.settings), tempfile.mkdtemp())
th.join()
captures = [line for line in generate_latest(agent.registry).decode().splitlines()
            if line.startswith("railscope_captures_total")]
print(json.dumps({"reads": [r for r in reads if r[0].endswith("net_rail0")], "captures": captures}))
'''

#: how the test holds the sampler's firmware lock of one NIC
_HOLD = ("def HOLD(agent, dev):\n    assert agent.firmware.acquire(dev, 5)\n"
         "def RELEASE(agent, dev):\n    agent.firmware.release(dev)\n")


def test_a_collector_request_waits_for_the_samplers_firmware_read_and_is_counted(rails) -> None:  # type: ignore[no-untyped-def]
    out = rails.python(_HOLD + _REQUEST_WHILE_SAMPLING, timeout=180)
    reads = out["reads"]  # type: ignore[index]
    # The request's capture read net_rail0's firmware (statistics, module EEPROM) ...
    assert any(what.startswith("ETHTOOL_GSTATS") for what, _ in reads), reads
    # ... but never while the sampler was reading it: one firmware read at a time per NIC.
    assert [what for what, during in reads if during] == []
    # The request's capture is one of the daemon's captures, in railscope_captures.
    assert any('trigger="request"' in line for line in out["captures"]), out["captures"]  # type: ignore[index]
