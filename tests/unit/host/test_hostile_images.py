"""Hostile node images through ``railscope doctor --from`` and ``railscope record --agent``.

Every case of ``hostile.py`` runs as a real process, with ``TMPDIR`` and the working directory in
watched empty directories and a canary directory beside them. Each must end as its table says:
refused with exit 3 and one clear line, or diagnosed (exit 0-2) with the bad part named in
``unavailable``; never a traceback, nothing written anywhere, no byte of the canary in the output.

Bounds, stated generously for a loaded 2-core CI machine: every run under 256 MiB peak RSS (the
images are refused at the header or read within the caps of ``agent.host.image.Limits``, 128 MiB
in all; a bare interpreter with the agent's imports takes about 40 MiB) and under 60 s of wall
time (most take well under a second).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import hostile_images as hostile

ROOT = Path(__file__).resolve().parents[3]
MAX_RSS_KIB = 256 << 10
MAX_WALL_S = 60.0
SECRET = "CANARY-7f3e-secret-of-the-machine"

# Peak RSS is the process's own VmHWM: getrusage's ru_maxrss survives execve on Linux, so in a child
# of a big pytest process it would report the parent's peak.
_DRIVER = r"""
import resource, sys, time
t = time.perf_counter()
from agent.cli import main

def peak_kib():
    try:
        with open("/proc/self/status") as fh:
            return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

try:
    rc = main(sys.argv[1:])
finally:
    sys.stdout.flush()
    sys.stderr.write("\nRUSAGE %d %.3f\n" % (peak_kib(), time.perf_counter() - t))
sys.exit(rc)
"""


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[bytes]) -> None:
        self.rc = proc.returncode
        self.stdout = proc.stdout
        err = proc.stderr.decode("utf-8", "replace")
        *rest, last = err.rstrip("\n").rsplit("\n", 1) if "RUSAGE" in err else (err, "RUSAGE 0 0")
        self.stderr = "\n".join(rest)
        _, rss, wall = last.split()
        self.rss_kib, self.wall_s = int(rss), float(wall)

    def lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]


def railscope(args: list[str], cwd: Path, tmp: Path) -> Run:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("RAILSCOPE_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *args], capture_output=True, timeout=300, cwd=cwd,
                          env=env)
    return Run(proc)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Watched directories: the process's cwd and TMPDIR (must stay empty) and a canary (unchanged)."""
    w = {name: tmp_path / name for name in ("cwd", "tmp", "canary", "in")}
    for p in w.values():
        p.mkdir()
    (w["canary"] / "secret").write_text(SECRET + "\n")
    yield w
    assert os.listdir(w["cwd"]) == [] and os.listdir(w["tmp"]) == [], "something was written by the reader"
    assert sorted(os.listdir(w["canary"])) == ["secret"]
    assert (w["canary"] / "secret").read_text() == SECRET + "\n"


def _no_constant(word: str) -> None:
    raise AssertionError(f"doctor --json printed bare {word}")


def _check(run: Run, outcome: str, expect: str, source: str) -> None:
    out = run.stdout.decode("utf-8", "replace")
    assert "Traceback" not in run.stderr + out
    assert SECRET not in run.stderr + out
    assert run.rss_kib < MAX_RSS_KIB, f"peak RSS {run.rss_kib} KiB"
    assert run.wall_s < MAX_WALL_S, f"took {run.wall_s:.1f} s"
    if outcome == "refuse":
        assert run.rc == 3, (run.rc, run.stderr, out[:500])
        assert len(run.lines()) == 1, run.stderr
        assert run.lines()[0].startswith("railscope doctor: error: ") and expect in run.lines()[0], run.lines()
        assert len(run.lines()[0]) < 400
        return
    assert run.rc in (0, 1, 2), (run.rc, run.stderr)
    doc = json.loads(out, parse_constant=_no_constant)  # RFC 8259: no NaN / Infinity
    assert doc["schema"] == "railscope.doctor/v1"
    if source:
        reasons = [u["reason"] for u in doc["unavailable"] if u["source"] == source]
        assert any(expect in r for r in reasons), doc["unavailable"]


_CANARY_FOR_IDS = Path("/canary")
TAR_CASES = hostile.tar_cases(_CANARY_FOR_IDS)


@pytest.mark.parametrize("index", range(len(TAR_CASES)), ids=[c.name for c in TAR_CASES])
@pytest.mark.slow  # a process per case: the in-process reader tiers stay in the fast loop
def test_hostile_bundle(index: int, world: dict[str, Path]) -> None:
    case = hostile.tar_cases(world["canary"])[index]
    path = world["in"] / f"{case.name}.tar.gz"
    data = case.make(world["in"])
    assert isinstance(data, bytes)
    path.write_bytes(data)
    run = railscope(["doctor", "--from", str(path), "--json"], world["cwd"], world["tmp"])
    _check(run, case.outcome, case.expect, case.source)


DIR_CASES = hostile.dir_cases(_CANARY_FOR_IDS)


@pytest.mark.parametrize("index", range(len(DIR_CASES)), ids=[c[0] for c in DIR_CASES])
def test_hostile_directory(index: int, world: dict[str, Path]) -> None:
    _name, make, outcome, expect, source = hostile.dir_cases(world["canary"])[index]
    path = make(world["in"])
    run = railscope(["doctor", "--from", str(path), "--json"], world["cwd"], world["tmp"])
    _check(run, outcome, expect, source)


def test_fs_link_to_root_diagnoses_nothing_of_this_machine(world: dict[str, Path]) -> None:
    path = hostile.dir_cases(world["canary"])[0][1](world["in"])
    doc = json.loads(railscope(["doctor", "--from", str(path), "--json"], world["cwd"], world["tmp"]).stdout)
    # Nothing read from this machine's / : no kernel release (os.uname() here), no sysfs speed; the
    # rails still come from the image's own link dump and commands.
    assert doc["kernel"] is None and doc["rails"]
    assert all(r["speed_mbps"] is None for r in doc["rails"])


@pytest.mark.parametrize("given", ["", "   "])
def test_empty_from_is_bad_usage(given: str, world: dict[str, Path]) -> None:
    run = railscope(["doctor", "--from", given], world["cwd"], world["tmp"])
    assert run.rc == 3 and run.lines() == ["railscope doctor: error: --from: an empty path is not a node image"]


def test_missing_from_is_bad_usage(world: dict[str, Path]) -> None:
    run = railscope(["doctor", "--from", str(world["in"] / "nope.tar.gz")], world["cwd"], world["tmp"])
    assert run.rc == 3 and len(run.lines()) == 1 and "no such file or directory" in run.lines()[0]


# -- the terminal ----------------------------------------------------------------------------

_ESC = "\x1b]0;owned\x07\x1b[2J\r\nCRITICAL  RailMissing  net_rail9  forged\u202e"


def _terminal_bundle() -> bytes:
    manifest = json.loads((hostile.BASE / "manifest.json").read_text())
    manifest["node"] = "gpu" + _ESC
    links = json.loads((hostile.BASE / "netlink" / "links.json").read_text())
    # a name the kernel could hold (15 characters): the link is kept, its name escaped
    links["links"].append({"ifindex": 999, "ifname": "e\x1b[2J\r\nCRIT", "operstate": "UP" + _ESC, "carrier": 1})
    events = {"events": [{"ts": 1772359100, "code": "LinkFlapping", "severity": "warning",
                          "subject": "net_rail0" + _ESC, "message": "flap" + _ESC}]}
    members = hostile.base_members(replace={
        "manifest.json": json.dumps(manifest).encode(),
        "netlink/links.json": json.dumps(links).encode(),
        "events.json": json.dumps(events).encode(),
        "fs/proc/sys/kernel/osrelease": ("6.8.0" + _ESC).encode(),
        "cmd/rdma_-j_link_show.stdout": b"\x1b[2J not json \r\n",
    })
    return hostile.bundle([*members, hostile.member(b"node-2026-bundle/fs/\x1b[2J\xff", b"x")])


def _assert_terminal_safe(text: bytes) -> None:
    bad = sorted({b for b in text if b < 0x20 and b != 0x0A} | ({0x7F} & set(text)))
    assert not bad, f"control bytes {bad} in the human output"
    assert "\u202e" not in text.decode("utf-8")


def test_human_output_never_draws_on_the_terminal(world: dict[str, Path]) -> None:
    path = world["in"] / "terminal.tar.gz"
    path.write_bytes(_terminal_bundle())
    run = railscope(["doctor", "--from", str(path)], world["cwd"], world["tmp"])
    assert run.rc in (0, 1, 2) and "Traceback" not in run.stderr
    _assert_terminal_safe(run.stdout)
    _assert_terminal_safe(run.stderr.encode())
    text = run.stdout.decode()
    assert "gpu\\x1b]0;owned\\x07" in text  # shown, escaped: nothing lost
    assert not any(line.startswith("CRITICAL  RailMissing  net_rail9") for line in text.splitlines())


def test_refusal_line_never_draws_on_the_terminal(world: dict[str, Path]) -> None:
    path = world["in"] / "refused.tar.gz"
    path.write_bytes(hostile.bundle([*hostile.base_members(), hostile.member(
        "node-2026-bundle/fs/dev/\x1b[2J\r\nCRITICAL", typ=b"6")]))
    run = railscope(["doctor", "--from", str(path)], world["cwd"], world["tmp"])
    assert run.rc == 3 and len(run.lines()) == 1
    _assert_terminal_safe(run.stderr.encode())


# -- record --agent from a test server ---------------------------------------------------------

class _Serve(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def agent_server() -> Iterator[tuple[str, type[_Serve]]]:
    handler = type("Handler", (_Serve,), {})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("index", range(len(TAR_CASES)), ids=[c.name for c in TAR_CASES])
@pytest.mark.slow  # a process per case: the in-process reader tiers stay in the fast loop
def test_hostile_bundle_through_record_agent(index: int, world: dict[str, Path],
                                             agent_server: tuple[str, type[_Serve]]) -> None:
    case = hostile.tar_cases(world["canary"])[index]
    if case.name in ("gnu-long-name-bomb", "pax-header-bomb", "total-bomb"):
        pytest.skip("a bomb's body of 120-256 MiB: the doctor table proves the refusal; serving it adds nothing")
    url, handler = agent_server
    data = case.make(world["in"])
    assert isinstance(data, bytes)
    handler.body = data
    out = world["cwd"] / "image"
    run = railscope(["record", "--agent", url, "-o", str(out)], world["cwd"], world["tmp"])
    assert "Traceback" not in run.stderr and SECRET not in run.stderr
    assert run.rss_kib < MAX_RSS_KIB and run.wall_s < MAX_WALL_S
    if case.outcome == "refuse":
        assert run.rc == 1 and len(run.lines()) == 1 and case.expect in run.lines()[0], run.stderr
        assert os.listdir(world["cwd"]) == []  # no half image, no temporary left beside it
        return
    assert run.rc == 0, run.stderr
    # The written image holds no link that leaves it, and reads like the bundle did.
    for dirpath, dirnames, filenames in os.walk(out):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.normpath(os.path.join(dirpath, os.readlink(full)))
                assert not os.path.isabs(os.readlink(full)) and target.startswith(str(out)), (full, os.readlink(full))
    doc = railscope(["doctor", "--from", str(out), "--json"], world["tmp"], world["tmp"])
    assert doc.rc in (0, 1, 2) and SECRET not in doc.stdout.decode()
    import shutil

    shutil.rmtree(out)


# -- the collector's report path ---------------------------------------------------------------

@pytest.mark.parametrize("index", range(len(TAR_CASES)), ids=[c.name for c in TAR_CASES])
def test_hostile_bundle_through_the_collectors_report(index: int, world: dict[str, Path]) -> None:
    """The collector analyses every bundle it stores with the same reader: a refused bundle is a page
    saying why (one line), any other a doctor document and an HTML page; never an exception."""
    pytest.importorskip("aiohttp", reason="the collector's packages (the Debian-python run has the reader's only)")
    from agent.expectations import expectations_from_env
    from collector.analysis import analyse_file

    case = hostile.tar_cases(world["canary"])[index]
    if case.name in ("gnu-long-name-bomb", "pax-header-bomb", "total-bomb"):
        pytest.skip("a bomb's body of 120-256 MiB: the doctor table proves the refusal; in process adds nothing")
    path = world["in"] / "b.tar.gz"
    data = case.make(world["in"])
    assert isinstance(data, bytes)
    path.write_bytes(data)
    got = analyse_file(str(path), "cluster/2026/b.tar.gz", expectations_from_env())
    if case.outcome == "refuse":
        assert set(got) == {"error"} and case.expect in got["error"] and "\n" not in got["error"], got
        assert str(world["in"]) not in got["error"]  # the stored name, not the collector's disk path
        return
    assert "error" not in got, got.get("error")
    assert got["doctor"]["schema"] == "railscope.doctor/v1" and got["html"].lstrip().startswith("<!")
    assert SECRET not in json.dumps(got["doctor"]) + got["html"]
    if case.source:
        assert any(case.expect in u["reason"] for u in got["doctor"]["unavailable"] if u["source"] == case.source)


@pytest.mark.slow
def test_sigterm_during_record_agent_leaves_nothing_behind(world: dict[str, Path]) -> None:
    """A record --agent killed with SIGTERM mid-download exits (143) and leaves no file behind."""
    import signal
    import socket
    import time

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def stall() -> None:
        conn, _ = srv.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: 10000000\r\n\r\n"
                     + hostile.bundle(hostile.base_members())[:5000])
        time.sleep(30)
        conn.close()

    threading.Thread(target=stall, daemon=True).start()
    env = {**os.environ, "TMPDIR": str(world["tmp"]), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "record", "--agent", f"http://127.0.0.1:{port}",
                             "-o", str(world["cwd"] / "image")], cwd=world["cwd"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
        srv.close()
    assert os.listdir(world["cwd"]) == [] and os.listdir(world["tmp"]) == []
