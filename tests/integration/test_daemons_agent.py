"""The running agent watches the daemons a rail depends on: an ``ovs-vswitchd`` run from its install
path as a container runs it (a copy of sleep(1) bound at /usr/sbin/ovs-vswitchd in a mount namespace
of its own) appears in ``railscope_daemon_*``, and a kill and restart of it is counted, while a
user's copy of the same binary under the same name, killed and started again too, is never a daemon;
its budget guard serves its limits beside the agent's own series."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.agent_netns import StartAgent, value, wait_for
from tests.support.daemons import can_install, in_user_session, install

pytestmark = pytest.mark.netns


@pytest.mark.skipif(not can_install() or in_user_session(), reason="needs root and unshare outside a user's session")
def test_the_agent_exports_a_daemons_processes_and_counts_its_restarts(start_agent: StartAgent,
                                                                      tmp_path: Path) -> None:
    sleep = shutil.which("sleep") or "/bin/sleep"
    copy = tmp_path / "ovs-vswitchd"
    shutil.copy(sleep, copy)
    procs = [install(sleep, "/usr/sbin/ovs-vswitchd", "600"), subprocess.Popen([str(copy), "600"])]
    try:
        agent = start_agent("--processes-interval", "1s", "--budget-cpu", "2", "--budget-rss", "1Gi")

        def seen(n: float) -> bool:
            got = value(agent.metrics(), "railscope_daemon_processes", daemon="ovs-vswitchd")
            return got is not None and got >= n

        assert wait_for(lambda: seen(1), 20, 0.2), agent.metrics()
        text = agent.metrics()
        assert value(text, "railscope_daemon_resident_memory_bytes", daemon="ovs-vswitchd")
        assert value(text, "railscope_daemon_start_time_seconds", daemon="ovs-vswitchd") > time.time() - 60
        # the budget guard runs beside the agent's own collector: one family per name
        assert value(text, "railscope_agent_budget_limit", resource="rss") == 1 << 30
        types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
        assert len(types) == len(set(types)), sorted(t for t in types if types.count(t) > 1)
        before = value(text, "railscope_daemon_restarts_total", daemon="ovs-vswitchd")
        # the user's copy, killed and started again: no restart of the daemon
        procs[1].kill()
        procs[1].wait(10)
        procs.append(subprocess.Popen([str(copy), "600"]))
        time.sleep(2.5)
        text = agent.metrics()
        assert value(text, "railscope_daemon_processes", daemon="ovs-vswitchd") == 1
        assert value(text, "railscope_daemon_restarts_total", daemon="ovs-vswitchd") == before
        procs[0].kill()
        procs[0].wait(10)
        time.sleep(1.5)  # one sample without it
        procs.append(install(sleep, "/usr/sbin/ovs-vswitchd", "600"))  # back, as a supervisor restarts it

        def restarted() -> bool:
            got = value(agent.metrics(), "railscope_daemon_restarts_total", daemon="ovs-vswitchd")
            return got is not None and got >= (before or 0) + 1

        assert wait_for(restarted, 20, 0.2), agent.metrics()
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
