"""lldp against Debian's real lldpd, on veth rails in network namespaces.

A "switch" namespace runs lldpd (its own control socket, foreground, a 1 s transmit interval, only on the
peer interfaces) and sends real LLDP frames over the veths to the node's rails. Mode lldpd: an lldpd on the
node side (receive-only, its own socket; a ``lldpcli`` wrapper on PATH points the agent's argv at that
socket) answers ``lldpcli -f json show neighbors details``. Mode listen: the agent's passive listener hears
the switch's frames itself, and frames lldpd does not send (PFC, application priority, a hostile length) are
built byte by byte and sent from the switch namespace with an AF_PACKET socket. A recording of the listen
mode replays the same neighbours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

LLDPD = shutil.which("lldpd") or "/usr/sbin/lldpd"
LLDPCLI = shutil.which("lldpcli") or "/usr/sbin/lldpcli"


def _need_lldpd() -> None:
    if not os.path.exists(LLDPD) or not os.path.exists(LLDPCLI):
        pytest.skip("lldpd is not installed (apt-get install lldpd)")


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A directory lldpd's control sockets can live in: lldpcli drops to the _lldpd user, which cannot pass
    pytest's 0700 temporary directories."""
    d = Path(tempfile.mkdtemp(prefix="rs-lldp-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def lldpd(rails: RailNetns, ns: str, ifaces: str, sock: Path, *extra: str) -> Iterator[None]:
    """lldpd in ``ns`` on ``ifaces`` only, foreground, its control socket at ``sock``; stopped by its pid."""
    proc = subprocess.Popen(["ip", "netns", "exec", ns, LLDPD, "-d", "-u", str(sock), "-I", ifaces, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"lldpd did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def cli(rails: RailNetns, ns: str, sock: Path, *words: str) -> None:
    rails.exec([LLDPCLI, "-u", str(sock), *words], ns=ns, check=True, timeout=30)


def switch(rails: RailNetns, sock: Path) -> None:
    """Make the switch side look like a leaf: a system name, port IDs by interface name, 1 s transmits."""
    cli(rails, rails.switch, sock, "configure", "system", "hostname", "leaf-test")
    cli(rails, rails.switch, sock, "configure", "lldp", "portidsubtype", "ifname")
    cli(rails, rails.switch, sock, "configure", "lldp", "tx-interval", "1")


SEND = r"""
import socket, struct, sys
def tlv(t, v): return struct.pack("!H", (t << 9) | len(v)) + v
src = bytes.fromhex("020000aabb07")
kind = sys.argv[2]
body = tlv(1, b"\x04" + src) + tlv(2, b"\x05swp7") + tlv(3, struct.pack("!H", 120)) + tlv(4, b"Eth1/7")
if kind == "pfc":
    body += tlv(5, b"leaf-07") + tlv(127, bytes.fromhex("00120f04") + struct.pack("!H", 4114))
    body += tlv(127, bytes.fromhex("0080c20b") + bytes([0x08, 1 << 4]))           # PFC on priority 4
    body += tlv(127, bytes.fromhex("0080c20c") + bytes([0, (4 << 5) | 2, 0x12, 0xb7]))  # prio 4: UDP 4791
    body += tlv(0, b"")
else:  # hostile: a system name with a terminal escape, then a TLV that runs past the frame
    body += tlv(5, b"leaf\x1b]0;owned\x07") + struct.pack("!H", (4 << 9) | 300) + b"short"
frame = bytes.fromhex("0180c200000e") + src + b"\x88\xcc" + body
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
s.send(frame)
print("null")
"""

LISTEN = r"""
import json, subprocess, sys, time
from agent.host.live import LiveHost
from agent.readers.common import Notes
from agent.readers.lldp import read_lldp
rails, want, wait_s = sys.argv[1].split(","), int(sys.argv[2]), float(sys.argv[3])
def tx(n): return int(open(f"/sys/class/net/{n}/statistics/tx_packets").read())
host = LiveHost()
before = {n: tx(n) for n in rails}
deadline, got, notes = time.monotonic() + wait_s, (), Notes()
while time.monotonic() < deadline:
    notes = Notes()
    got = read_lldp(host, rails, "listen", notes=notes)
    if len(got) >= want and all(n.system for n in got):
        break
    time.sleep(0.3)
promisc = {n: json.loads(subprocess.run(["ip", "-d", "-j", "link", "show", n], capture_output=True, text=True).stdout)[0]
           .get("promiscuity") for n in rails}
maddr = subprocess.run(["ip", "maddr", "show", "dev", rails[0]], capture_output=True, text=True).stdout
print(json.dumps({"got": [{"netdev": n.netdev, "system": n.system, "port": n.port, "pfc": n.pfc, "mfs": n.mfs,
                           "app": n.app, "via": n.via, "seen": n.seen} for n in got],
                  "notes": notes.unavailable, "promisc": promisc, "group": "01:80:c2:00:00:0e" in maddr,
                  "tx": {n: tx(n) - before[n] for n in rails}}))
"""


def test_lldpd_on_the_node_answers_lldpcli(rails: RailNetns, tmp_path: Path, sockdir: Path) -> None:
    _need_lldpd()
    sw, node = sockdir / "sw.sock", sockdir / "node.sock"
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    (wrapper / "lldpcli").write_text(f'#!/bin/sh\nexec {LLDPCLI} -u {node} "$@"\n')
    (wrapper / "lldpcli").chmod(0o755)
    with lldpd(rails, rails.switch, "peer0,peer1", sw), lldpd(rails, rails.node, "net_rail0,net_rail1", node, "-r"):
        switch(rails, sw)
        env_path = f"{wrapper}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"
        deadline = time.monotonic() + 30
        while True:
            res = rails.exec(["env", f"PATH={env_path}", sys.executable, "-m", "agent.cli", "doctor", "--json",
                              "--rails", "2", "--lldp", "lldpd"])
            doc = json.loads(res.stdout)
            peers = [r["peer"] for r in doc["rails"]]
            if all(p and p["system"] == "leaf-test" for p in peers) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [(p["system"], p["port"]) for p in peers] == [("leaf-test", "peer0"), ("leaf-test", "peer1")], doc
        assert all(p["seen"] and abs(p["seen"] - time.time()) < 60 for p in peers)
        table = rails.exec(["env", f"PATH={env_path}", sys.executable, "-m", "agent.cli", "doctor", "--rails", "2",
                                "--lldp", "lldpd"])
        assert "PEER" in table.stdout and "leaf-test:peer0" in table.stdout


def test_the_passive_listener_hears_the_switch_and_never_transmits(rails: RailNetns, sockdir: Path) -> None:
    _need_lldpd()
    sw = sockdir / "sw.sock"
    with lldpd(rails, rails.switch, "peer0,peer1", sw):
        switch(rails, sw)
        time.sleep(1.5)  # lldpd's frames from before lldpcli named the switch are past
        got = rails.python(LISTEN.replace("sys.argv[1]", "'net_rail0,net_rail1'").replace("sys.argv[2]", "'2'")
                           .replace("sys.argv[3]", "'30'"))
    assert [(g["netdev"], g["system"], g["port"], g["via"]) for g in got["got"]] == [
        ("net_rail0", "leaf-test", "peer0", "listen"), ("net_rail1", "leaf-test", "peer1", "listen")], got
    assert got["promisc"] == {"net_rail0": 0, "net_rail1": 0}  # never promiscuous
    assert got["group"]  # joined the nearest-bridge group, and only that: no promiscuity above
    assert got["tx"] == {"net_rail0": 0, "net_rail1": 0}  # never transmits


def test_frames_lldpd_does_not_send_pfc_mfs_and_a_hostile_length(rails: RailNetns) -> None:
    code = LISTEN.replace("sys.argv[1]", "'net_rail0,net_rail1'").replace("sys.argv[2]", "'1'").replace(
        "sys.argv[3]", "'2'")
    # listen first (the listener starts on the first read), then send, then read again in the same process
    code = code.replace("host = LiveHost()", "host = LiveHost()\nread_lldp(host, rails, 'listen')\n"
                        "import subprocess as sp\n"
                        f"sp.run(['ip','netns','exec','{rails.switch}',sys.executable,'-c',{SEND!r},'peer1','pfc'],"
                        "check=True, stdout=sp.DEVNULL)\n"
                        f"sp.run(['ip','netns','exec','{rails.switch}',sys.executable,'-c',{SEND!r},'peer0','hostile'],"
                        "check=True, stdout=sp.DEVNULL)\ntime.sleep(1.0)")
    got = rails.python(code)
    (n,) = got["got"]
    assert (n["netdev"], n["system"], n["port"], n["pfc"], n["mfs"], n["app"]) == (
        "net_rail1", "leaf-07", "swp7", [4], 4114, [[4, 2, 4791]])
    (bad,) = [why for _s, why in got["notes"] if why.startswith("net_rail0")]
    assert "not a well-formed LLDPDU: TLV type 4 says 300 bytes" in bad and "\x1b" not in bad


RECORD = r"""
import json, sys, time
from agent.config import ReadConfig
from agent.host.live import LiveHost
from agent.host.recording import RecordingHost
from agent.readers.lldp import read_lldp
from agent.readers.snapshot import take_snapshot
host = LiveHost()
deadline = time.monotonic() + 30
# until both rails heard the switch as configured (its first frames, before lldpcli set the system name,
# carry the machine's hostname)
while time.monotonic() < deadline and sum(n.system == "leaf-test"
                                          for n in read_lldp(host, ["net_rail0", "net_rail1"], "listen")) < 2:
    time.sleep(0.3)
rec = RecordingHost(host, sys.argv[1])
snap = take_snapshot(rec, ReadConfig(lldp="listen"))
rec.finish(node="gpu-node-test")
print(json.dumps({"got": [[n.netdev, n.system, n.port] for n in snap.lldp],
                  "notes": [why for src, why in snap.unavailable if src == "lldp"]}))
"""


def test_a_recording_of_the_listener_replays_the_same_neighbours(rails: RailNetns, tmp_path: Path,
                                                               sockdir: Path) -> None:
    _need_lldpd()
    sw, out = sockdir / "sw.sock", tmp_path / "image"
    with lldpd(rails, rails.switch, "peer0,peer1", sw):
        switch(rails, sw)
        rec = rails.python(RECORD.replace("sys.argv[1]", repr(str(out))))
    live = rec["got"]
    assert live == [["net_rail0", "leaf-test", "peer0"], ["net_rail1", "leaf-test", "peer1"]], rec
    assert (out / "lldp/frames.json").is_file()
    res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json", "--rails", "2", "--from", str(out)],
                         capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads(res.stdout)
    assert [(r["netdev"], r["peer"]["system"], r["peer"]["port"]) for r in doc["rails"]] == [
        (n, s, p) for n, s, p in live]


def test_a_one_shot_doctor_listens_until_every_rail_has_a_neighbour(rails: RailNetns, sockdir: Path) -> None:
    """``railscope doctor --lldp listen`` is one process: it listens for a bounded window (--lldp-wait) and ends
    as soon as every rail has heard its neighbour; off a terminal it prints no progress."""
    _need_lldpd()
    sw = sockdir / "sw.sock"
    with lldpd(rails, rails.switch, "peer0,peer1", sw):
        switch(rails, sw)
        time.sleep(1.5)  # lldpd's frames from before lldpcli named the switch are past
        t0 = time.monotonic()
        res = rails.railscope("doctor", "--json", "--rails", "2", "--lldp", "listen", "--lldp-wait", "30s", timeout=90)
        took = time.monotonic() - t0
    doc = json.loads(res.stdout)
    assert [(r["netdev"], (r["peer"] or {}).get("system"), (r["peer"] or {}).get("port")) for r in doc["rails"]] == [
        ("net_rail0", "leaf-test", "peer0"), ("net_rail1", "leaf-test", "peer1")], (res.stderr, doc)
    # ended early: a 1 s transmit interval is heard well inside the 30 s window (the bound leaves a loaded
    # machine's doctor start-up its seconds)
    assert took < 20, took
    assert "listening" not in res.stderr  # progress is for a terminal only


def test_a_one_shot_doctor_that_hears_nothing_says_since_when_after_its_window(rails: RailNetns) -> None:
    t0 = time.monotonic()
    res = rails.railscope("doctor", "--json", "--rails", "2", "--lldp", "listen", "--lldp-wait", "1s", timeout=60)
    took = time.monotonic() - t0
    doc = json.loads(res.stdout)
    assert [r["peer"] for r in doc["rails"]] == [None, None]
    notes = sorted(u["reason"] for u in doc["unavailable"] if u["source"] == "lldp")
    assert [n.split(" since ")[0] for n in notes] == ["net_rail0: no LLDP neighbour seen",
                                                     "net_rail1: no LLDP neighbour seen"], notes
    assert 1 <= took < 20, took


def test_a_terminal_sees_the_one_shot_listen_progress_and_then_its_line_erased(rails: RailNetns) -> None:
    import pty

    main, sub = pty.openpty()
    try:
        proc = subprocess.run(["ip", "netns", "exec", rails.node, sys.executable, "-m", "agent.cli", "doctor",
                               "--rails", "2", "--lldp", "listen", "--lldp-wait", "1s"],
                              stdout=subprocess.PIPE, stderr=sub, timeout=60, check=False)
        os.close(sub)
        sub = -1
        seen = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child's end is closed and drained
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if sub >= 0:
            os.close(sub)
        os.close(main)
    assert b"listening for LLDP: 0/2 rails heard" in seen, seen
    assert seen.endswith(b"\r\x1b[K"), seen[-40:]  # the progress line is erased before the table
    assert b"listening" not in proc.stdout


POD = r"""
set -e
mount -t tmpfs -o mode=0755 none /run
touch /run/lldpd.socket
mount --bind "$SOCK" /run/lldpd.socket
# the image's lldpcli: Debian's binary made a plain 0755 program (the Dockerfile's chmod)
cp /usr/sbin/lldpcli "$BIN/lldpcli" && chmod 0755 "$BIN/lldpcli"
mount --bind "$BIN/lldpcli" /usr/sbin/lldpcli
exec setpriv --no-new-privs $RS_GROUPS --bounding-set=-all,+net_admin --inh-caps=-all --ambient-caps=-all \
  sh -c 'exec "$0" -m agent.cli doctor --json --rails 2 --lldp lldpd' "$PY"
"""


def test_the_pods_lldpcli_reaches_the_nodes_lldpd_by_the_sockets_group(rails: RailNetns, tmp_path: Path,
                                                                   sockdir: Path) -> None:
    """As the chart runs it: root with NET_ADMIN alone and no_new_privs, the node's socket at
    /run/lldpd.socket (where Debian's lldpcli connects without -u), the socket's group as the pod's
    supplemental group (lldpd.socketGroup). Without the group, lldpcli is refused and the note says so."""
    _need_lldpd()
    sw, node = sockdir / "sw.sock", sockdir / "node.sock"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    with lldpd(rails, rails.switch, "peer0,peer1", sw), lldpd(rails, rails.node, "net_rail0,net_rail1", node, "-r"):
        switch(rails, sw)
        gid = node.stat().st_gid
        runs = {}
        for groups in (f"--groups={gid}", "--clear-groups"):
            deadline = time.monotonic() + 15
            while True:
                env = {**os.environ, "SOCK": str(node), "BIN": str(bin_dir), "RS_GROUPS": groups, "PY": sys.executable}
                res = subprocess.run(["ip", "netns", "exec", rails.node, "unshare", "-m", "--propagation", "private",
                                      "sh", "-c", POD], capture_output=True, text=True, timeout=60, env=env,
                                     cwd=str(Path(__file__).resolve().parents[2]), check=False)
                doc = json.loads(res.stdout)
                peers = [(r["peer"] or {}).get("system") for r in doc["rails"]]
                if groups == "--clear-groups" or all(peers) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            runs[groups] = (peers, [u["reason"] for u in doc["unavailable"] if u["source"] == "lldp"])
    assert runs[f"--groups={gid}"][0] == ["leaf-test", "leaf-test"], runs
    peers, notes = runs["--clear-groups"]
    assert peers == [None, None] and any("Permission denied" in n for n in notes), notes


def test_bench_agent_measures_the_listener_idle_and_at_one_frame_a_second_per_rail() -> None:
    """``bench/bench_agent.py``'s lldp measurement, short: 8 rails with their peers in a namespace of its
    own, the listener's thread idle and while a sender puts one LLDP frame a second on each rail."""
    from tests.support.netns import ip, netns_available

    why = netns_available()
    if why:
        pytest.skip(why)
    ns = f"rs-bench-lldp-{os.getpid()}"
    ip("netns", "add", ns)
    try:
        for i in range(8):
            ip("-n", ns, "link", "add", f"net_rail{i}", "type", "veth", "peer", "name", f"peer{i}")
            ip("-n", ns, "link", "set", f"net_rail{i}", "up")
            ip("-n", ns, "link", "set", f"peer{i}", "up")
        root = Path(__file__).resolve().parents[2]
        res = subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(root / "bench" / "bench_agent.py"),
                              "--inside", "lldp", "--rails", "8", "--runs", "3", "--lldp-window", "2"],
                             capture_output=True, text=True, timeout=60, cwd=root, check=False)
    finally:
        ip("netns", "del", ns, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])["lldp"]
    assert got["neighbours"] == 8 and got["rails"] == 8
    assert 12 <= got["frames"] <= 24, got  # one a second on each of 8 rails over 2 s
    assert 0 <= got["listener_idle_cpu_s"] < 0.5 and 0 <= got["listener_busy_cpu_s"] < 0.5, got
