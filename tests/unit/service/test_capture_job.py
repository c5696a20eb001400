"""Every capture of the daemon is one of its jobs: a collector's request too takes the firmware gate
its 1 s sampler holds, and counts in ``railscope_captures`` (the daemon over a node image)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from agent.capture.job import Job
from agent.config import AgentSettings
from agent.host.recorded import open_image
from agent.service.daemon import Agent
from proto.keys import bundle_id
from proto.requests import CaptureRequest

NODE = "gpu-node-017"


class _Noted:
    """A node image that notes each firmware read of net_rail0 as it reaches it, and whether the
    sampler was holding that NIC's firmware lock then."""

    def __init__(self, inner: Any, reads: list[tuple[str, bool]], sampling: threading.Event) -> None:
        self.inner, self.reads, self.sampling = inner, reads, sampling

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def ethtool_stats(self, ifname: str) -> Any:
        self.reads.append((f"ETHTOOL_GSTATS {ifname}", self.sampling.is_set()))
        return self.inner.ethtool_stats(ifname)

    def run(self, argv: Any, timeout_s: float = 10.0, max_bytes: int = 8 << 20, **kw: Any) -> Any:
        if argv[0] == "ethtool" and argv[1] in ("-S", "-m"):
            self.reads.append((" ".join(argv), self.sampling.is_set()))
        return self.inner.run(argv, timeout_s, max_bytes, **kw)


def test_a_collector_request_waits_for_the_samplers_firmware_read_and_counts(example_image: Path,
                                                                              tmp_path: Path) -> None:
    reads: list[tuple[str, bool]] = []
    sampling = threading.Event()
    agent = Agent(AgentSettings(port=0, watch_links=False, node=NODE, cluster="lab", capture_deadline_s=60),
                  host_factory=lambda: _Noted(open_image(str(example_image)), reads, sampling))
    now = int(time.time())
    req = CaptureRequest(id=bundle_id("inc-fw", NODE, "node-bundle/v1"), incident="inc-fw", node=NODE,
                      plan="node-bundle", plan_version=1, params={"pod_netns": False, "redact": False}, created=now,
                      expires=now + 600, alertname="RailscopePfcStorm")
    held = threading.Event()

    def sampler() -> None:  # the 1 s sampler's read of net_rail0 (PCI function 0000:0c:00.0), slow
        assert agent.firmware.acquire("0000:0c:00.0", 5)
        sampling.set()
        held.set()
        time.sleep(1.0)
        sampling.clear()
        agent.firmware.release("0000:0c:00.0")

    th = threading.Thread(target=sampler)
    th.start()
    assert held.wait(5)
    got = agent.run_request(Job.for_request(req, agent.settings), str(tmp_path))
    th.join()
    rail0 = [r for r in reads if r[0].endswith(" net_rail0")]
    assert rail0 and [what for what, during in rail0 if during] == []
    assert Path(got.path).name == f"{NODE}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.tar.gz"
    text = generate_latest(agent.registry).decode()
    assert 'railscope_captures_total{outcome="ok",trigger="request"} 1.0' in text, \
        [line for line in text.splitlines() if "captures" in line]
