"""``railscope agent`` as a whole process inside a network namespace with veth rails.

The agent runs in the node namespace (``ip netns exec``) and listens on a management veth whose
other end is in the test's own namespace, so the test (and a real Prometheus) reach it at an
address inside the test netns, and the agent never binds to all addresses. Flaps are real: the
rail's peer in the switch namespace goes down and up, as a cable pull would.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support.agent_netns import (
    PORT,
    TOKEN,
    RunningAgent,
    StartAgent,
    flap,
    get,
    spooled,
    value,
    wait_for,
)
from tests.support.netns import RailNetns

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check, timeout=60)


def test_four_flaps_raise_link_flapping_within_two_seconds_of_the_third(start_agent: StartAgent) -> None:
    agent = start_agent()
    rails = agent.rails
    losses = []
    for n in range(4):
        losses.append(flap(rails, 0))
        if n == 2:
            third = losses[2]
            found = wait_for(lambda: [e for e in agent.events() if e["code"] == "LinkFlapping"], timeout=2.5)
            seen_at = time.time()
            assert found, f"no LinkFlapping event after the third loss:\n{agent.log_path.read_text()[-3000:]}"
            assert seen_at - third <= 2.0 + 0.5  # the poll itself may overshoot by one step
            assert found[0]["ts"] - third <= 2.0
    events = [e for e in agent.events() if e["code"] == "LinkFlapping"]
    assert [(e["subject"], e["severity"]) for e in events] == [("net_rail0", "warning")]  # one per episode
    text = agent.metrics()
    assert value(text, "railscope_events_total", code="LinkFlapping") == 1.0
    assert value(text, "railscope_rail_carrier_down_changes_total", device="net_rail0") is not None
    logged = [x for x in agent.logs() if x.get("event") == "LinkFlapping"]
    assert len(logged) == 1 and logged[0]["subject"] == "net_rail0"
    assert agent.stop() == 0  # SIGTERM: a clean stop
    assert any(x.get("msg") == "agent stopped" for x in agent.logs())


def test_500_veths_created_and_deleted_at_once_leave_the_agent_responsive(start_agent: StartAgent) -> None:
    agent = start_agent()
    rails = agent.rails
    create = "".join(f"link add vs{i} type veth peer name vp{i}\n" for i in range(500))
    delete = "".join(f"link del vs{i}\n" for i in range(500))
    worst = 0.0
    for batch in (create, delete):
        proc = subprocess.Popen(["ip", "-n", rails.node, "-batch", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None
        proc.stdin.write(batch)
        proc.stdin.close()
        # While the kernel announces 1,000 new netdevs, the agent keeps answering.
        while proc.poll() is None:
            t0 = time.monotonic()
            status, _ = agent.get("/healthz", timeout=10)
            worst = max(worst, time.monotonic() - t0)
            assert status == 200
            time.sleep(0.02)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        for _ in range(20):
            t0 = time.monotonic()
            text = agent.metrics()
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.05)
    assert worst < 2.0, f"an answer took {worst:.2f} s during the storm"
    text = wait_for(lambda: (t := agent.metrics()) and value(t, "railscope_agent_link_queue_length") == 0 and t, 10)
    assert text
    assert value(text, "railscope_agent_link_messages_total") >= 1000
    assert value(text, "railscope_agent_link_queue_length") <= value(text, "railscope_agent_link_queue_capacity")
    assert value(text, "railscope_agent_resident_memory_bytes") < 200 * 2**20
    assert value(text, "railscope_rail_up", device="net_rail0") == 1.0
    status, _ = agent.get("/readyz")
    assert status == 200
    assert agent.proc.poll() is None
    assert not [x for x in agent.logs() if x.get("level") == "error" or "exc" in x]


def test_interfaces_removed_while_samples_run_break_nothing(start_agent: StartAgent) -> None:
    agent = start_agent("--links-interval", "0.5s", "--counters-interval", "0.2s")
    rails = agent.rails
    end = time.monotonic() + 4
    n = 0
    while time.monotonic() < end:
        # A rail-named veth comes and goes while the counters read every rail's ethtool statistics.
        _ip("-n", rails.node, "link", "add", "net_rail2", "type", "veth", "peer", "name", "churn2")
        _ip("-n", rails.node, "link", "set", "net_rail2", "up")
        time.sleep(random.uniform(0.0, 0.3))
        _ip("-n", rails.node, "link", "del", "net_rail2")
        n += 1
    _ip("-n", rails.node, "link", "del", "net_rail1")  # the peer goes with it
    text = wait_for(lambda: (t := agent.metrics()) and
                    value(t, "railscope_finding", code="RailMissing", subject="net_rail1") and t, 10)
    assert text, agent.metrics()
    assert value(text, "railscope_rail_up", device="net_rail0") == 1.0
    for src in ("links", "counters"):
        assert value(text, "railscope_scrape_collector_success", source=src) == 1.0
    assert agent.proc.poll() is None
    assert not [x for x in agent.logs() if x.get("level") == "error" or "exc" in x], agent.log_path.read_text()


def test_a_hung_source_is_reported_while_metrics_stay_fast(start_agent: StartAgent, tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    pids = tmp_path / "pids"
    # A devlink that never answers, as one stuck in the driver would (only the sleep is fake).
    (fake / "devlink").write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n")
    (fake / "devlink").chmod(0o755)
    agent = start_agent("--source-deadline", "2s", "--command-timeout", "300s",
                        env={"PATH": f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    try:
        text = wait_for(lambda: (t := agent.metrics()) and value(t, "railscope_source_hung", source="devlink") and t, 10)
        assert text, agent.metrics()
        runs_before = value(text, "railscope_agent_source_runs_total", source="counters")
        slowest = 0.0
        for _ in range(30):
            t0 = time.monotonic()
            text = agent.metrics()
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.05)
        assert slowest < 1.0
        assert value(text, "railscope_source_hung", source="devlink") == 1.0
        assert value(text, "railscope_sample_age_seconds") < 15.5
        assert value(text, "railscope_agent_source_runs_total", source="counters") > runs_before
        assert value(text, "railscope_rail_up", device="net_rail0") == 1.0
        # A capture meanwhile skips the stuck tool instead of starting a second stuck copy of it.
        from agent.clients.agent import fetch_image

        fetch_image(agent.url, str(tmp_path / "image"), reason="test", timeout_s=60, token=TOKEN)
        manifest = json.loads((tmp_path / "image" / "manifest.json").read_text())
        skipped = [it for it in manifest["items"] if (it.get("argv") or [""])[0] == "devlink"]
        assert skipped and all(it.get("skipped") or it.get("rc") is None for it in skipped), skipped
        assert len(pids.read_text().split()) == 1  # never started twice while stuck
        hung_logs = [x for x in agent.logs() if x.get("msg") == "source hung"]
        assert hung_logs and hung_logs[0]["source"] == "devlink"
        assert agent.stop() == 0  # a read stuck in a worker never blocks the exit
    finally:
        for pid in pids.read_text().split() if pids.exists() else ():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_an_image_recorded_from_the_agent_carries_traffic_losses_and_events(start_agent: StartAgent,
                                                                           tmp_path: Path) -> None:
    from agent.clients.agent import fetch_image

    agent = start_agent("--counters-interval", "0.5s")
    rails = agent.rails
    time.sleep(1.2)
    rails.send_udp(0, 3000)
    for _ in range(3):
        flap(rails, 0)
    assert wait_for(lambda: [e for e in agent.events() if e["code"] == "LinkFlapping"], timeout=5)
    time.sleep(1.2)
    image = tmp_path / "image"
    # The operator's way: `railscope record --agent URL -o DIR`.
    (tmp_path / "tok").write_text(TOKEN)
    (tmp_path / "tok").chmod(0o600)  # a token file readable by others is refused
    res = subprocess.run([sys.executable, "-m", "agent.cli", "record", "--agent", agent.url, "-o", str(image),
                          "--reason", "test", "--agent-token-file", str(tmp_path / "tok")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr

    lines = [json.loads(x) for x in (image / "recorder.jsonl").read_text().splitlines()]
    rail0 = [x["counters"] for x in lines if x["netdev"] == "net_rail0"]
    assert len(rail0) >= 4
    assert rail0[-1]["rx_packets"] - rail0[0]["rx_packets"] >= 3000
    assert rail0[-1]["carrier_down_count"] - rail0[0]["carrier_down_count"] == 3
    events = json.loads((image / "events.json").read_text())["events"]
    assert [(e["code"], e["subject"]) for e in events] == [("LinkFlapping", "net_rail0")]

    res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(image), "--json",
                          "--rails", "2"], capture_output=True, text=True, timeout=120)
    assert res.returncode in (1, 2), res.stderr
    doc = json.loads(res.stdout)
    flapping = [f for f in doc["findings"] if f["code"] == "LinkFlapping"]
    assert [(f["severity"], f["subject"]) for f in flapping] == [("warning", "net_rail0")]

    archive = tmp_path / "image.tar.gz"
    fetch_image(agent.url, str(archive), unpack=False, token=TOKEN)
    with tarfile.open(archive) as tf:
        assert any(n.endswith("/recorder.jsonl") for n in tf.getnames())


def test_a_real_prometheus_scrapes_the_per_rail_series(start_agent: StartAgent, tmp_path: Path) -> None:
    prom = "/usr/bin/prometheus"
    if not os.access(prom, os.X_OK):
        pytest.skip("Prometheus is not installed at /usr/bin/prometheus (Debian package prometheus)")
    agent = start_agent()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: railscope\n    static_configs:\n"
        f"      - targets: ['{agent.addr}:{PORT}']\n        labels: {{node: test-node}}\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([prom, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def query(q: str) -> list[dict]:
            try:
                status, body = get(f"http://127.0.0.1:{port}/api/v1/query?" +
                                   urllib.parse.urlencode({"query": q}), timeout=5)
            except OSError:
                return []
            if status != 200:
                return []
            return json.loads(body)["data"]["result"]

        got = wait_for(lambda: len(query("railscope_rail_up")) == 2 and query("railscope_rail_up"), 30, 0.5)
        assert got, (tmp_path / "prometheus.log").read_text()[-2000:]
        by_device = {r["metric"]["device"]: r for r in got}
        assert set(by_device) == {"net_rail0", "net_rail1"}
        m = by_device["net_rail0"]["metric"]
        assert (m["rail"], m["job"], m["node"], m["instance"]) == ("0", "railscope", "test-node", f"{agent.addr}:{PORT}")
        assert by_device["net_rail0"]["value"][1] == "1"
        mtu = query('railscope_rail_mtu_bytes{device="net_rail1"}')
        assert mtu and mtu[0]["value"][1] == "9000" and mtu[0]["metric"]["rail"] == "1"
        assert query('up{job="railscope"}')[0]["value"][1] == "1"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_plain_tcp_request_to_a_data_endpoint_is_refused(start_agent: StartAgent) -> None:
    agent = start_agent()
    for path in ("/v1/events", "/v1/recorder", "/v1/image"):
        status, body = agent.get(path, token=None)
        assert status == 401, (path, body)
        status, _ = agent.get(path, token="guessed-token")
        assert status == 401, path
    assert agent.get("/metrics", token=None)[0] == 200
    assert agent.get("/healthz", token=None)[0] == 200
    assert agent.get("/v1/events")[0] == 200  # with the token from --data-token-file
    # Guessing is bounded per address (MAX_FAILED_PER_PEER wrong tokens a window), logged once per lockout,
    # not once per guess: the agent listens on the node's address, where no NetworkPolicy applies.
    from agent.service.data_access import MAX_FAILED_PER_PEER

    for _ in range(MAX_FAILED_PER_PEER - 3):
        assert agent.get("/v1/events", token="guessed-token")[0] == 401
    assert agent.get("/v1/events")[0] == 429  # even the right token waits out the window
    locked = [x for x in agent.logs() if x.get("msg") == "data endpoint: too many wrong tokens, refused for a while"]
    assert len(locked) == 1 and locked[0]["path"] == "/v1/events"


def test_flaps_capture_one_bundle_into_the_spool_and_the_cooldown_holds(start_agent: StartAgent,
                                                                         tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sock = tmp_path / "agent.sock"
    agent = start_agent("--capture-on", "LinkFlapping", "--capture-cooldown", "10m", "--spool", str(spool),
                        "--data-socket", str(sock), "--recorder-window", "1m")
    rails = agent.rails
    for _ in range(2):
        flap(rails, 0)
    rails.set_peer(0, "down")  # the third loss raises LinkFlapping; the cable is back 0.6 s later
    time.sleep(0.6)
    rails.set_peer(0, "up")
    assert wait_for(lambda: [e for e in agent.events() if e["code"] == "LinkFlapping"], timeout=5)
    bundles = wait_for(lambda: spooled(spool), timeout=90, step=0.2)
    assert len(bundles) == 1, agent.log_path.read_text()[-3000:]
    assert oct(spool.stat().st_mode & 0o777) == "0o700"
    for _ in range(10):
        flap(rails, 0)
    time.sleep(3)
    text = agent.metrics()
    assert value(text, "railscope_captures_total", trigger="event", outcome="ok") == 1.0
    assert len(spooled(spool)) == 1  # ten more flaps inside the cooldown: no second bundle
    sidecar = json.loads(bundles[0].with_name(bundles[0].name[: -len(".tar.gz")] + ".json").read_text())
    assert sidecar["reason"].startswith("event LinkFlapping") and sidecar["node"]
    # the bundle carries the live flight recorder and the event, and replays to the flapping finding
    res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--from", str(bundles[0]), "--json",
                          "--rails", "2"], capture_output=True, text=True, timeout=120)
    doc = json.loads(res.stdout)
    with tarfile.open(bundles[0]) as tf:
        names = tf.getnames()
        ev_name = next(n for n in names if n.endswith("/events.json"))
        spooled_events = json.loads(tf.extractfile(ev_name).read())["events"]  # type: ignore[union-attr]
    assert [e["code"] for e in spooled_events] == ["LinkFlapping"]
    assert [f["subject"] for f in doc["findings"] if f["code"] == "LinkFlapping"] == ["net_rail0"], \
        (doc["findings"], doc.get("unavailable"), spooled_events)
    # LinkFlapping fired at the third loss, the cable back a moment later: the capture waited for the
    # rail to settle, so the bundle shows it up, and its manifest says when it came back
    assert not [f for f in doc["findings"] if f["code"] == "RailLinkDown"], doc["findings"]
    with tarfile.open(bundles[0]) as tf:
        manifest = json.loads(tf.extractfile(next(n for n in names if n.endswith("/manifest.json"))).read())  # type: ignore[union-attr]
    assert manifest["notes"][0].startswith("settle: waited ") and "net_rail0 came back up at" in manifest["notes"][0]
    # kubectl exec ... railscope capture: through the data socket, no token
    res = agent.rails.railscope("capture", "-o", f"{tmp_path}/manual/", "--agent", f"unix:{sock}", timeout=180)
    assert res.returncode == 0, res.stderr
    path = Path(res.stdout.split()[0])
    assert path.name.endswith(".tar.gz") and len(path.name) > 7, res.stdout + res.stderr
    with tarfile.open(path) as tf:
        top = path.name[: -len(".tar.gz")]
        events = json.loads(tf.extractfile(f"{top}/events.json").read())["events"]  # type: ignore[union-attr]
        lines = tf.extractfile(f"{top}/recorder.jsonl").read().decode().splitlines()  # type: ignore[union-attr]
    assert any(e["code"] == "LinkFlapping" for e in events)
    assert len({json.loads(x)["ts"] for x in lines}) > 2  # the agent's 1 s samples, not two of its own


def _kernel_downs(rails: RailNetns, rail: int) -> int:
    """The kernel's own count of the rail's carrier losses (``ip netns exec`` mounts the namespace's /sys)."""
    return int(rails.exec(["cat", f"/sys/class/net/net_rail{rail}/carrier_down_count"], check=True).stdout)


def _rail_state(agent: RunningAgent) -> tuple[float | None, float | None, float | None]:
    """(railscope_rail_up, the RailLinkDown finding, carrier_down_changes_total) of net_rail0, as served."""
    text = agent.metrics()
    return (value(text, "railscope_rail_up", device="net_rail0"),
            value(text, "railscope_finding", code="RailLinkDown", subject="net_rail0"),
            value(text, "railscope_rail_carrier_down_changes_total", device="net_rail0"))


def test_a_rails_carrier_change_is_served_within_one_second(start_agent: StartAgent) -> None:
    """The links dump runs every 15 s; a rail's link message alone must update its state, its metrics
    and its findings."""
    agent = start_agent()
    rails = agent.rails
    up, finding, _downs = _rail_state(agent)
    assert (up, finding) == (1.0, None)
    rails.set_peer(0, "down")
    t0 = time.monotonic()
    got = wait_for(lambda: (s := _rail_state(agent))[0] == 0.0 and s[1] == 1.0 and s, timeout=1.0)
    took = time.monotonic() - t0
    assert got and took <= 1.0, f"after {took:.2f} s net_rail0 is served as {_rail_state(agent)}"
    rails.set_peer(0, "up")
    t0 = time.monotonic()
    got = wait_for(lambda: (s := _rail_state(agent))[0] == 1.0 and s[1] is None and s, timeout=1.0)
    took = time.monotonic() - t0
    assert got and took <= 1.0, f"after {took:.2f} s net_rail0 is served as {_rail_state(agent)}"
    for _ in range(3):  # four carrier losses in all
        flap(rails, 0)
    kernel = _kernel_downs(rails, 0)
    assert kernel >= 4
    got = wait_for(lambda: (s := _rail_state(agent))[2] == kernel and s[0] == 1.0 and s, timeout=1.0)
    assert got, f"carrier_down_changes_total {_rail_state(agent)[2]}, the kernel's carrier_down_count {kernel}"
    assert agent.proc.poll() is None
    assert not [x for x in agent.logs() if x.get("level") == "error" or "exc" in x], agent.log_path.read_text()


def test_a_node_without_rails_warns_in_the_log_on_readyz_and_serves_railscope_rails_0(
        start_agent: StartAgent) -> None:
    """Netdevs no template matches, no rule, no --rail-map and --rails 0: the agent serves, and says that it
    judges nothing per rail, never an exposition without a rail that looks healthy."""
    agent = start_agent("--rails", "0", "--net-template", "gpu%rail_id%")
    status, body = agent.get("/readyz")
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "ready" and doc["warnings"][0].startswith("no rails found:"), doc
    assert "--rail-map RAIL=PCI" in doc["warnings"][0]
    text = agent.metrics()
    assert value(text, "railscope_rails") == 0.0 and value(text, "railscope_rail_up", device="net_rail0") is None
    warned = [x for x in agent.logs() if x.get("msg", "").startswith("no rails found:")]
    assert len(warned) == 1 and warned[0]["level"] == "warning", agent.log_path.read_text()[-3000:]


def test_capture_on_without_a_spool_stops_the_agent_at_start(rails: RailNetns) -> None:
    res = rails.railscope("agent", "--listen", "127.0.0.1", "--capture-on", "LinkFlapping", timeout=60)
    assert res.returncode == 3, res.stderr
    assert "--capture-on LinkFlapping: event captures are written into the spool, and none is given" in res.stderr
