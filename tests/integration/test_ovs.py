"""railscope against a real Open vSwitch: ``ovsdb-server`` on a fresh database and ``ovs-vswitchd``
with the userspace (netdev) datapath, both private to the test (their sockets, pidfiles and logs
in one temporary directory, no system service), the switch inside the rails' node namespace.

The tools and railscope are pointed at it with ``OVS_RUNDIR``, which the OVS tools honour and the
agent passes on; the agent itself only reads, the fixture alone adds the bridge and its ports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
TOOLS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl")
DOCTOR = ("doctor", "--json", "--rails", "2")
GONE = "net_rail0_5"  # a representor-style name of a netdev that does not exist


@dataclass
class Ovs:
    rundir: str
    rails: RailNetns

    def vsctl(self, *args: str) -> str:
        res = subprocess.run(["ovs-vsctl", f"--db=unix:{self.rundir}/db.sock", "--timeout=10", *args],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, f"ovs-vsctl {args}: {res.stderr}"
        return res.stdout

    def interfaces(self) -> dict[str, dict]:
        """What OVS itself reports, one row per interface, straight from ovs-vsctl."""
        doc = json.loads(self.vsctl("--format=json", "--columns=name,type,ifindex,ofport,link_state,error",
                                    "list", "Interface"))
        return {row[0]: dict(zip(doc["headings"], row, strict=True)) for row in doc["data"]}


def _log_tail(path: str) -> str:
    try:
        return "".join(Path(path).read_text(errors="replace").splitlines(keepends=True)[-5:]).strip()
    except OSError:
        return "(no log)"


def _stop(pidfile: str) -> None:
    try:
        pid = int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def ovs(rails: RailNetns, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ovs]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"Open vSwitch not installed (no {', '.join(missing)}): apt-get install openvswitch-switch")
    if not os.path.exists(SCHEMA):
        pytest.skip(f"no OVS schema at {SCHEMA}")
    # A short path: unix socket names are limited to 108 bytes, pytest's tmp_path can be longer.
    rundir = tempfile.mkdtemp(prefix="rs-ovs-")
    # The daemons' defaults (pidfile, control socket, log, db.sock) all follow these variables.
    env = {**os.environ, "OVS_RUNDIR": rundir, "OVS_DBDIR": rundir, "OVS_LOGDIR": rundir,
           "OVS_SYSCONFDIR": rundir, "OVS_PKGDATADIR": "/usr/share/openvswitch"}
    common = ["--pidfile", "--log-file", "--detach", "--no-chdir", "-vconsole:off"]
    try:
        def start(argv: list[str], what: str, log: str) -> None:
            try:
                res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                pytest.skip(f"{what} did not start within 60 s: {_log_tail(log)}")
            if res.returncode != 0:
                pytest.skip(f"{what} cannot start here (exit {res.returncode}): "
                            f"{res.stderr.strip() or _log_tail(log)}")

        start(["ovsdb-tool", "create", f"{rundir}/conf.db", SCHEMA], "ovsdb-tool create", "/dev/null")
        start(["ovsdb-server", f"{rundir}/conf.db", f"--remote=punix:{rundir}/db.sock", *common],
              "ovsdb-server", f"{rundir}/ovsdb-server.log")
        start(["ovs-vsctl", f"--db=unix:{rundir}/db.sock", "--no-wait", "init"], "ovs-vsctl init", "/dev/null")
        # In the node namespace, where the rails are: the switch opens them there. --disable-system:
        # the kernel datapath is never touched, bridges use the userspace one.
        start(["ip", "netns", "exec", rails.node, "ovs-vswitchd", f"unix:{rundir}/db.sock", "--disable-system",
               *common], "ovs-vswitchd", f"{rundir}/ovs-vswitchd.log")
        sw = Ovs(rundir, rails)
        sw.vsctl("add-br", "br0", "--", "set", "Bridge", "br0", "datapath_type=netdev")
        for i in range(2):
            sw.vsctl("add-port", "br0", f"net_rail{i}")
        # What railscope runs inherits this: its readers, its capture and the tools they start.
        monkeypatch.setenv("OVS_RUNDIR", rundir)
        yield sw
    finally:
        _stop(f"{rundir}/ovs-vswitchd.pid")
        _stop(f"{rundir}/ovsdb-server.pid")
        shutil.rmtree(rundir, ignore_errors=True)


def _kernel_ifindex(rails: RailNetns, name: str) -> int:
    res = rails.exec(["cat", f"/sys/class/net/{name}/ifindex"], check=True)
    return int(res.stdout)


def _read_ovs(rails: RailNetns) -> dict[str, dict]:
    code = ("import dataclasses, json\n"
            "from agent.host.live import LiveHost\n"
            "from agent.readers.common import Notes\n"
            "from agent.readers.ovs import read_ovs\n"
            "notes = Notes()\n"
            "with LiveHost('/') as h:\n"
            "    got = read_ovs(h, notes=notes)\n"
            "print(json.dumps(None if got is None else [dataclasses.asdict(i) for i in got]))\n")
    got = rails.python(code)
    assert got is not None, "read_ovs found no OVS"
    return {i["name"]: i for i in got}  # type: ignore[union-attr]


def _stale(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == "RepresentorStale"]


def test_read_ovs_reports_what_ovs_reports(ovs: Ovs) -> None:
    rails = ovs.rails
    rails.set_peer(1, "down")
    raw = ovs.interfaces()
    got = _read_ovs(rails)
    assert set(got) == set(raw) == {"br0", "net_rail0", "net_rail1"}
    for name in ("net_rail0", "net_rail1"):
        itf = got[name]
        # The switch opened the real veth: its ifindex is the kernel's, a port number is assigned.
        assert itf["ifindex"] == _kernel_ifindex(rails, name) == raw[name]["ifindex"]
        assert itf["ofport"] == raw[name]["ofport"] and itf["ofport"] >= 1
        assert itf["error"] is None and itf["type"] is None
    assert got["net_rail0"]["link_state"] == "up"
    assert got["net_rail1"]["link_state"] == raw["net_rail1"]["link_state"] == "down"  # carrier lost
    assert got["br0"]["type"] == "internal" and got["br0"]["ifindex"] == _kernel_ifindex(rails, "br0")


def test_a_port_whose_netdev_is_gone_is_representor_stale(ovs: Ovs) -> None:
    rails = ovs.rails
    ovs.vsctl("add-port", "br0", GONE)
    rails.set_peer(1, "down")  # a port whose link is down is normal, not stale
    raw = ovs.interfaces()[GONE]
    got = _read_ovs(rails)[GONE]
    assert raw["ofport"] == got["ofport"] == -1
    assert raw["ifindex"] == ["set", []] and got["ifindex"] is None  # never opened: no ifindex at all
    assert got["error"] == raw["error"] and GONE in got["error"] and "No such device" in got["error"]

    res = rails.railscope(*DOCTOR)
    assert res.returncode in (1, 2), res.stderr
    doc = json.loads(res.stdout)
    assert "ovs" not in {u["source"] for u in doc["unavailable"]}
    # The veth rails have no PCI function, so no PF claims the port by its name: docs/design.md §4 reports
    # an OVS port that belongs to no PF on "node". Only the gone netdev: br0 and the rails are there.
    stale = _stale(doc)
    assert [(f["subject"], f["severity"]) for f in stale] == [("node", "warning")], stale
    ev = stale[0]["evidence"]
    assert ev["ovs_orphans"] == [GONE]
    assert ev["ovs_reasons"][GONE].startswith("error: ") and GONE in ev["ovs_reasons"][GONE]
    assert GONE in stale[0]["message"]


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tf:
        out = {}
        for m in tf.getmembers():
            # regular files only: a symlink's target may be absent (a daemon's recorded
            # /proc/<pid>/exe names its binary, which the bundle never holds)
            f = tf.extractfile(m) if m.isfile() else None
            if f is not None:
                out[m.name.split("/", 1)[1]] = f.read()
        return out


def test_capture_records_the_switch_and_replays_its_findings(ovs: Ovs, tmp_path: Path) -> None:
    rails = ovs.rails
    ovs.vsctl("add-port", "br0", GONE)
    res = rails.railscope("capture", "-o", f"{tmp_path}/", "--recorder-gap", "0", timeout=180)
    assert res.returncode == 0, res.stderr
    bundle = Path(res.stdout.strip().splitlines()[0])
    files = _members(bundle)
    manifest = json.loads(files["manifest.json"])
    plugin = next(p for p in manifest["plugins"] if p["name"] == "ovs")
    assert plugin.get("refused") is None and not plugin.get("skipped"), plugin
    steps = {tuple(it["argv"]): it for it in manifest["items"] if it.get("plugin") == "ovs"}
    want = [("ovs-vsctl", "--timeout=5", "show"),
            ("ovs-vsctl", "--timeout=5", "--format=json", "list", "Interface"),
            ("ovs-vsctl", "--timeout=5", "--format=json", "list", "Bridge"),
            ("ovs-vsctl", "--timeout=5", "--format=json", "list", "Open_vSwitch"),
            ("ovs-appctl", "--timeout=5", "dpctl/show", "-s"),
            ("ovs-appctl", "--timeout=5", "upcall/show"),
            ("ovs-appctl", "--timeout=5", "coverage/show")]
    out = {}
    for argv, it in steps.items():
        # rc 0 for ovs-appctl too: it reached ovs-vswitchd (with "-t 5" it asked a daemon named 5)
        assert it["rc"] == 0 and not it["skipped"] and not it["timed_out"] and it["bytes"] > 0, it
        out[argv] = files[it["path"]].decode()
    assert sorted(steps) == sorted(want)
    assert "br0" in out[want[0]] and GONE in out[want[0]] and "could not open network device" in out[want[0]]
    interfaces = json.loads(out[want[1]])
    names = [row[interfaces["headings"].index("name")] for row in interfaces["data"]]
    assert sorted(names) == sorted(["br0", "net_rail0", "net_rail1", GONE])
    bridges = json.loads(out[want[2]])
    assert [row[bridges["headings"].index("name")] for row in bridges["data"]] == ["br0"]
    assert len(json.loads(out[want[3]])["data"]) == 1
    assert "netdev@ovs-netdev" in out[want[4]] and "port 1: " in out[want[4]] and "RX packets" in out[want[4]]
    assert "flows" in out[want[5]]
    assert "Event coverage" in out[want[6]]

    live = rails.railscope(*DOCTOR)
    assert live.returncode in (1, 2), live.stderr
    # The replay runs outside the namespace and without OVS_RUNDIR: all it has is the bundle.
    env = {k: v for k, v in os.environ.items() if k != "OVS_RUNDIR"}
    replay = subprocess.run([sys.executable, "-m", "agent.cli", *DOCTOR, "--from", str(bundle)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert replay.returncode == live.returncode, replay.stderr
    live_doc, replay_doc = json.loads(live.stdout), json.loads(replay.stdout)
    assert _stale(replay_doc) == _stale(live_doc) and _stale(live_doc)
    assert _stale(live_doc)[0]["evidence"]["ovs_orphans"] == [GONE]
    assert replay_doc["unavailable"] == live_doc["unavailable"]
