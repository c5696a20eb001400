"""The ``processes`` source on real processes: daemons run from their install paths as a container
runs them (``tests.support.daemons``: a mount namespace of their own), a Python process that names
itself (``prctl(PR_SET_NAME)``, as the kernel keeps it: cut to 15 characters), and a user's copy of a
binary named like a daemon, which is none. Live, recorded into a node image, replayed; restarts
counted; no process's environment or command line is ever read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.detectors.daemon_restarts import RestartState, step
from agent.host.live import LiveHost
from agent.host.recorded import RecordedHost
from agent.host.recording import RecordingHost
from agent.metrics.exporter import NodeMetrics
from agent.metrics.state import MetricsState
from agent.model import DaemonProcess, Snapshot
from agent.readers.common import Notes
from agent.readers.processes import (
    daemon_of,
    exe_installed,
    parse_stat,
    parse_status,
    read_processes,
    system_cgroup,
)
from tests.support.daemons import can_install, in_user_session, install

if not Path("/proc/self/stat").exists():
    pytest.skip("no /proc", allow_module_level=True)

NAMED = ("import ctypes, sys, time\n"
         "ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"  # PR_SET_NAME
         "print('ready', flush=True)\n"
         "end = time.monotonic() + float(sys.argv[2])\n"
         "while time.monotonic() < end: pass\n"  # burn CPU, as a vswitchd on the slow path
         "time.sleep(600)\n")


#: install paths of the daemons the tests run
VSWITCHD, CONFIG_DAEMON = "/usr/sbin/ovs-vswitchd", "/usr/bin/sriov-network-config-daemon"

needs_install = pytest.mark.skipif(not can_install() or in_user_session(),
                                   reason="needs root and unshare (a daemon at its install path, in a mount "
                                          "namespace of its own) outside a user's session")


class Spawner:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def daemon(self, path: str) -> subprocess.Popen[bytes]:
        """A copy of sleep(1) installed at ``path``, as a container runs a daemon: the kernel names
        the process after the file it ran, and its ``exe`` is ``path``."""
        proc = install(shutil.which("sleep") or "/bin/sleep", path, "600")
        self.procs.append(proc)
        self._named(proc.pid, os.path.basename(path)[:15])
        return proc

    def python_daemon(self, path: str, name: str, burn_s: float = 0.0) -> subprocess.Popen[bytes]:
        """This Python installed at ``path``, naming itself ``name``, burning CPU for ``burn_s``."""
        proc = install(os.path.realpath(sys.executable), path, "-c", NAMED, name, str(burn_s),
                       env={**os.environ, "PYTHONHOME": sys.base_prefix}, stdout=subprocess.PIPE)
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc

    def binary(self, name: str) -> subprocess.Popen[bytes]:
        """A user's copy of sleep(1) named ``name`` (in a temporary directory): the kernel names the
        process after the file it ran; it is no daemon."""
        exe = self.tmp / name
        if not exe.exists():
            shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
        proc = subprocess.Popen([str(exe), "600"])
        self.procs.append(proc)
        self._named(proc.pid, name[:15])
        return proc

    @staticmethod
    def _named(pid: int, comm: str) -> None:
        for _ in range(500):  # exec has happened once the kernel shows the new name
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                return
            time.sleep(0.01)
        raise AssertionError(f"{pid} never became {comm}")

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(10)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawner]:
    sp = Spawner(tmp_path)
    try:
        yield sp
    finally:
        sp.stop()


def _mine(procs: tuple[DaemonProcess, ...], *pids: int) -> list[DaemonProcess]:
    return [p for p in procs if p.pid in pids]


@needs_install
def test_the_daemons_are_read_live_with_start_time_cpu_and_rss(spawn: Spawner) -> None:
    before = time.time()
    vsw = spawn.daemon(VSWITCHD)
    cfg = spawn.python_daemon(CONFIG_DAEMON, "sriov-network-config-daemon")
    notes = Notes()
    got = read_processes(LiveHost("/"), notes)
    assert notes.unavailable == []
    mine = {p.pid: p for p in _mine(got, vsw.pid, cfg.pid)}
    assert (mine[vsw.pid].daemon, mine[vsw.pid].name) == ("ovs-vswitchd", "ovs-vswitchd")
    assert (mine[cfg.pid].daemon, mine[cfg.pid].name) == ("sriov-config-daemon", "sriov-network-c")
    for p in mine.values():
        assert p.start_time is not None and before - 2 <= p.start_time <= time.time() + 1
        assert p.rss_bytes and p.rss_bytes > 100_000 and p.cpu_seconds is not None and p.threads == 1
        assert p.ppid == os.getpid()
    # nothing but the daemons of the table: this test's own process is not one
    assert os.getpid() not in {p.pid for p in got}
    assert all(daemon_of(p.name) == p.daemon for p in got)


@needs_install
def test_a_daemon_whose_binary_name_is_longer_than_15_characters_is_found(spawn: Spawner) -> None:
    """The config daemon's binary is ``sriov-network-config-daemon``: the kernel names it
    ``sriov-network-c``. A reader that completed the name from the command line (psutil's
    ``Process.name()``) would not match the table's cut name and miss the daemon."""
    daemon = spawn.daemon(CONFIG_DAEMON)
    got = _mine(read_processes(LiveHost("/"), Notes()), daemon.pid)
    assert [(p.daemon, p.name) for p in got] == [("sriov-config-daemon", "sriov-network-c")]


def test_naming_the_nodes_processes_leaves_no_memory_behind(spawn: Spawner) -> None:
    """Every process of the node is named on every read: nothing of it may stay alive in the agent.
    A text-mode open per process (psutil's command line read of a 15-character name) left a string in
    CPython 3.11's type cache each time."""
    import gc
    import tracemalloc

    for n in range(4):
        spawn.binary(f"long-named-proc{n}")  # 15 characters: the names psutil completed
    host = LiveHost("/")
    read_processes(host, Notes())
    gc.collect()
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for _ in range(25):
            read_processes(host, Notes())
        gc.collect()
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
    grown = [st for st in last.filter_traces(mine).compare_to(first.filter_traces(mine), "lineno") if st.size_diff > 0]
    assert sum(st.size_diff for st in grown) <= 1024, [str(st) for st in grown[:5]]


@needs_install
def test_cpu_is_the_processes_own_user_and_system_time(spawn: Spawner) -> None:
    import psutil

    busy = spawn.python_daemon(VSWITCHD, "ovs-vswitchd", burn_s=5)
    first = _mine(read_processes(LiveHost("/"), Notes()), busy.pid)[0].cpu_seconds
    ps = psutil.Process(busy.pid)
    deadline = time.monotonic() + 60
    while sum(ps.cpu_times()[:2]) < (first or 0) + 0.3:  # the child burns CPU meanwhile, however slowly
        assert time.monotonic() < deadline
        time.sleep(0.05)
    then = _mine(read_processes(LiveHost("/"), Notes()), busy.pid)[0].cpu_seconds
    after = sum(ps.cpu_times()[:2])
    assert first is not None and then is not None and then - first >= 0.3
    assert then <= after + 0.02  # the same clock as psutil's own reading, never ahead of it


@needs_install
def test_a_recording_holds_the_daemons_files_only_and_replays_to_the_same_records(spawn: Spawner,
                                                                                 tmp_path: Path) -> None:
    vsw = spawn.daemon(VSWITCHD)
    other = subprocess.Popen(["sleep", "600"])  # a tenant's process: never in the image
    spawn.procs.append(other)
    copy = spawn.binary("ovs-vswitchd")  # a user's copy of the name: never in the image either
    out = tmp_path / "image"
    rec = RecordingHost(LiveHost("/"), str(out))
    live = read_processes(rec, Notes())
    rec.finish(node="n")
    recorded = sorted(p.name for p in (out / "fs" / "proc").iterdir() if p.name.isdigit())
    assert str(vsw.pid) in recorded and str(other.pid) not in recorded and str(os.getpid()) not in recorded
    assert str(copy.pid) not in recorded
    assert recorded == sorted(str(p.pid) for p in live)
    # the confirmation is recorded with the daemon: its exe link and its cgroup
    assert os.readlink(out / "fs" / "proc" / str(vsw.pid) / "exe").endswith("usr/sbin/ovs-vswitchd")
    assert (out / "fs" / "proc" / str(vsw.pid) / "cgroup").is_file()
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith(("/environ", "/cmdline"))]
    assert RecordedHost(str(out)) and read_processes(RecordedHost(str(out)), Notes()) == live


@needs_install
def test_a_restart_is_counted_once_a_forked_worker_never(spawn: Spawner) -> None:
    first = spawn.daemon(VSWITCHD)
    state = step(RestartState(), read_processes(LiveHost("/"), Notes()))
    base = state.restarts.get("ovs-vswitchd", 0)
    worker = spawn.daemon(VSWITCHD)  # one more process of the daemon: not a restart
    state = step(state, read_processes(LiveHost("/"), Notes()))
    assert state.restarts["ovs-vswitchd"] == base
    first.kill()
    first.wait(10)
    worker.kill()
    worker.wait(10)
    state = step(state, read_processes(LiveHost("/"), Notes()))  # gone: nothing counted yet
    assert state.restarts["ovs-vswitchd"] == base
    spawn.daemon(VSWITCHD)  # back, as a supervisor restarts it
    state = step(state, read_processes(LiveHost("/"), Notes()))
    assert state.restarts["ovs-vswitchd"] == base + 1


def test_the_daemon_series_sum_the_processes_of_each_daemon() -> None:
    procs = (DaemonProcess("ovs-vswitchd", "ovs-vswitchd", 10, 1, "R", 1000.0, 50.0, 1 << 20, 13),
             DaemonProcess("ovs-vswitchd", "ovs-vswitchd", 11, 10, "S", 1005.0, 2.0, 1 << 20, 1),
             DaemonProcess("ovsdb-server", "ovsdb-server", 9, 1, "S", 900.0, 1.0, 4096, 1))
    state = MetricsState(snapshot=Snapshot(taken_at=2000.0, processes=procs),
                         daemon_restarts={"ovs-vswitchd": 2, "sriov-config-daemon": 7})
    got = {(s.name, s.labels.get("daemon")): s.value for fam in NodeMetrics(lambda: state).collect()
           for s in fam.samples}
    assert got[("railscope_daemon_cpu_seconds_total", "ovs-vswitchd")] == 52.0
    assert got[("railscope_daemon_resident_memory_bytes", "ovs-vswitchd")] == 2 << 20
    assert got[("railscope_daemon_start_time_seconds", "ovs-vswitchd")] == 1005.0
    assert got[("railscope_daemon_processes", "ovs-vswitchd")] == 2
    assert got[("railscope_daemon_restarts_total", "ovs-vswitchd")] == 2
    # a daemon that restarted and is not running now: 0 processes, its restarts still counted
    assert got[("railscope_daemon_processes", "sriov-config-daemon")] == 0
    assert got[("railscope_daemon_restarts_total", "sriov-config-daemon")] == 7
    assert ("railscope_daemon_cpu_seconds_total", "sriov-config-daemon") not in got


def test_parsers_refuse_what_is_not_proc() -> None:
    assert parse_stat("") is None and parse_stat("12 (x) S 1") is None
    assert parse_stat("12 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20")["name"] == "a) b"  # type: ignore[index]
    assert parse_status("Name:\tx\nVmRSS:\tlots kB\nThreads:\t?\n") == {"name": "x"}


#: A process that is the DOCA driver container's entrypoint: its own root (a chroot standing for the
#: container's image) holds ofed_info, and the kernel names it entrypoint.sh.
CONTAINER = ("import ctypes, os, sys, time\n"
             "libc = ctypes.CDLL(None)\n"
             "if sys.argv[1]:\n"
             "    os.chroot(sys.argv[1]); os.chdir('/')\n"
             "libc.prctl(15, b'entrypoint.sh', 0, 0, 0)\n"  # PR_SET_NAME
             "print('ready', flush=True)\n"
             "time.sleep(600)\n")


def _entrypoint(spawn: Spawner, root: Path | None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", CONTAINER, str(root or "")], stdout=subprocess.PIPE)
    spawn.procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.mark.skipif(os.geteuid() != 0 or Path("/usr/bin/ofed_info").exists() or Path("/usr/sbin/ofed_info").exists(),
                    reason="needs root (chroot) and a machine without ofed_info of its own")
def test_the_doca_driver_containers_entrypoint_is_a_daemon_any_other_entrypoint_is_not(spawn: Spawner,
                                                                                         tmp_path: Path) -> None:
    root = tmp_path / "doca-driver-root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "ofed_info").write_text("#!/bin/bash\necho OFED-internal-25.10-1.7.1:\n")
    doca = _entrypoint(spawn, root)
    other = _entrypoint(spawn, None)  # another image's entrypoint.sh: no ofed_info in its root
    got = _mine(read_processes(LiveHost("/"), Notes()), doca.pid, other.pid)
    assert [(p.daemon, p.name, p.pid) for p in got] == [("doca-driver", "entrypoint.sh", doca.pid)]

    out = tmp_path / "image"
    rec = RecordingHost(LiveHost("/"), str(out))
    live = _mine(read_processes(rec, Notes()), doca.pid, other.pid)
    rec.finish(node="n")
    # the marker is in the image (the replay confirms the process by it); the other process is not
    assert (out / "fs" / "proc" / str(doca.pid) / "root" / "usr" / "bin" / "ofed_info").is_file()
    assert not (out / "fs" / "proc" / str(other.pid)).exists()
    assert _mine(read_processes(RecordedHost(str(out)), Notes()), doca.pid, other.pid) == live


def test_the_doca_marker_is_looked_for_in_the_containers_root_not_the_hosts(tmp_path: Path) -> None:
    # In the chart the agent reads the node under /host, and a container's /proc/<pid>/root is a
    # magic link whose text is "/": only the kernel follows it to the container's root. A symlink
    # to a directory elsewhere stands for it here (its text names no path under the host root).
    host = tmp_path / "host"
    container = tmp_path / "elsewhere" / "doca-driver-root"
    (container / "usr" / "sbin").mkdir(parents=True)
    (container / "usr" / "sbin" / "ofed_info").write_text("#!/bin/bash\necho OFED-internal-25.10-1.7.1:\n")
    pid = host / "proc" / "4242"
    pid.mkdir(parents=True)
    (host / "proc" / "stat").write_text("cpu 1 2 3\nbtime 1000\n")
    (pid / "comm").write_text("entrypoint.sh\n")
    (pid / "status").write_text("Name:\tentrypoint.sh\nPPid:\t1\nVmRSS:\t2048 kB\nThreads:\t1\n")
    (pid / "stat").write_text("4242 (entrypoint.sh) S 1 " + " ".join(["0"] * 16) + " 500 0 0\n")
    (pid / "root").symlink_to(container)
    (pid / "cgroup").write_text("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab12.scope\n")
    got = read_processes(LiveHost(str(host)), Notes())
    assert [(p.daemon, p.pid) for p in got] == [("doca-driver", 4242)], got
    # recorded, the marker lands in the image under the process's root, and the replay agrees
    out = tmp_path / "image"
    rec = RecordingHost(LiveHost(str(host)), str(out))
    live = read_processes(rec, Notes())
    rec.finish(node="n")
    assert (out / "fs" / "proc" / "4242" / "root" / "usr" / "sbin" / "ofed_info").is_file()
    assert read_processes(RecordedHost(str(out)), Notes()) == live == got


def test_a_users_copy_of_a_binary_named_like_a_daemon_is_none(spawn: Spawner) -> None:
    # Anyone can run a copy of any binary named ovs-vswitchd: by its name alone it was the daemon,
    # and killing and starting it again fired RailscopeDaemonRestarting.
    copy = spawn.binary("ovs-vswitchd")
    state = step(RestartState(), read_processes(LiveHost("/"), Notes()))
    assert _mine(read_processes(LiveHost("/"), Notes()), copy.pid) == []
    base = state.restarts.get("ovs-vswitchd", 0)
    copy.kill()
    copy.wait(10)
    state = step(state, read_processes(LiveHost("/"), Notes()))
    again = spawn.binary("ovs-vswitchd")
    state = step(state, read_processes(LiveHost("/"), Notes()))
    assert _mine(read_processes(LiveHost("/"), Notes()), again.pid) == []
    assert state.restarts.get("ovs-vswitchd", 0) == base


def _fake_proc(host: Path, pid: int, comm: str, exe: str | None, cgroup: str | None) -> None:
    d = host / "proc" / str(pid)
    d.mkdir(parents=True)
    (host / "proc" / "stat").write_text("cpu 1 2 3\nbtime 1000\n")
    (d / "comm").write_text(comm + "\n")
    (d / "status").write_text(f"Name:\t{comm}\nPPid:\t1\nVmRSS:\t2048 kB\nThreads:\t1\n")
    (d / "stat").write_text(f"{pid} ({comm}) S 1 " + " ".join(["0"] * 16) + " 500 0 0\n")
    if exe is not None:
        (d / "exe").symlink_to(exe)  # the kernel's text, dangling here as a container's path is
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


SERVICE = "0::/system.slice/openvswitch-switch.service\n"
SESSION = "0::/user.slice/user-1000.slice/session-3.scope\n"
#: cgroup v1 (hybrid) as a systemd node writes it: the user's session in the name=systemd hierarchy
SESSION_V1 = "12:memory:/user.slice/user-1000.slice\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n0::/\n"
POD = "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-9f3e.scope\n"
#: read from inside the agent's own cgroup namespace: a host service's path climbs out of it
FROM_POD = "0::/../../../system.slice/openvswitch-switch.service\n"


@pytest.mark.parametrize(("exe", "cgroup", "daemon"), [
    ("/usr/sbin/ovs-vswitchd", SERVICE, True),                           # the package's
    ("/usr/lib/openvswitch-switch/ovs-vswitchd", SERVICE, True),        # Debian's alternatives target
    ("/usr/sbin/ovs-vswitchd (deleted)", SERVICE, True),                 # upgraded while running
    ("/usr/sbin/ovs-vswitchd", POD, True),                               # a container's (its own root)
    ("/usr/sbin/ovs-vswitchd", FROM_POD, True),
    ("/usr/sbin/ovs-vswitchd", "0::/\n", True),                          # a node without systemd
    ("/usr/sbin/ovs-vswitchd", SESSION, False),                          # bound there in a user's namespace
    ("/usr/sbin/ovs-vswitchd", SESSION_V1, False),
    ("/usr/sbin/ovs-vswitchd", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n", False),
    ("/usr/sbin/ovs-vswitchd", None, False),                             # no cgroup to judge by
    ("/home/eve/bin/ovs-vswitchd", SERVICE, False),                      # not where it is installed
    ("/usr/sbin/ovs-vswitchd-evil", SERVICE, False),
    (None, SERVICE, False),                                              # exe unreadable
])
def test_a_daemon_is_confirmed_by_its_executable_and_its_cgroup(tmp_path: Path, exe: str | None,
                                                                 cgroup: str | None, daemon: bool) -> None:
    host = tmp_path / "host"
    _fake_proc(host, 4242, "ovs-vswitchd", exe, cgroup)
    got = read_processes(LiveHost(str(host)), Notes())
    assert [(p.daemon, p.pid) for p in got] == ([("ovs-vswitchd", 4242)] if daemon else []), (exe, cgroup)
    # recorded and replayed: the same confirmation from what the image kept
    out = tmp_path / "image"
    rec = RecordingHost(LiveHost(str(host)), str(out))
    live = read_processes(rec, Notes())
    rec.finish(node="n")
    assert read_processes(RecordedHost(str(out)), Notes()) == live == got
    assert (out / "fs" / "proc" / "4242").exists() == daemon  # a refused process leaves nothing behind


def test_scripts_are_confirmed_by_their_shell_and_every_daemon_has_install_paths() -> None:
    assert exe_installed("nvidia-driver", "/usr/bin/bash", 1) and not exe_installed("nvidia-driver", "/tmp/x", 1)
    assert exe_installed("sriov-device-plugin", "/usr/bin/sriovdp", 1)
    assert exe_installed("rdma-device-plugin", "/bin/k8s-rdma-shared-dp", 1)
    # a node image keeps the link relative to /proc/<pid>, which resolves to the same path
    assert exe_installed("ovs-vswitchd", "../../usr/sbin/ovs-vswitchd", 7)
    assert not exe_installed("ovs-vswitchd", "../../tmp/ovs-vswitchd", 7)
    from agent.readers.processes import DAEMONS, EXES, MARKERS
    assert set(DAEMONS) == set(EXES) | set(MARKERS)
    assert not system_cgroup("") and not system_cgroup("garbage")
