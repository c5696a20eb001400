"""Two captures of one node in one incident are two bundles: ``railscope capture --collector`` run
twice (after a fix, to compare) stores both, each under its own bundle id — the second is not a 409."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.collector_env import Collector
from tests.support.netns import RailNetns

from tests.support.collector_helpers import AGENT_TOKEN, write_tokens  # isort: skip

pytestmark = [pytest.mark.netns]


def test_a_second_capture_of_a_node_in_one_incident_is_stored_beside_the_first(rails: RailNetns,
                                                                               tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    # the agent token is bound to the collector's cluster, which the captures name
    col = Collector(tmp_path, str(tmp_path / "store"), "--cluster", "lab", tokens=tokens, netns=rails.node).start()
    token_file = tmp_path / "agent-token"
    token_file.write_text(AGENT_TOKEN)
    token_file.chmod(0o600)
    keys = []
    try:
        for n in range(2):
            out = tmp_path / f"out{n}"
            out.mkdir()
            res = rails.railscope("capture", "-o", str(out) + "/", "--collector", col.url, "--collector-token-file",
                                  str(token_file), "--node", "gpu-node-017", "--cluster", "lab", "--incident",
                                  "inc-twice", "--recorder-gap", "0", timeout=180)
            assert res.returncode == 0, res.stderr
            keys.append(next(line.split()[2] for line in res.stdout.splitlines() if line.startswith("collector ")))
            time.sleep(1.1)  # the capture's time is in whole seconds
    finally:
        col.stop()
    assert keys[0] != keys[1]
    assert {k.split("/")[2] for k in keys} == {"inc-twice"}
    stored = sorted(p.name for p in (tmp_path / "store").rglob("*.tar.gz"))
    assert stored == sorted(k.split("/")[-1] for k in keys)
