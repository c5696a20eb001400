"""The capture runner on real processes: timeouts kill the process group, caps keep the tail,
missing tools are skipped with why, the deadline packs a partial bundle, firmware reads run one at
a time per PF and a hung one skips the rest of that PF's."""

from __future__ import annotations

import io
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from agent.capture.plugin import Command, File, Generated, Plugin
from agent.capture.runner import CaptureParams, capture
from agent.host.live import LiveHost
from tests.support.capture_kit import alive, allow, fake_replay, items, manifest, members, plugin, script


def run(tmp_path: Path, plugins: list, **kw) -> bytes:
    out = io.BytesIO()
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    params = CaptureParams(node="node-t", nice=0, recorder_gap_s=0, **kw)
    capture(LiveHost(str(root)), out, params, plugin_modules=plugins, staging_dir=str(tmp_path))
    return out.getvalue()


def test_a_hang_is_killed_at_its_timeout_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    hang = script(tmp_path, "hang", f"sleep 60 &\necho $! > {pidfile}\necho started\nwait\n")
    t0 = time.monotonic()
    bundle = run(tmp_path, [plugin(Plugin("t", 1, (Command((hang,), timeout_s=1.0),)))])
    assert time.monotonic() - t0 < 10
    it = next(i for i in items(bundle).values() if i["argv"] == [hang])
    assert it["timed_out"] and it["rc"] is None and "timed out" in it["reason"]
    assert members(bundle)[it["path"]] == b"started\n"  # what it printed before it hung is kept
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # the whole process group was killed


def test_output_over_the_cap_keeps_its_tail(tmp_path: Path) -> None:
    many = script(tmp_path, "many", "i=0\nwhile [ $i -lt 5000 ]; do echo line-$i; i=$((i+1)); done\n")
    bundle = run(tmp_path, [plugin(Plugin("t", 1, (Command((many,), max_bytes=1000),)))])
    it = next(i for i in items(bundle).values() if i["argv"] == [many])
    data = members(bundle)[it["path"]]
    assert it["truncated"] and it["bytes"] == len(data) == 1000
    assert data.endswith(b"line-4999\n") and b"line-0\n" not in data


def test_a_file_over_its_cap_keeps_its_tail(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/big.log").write_bytes(b"".join(b"entry %06d\n" % i for i in range(20000)))
    bundle = run(tmp_path, [plugin(Plugin("t", 1, (File("/var/log/big.log", 4096),)))])
    it = items(bundle)["fs/var/log/big.log"]
    data = members(bundle)["fs/var/log/big.log"]
    assert it["truncated"] and len(data) == 4096 and data.endswith(b"entry 019999\n")


def test_a_missing_tool_is_skipped_with_the_reason(tmp_path: Path) -> None:
    bundle = run(tmp_path, [plugin(Plugin("t", 1, (Command((allow("railscope-no-such-tool"), "-j", "show"),),)))])
    it = items(bundle)["cmd/railscope-no-such-tool_-j_show.stdout"]
    assert it["skipped"] and it["reason"] == "railscope-no-such-tool: command not found"
    assert "cmd/railscope-no-such-tool_-j_show.stdout" not in members(bundle)


@pytest.mark.slow
def test_the_deadline_packs_what_finished(tmp_path: Path) -> None:
    quick = script(tmp_path, "quick", "echo done\n")
    slow = script(tmp_path, "slow", "sleep 30\n")
    later = script(tmp_path, "later", "echo never\n")
    plugins = [plugin(Plugin("t", 1, (Command((quick,)), Command((slow,), timeout_s=60), Command((later,)))))]
    t0 = time.monotonic()
    bundle = run(tmp_path, plugins, deadline_s=2.0, parallel=1)
    assert time.monotonic() - t0 < 8
    m = manifest(bundle)
    by_argv = {tuple(i["argv"]): i for i in m["items"] if i["argv"]}
    assert members(bundle)[by_argv[(quick,)]["path"]] == b"done\n"
    assert by_argv[(slow,)]["timed_out"] or "deadline" in by_argv[(slow,)]["reason"]
    assert by_argv[(later,)]["skipped"] and "deadline" in by_argv[(later,)]["reason"]
    assert m["capture"]["partial"] is True and any("deadline" in n for n in m["notes"])


def test_firmware_reads_run_one_at_a_time_per_pf_and_a_hang_skips_that_pf(tmp_path: Path) -> None:
    log = tmp_path / "fw.log"
    # Hangs on r0 (PF A); on every rail, logs when it starts and ends.
    fw = script(tmp_path, "fwread", f'echo "start $1 $2 $(date +%s.%N)" >> {log}\n'
                                    f'[ "$1" = r0 ] && sleep 60\nsleep 0.2\n'
                                    f'echo "end $1 $2 $(date +%s.%N)" >> {log}\necho "$1 $2"\n')
    steps = tuple(Command((fw, "{rail}", str(n)), timeout_s=1.0, firmware="rail") for n in range(3))
    plugins = [fake_replay({"r0": "0000:0a:00.0", "r1": "0000:0b:00.0", "r2": "0000:0b:00.1", "r3": "0000:0b:00.1"}),
             plugin(Plugin("fw", 1, steps))]
    bundle = run(tmp_path, plugins, parallel=4)
    m = manifest(bundle)
    by_argv = {tuple(i["argv"]): i for i in m["items"] if i["argv"]}
    assert by_argv[(fw, "r0", "0")]["timed_out"]
    for n in ("1", "2"):
        it = by_argv[(fw, "r0", n)]
        assert it["skipped"] and "hung" in it["reason"] and "0000:0a:00.0" in it["reason"]
    for rail in ("r1", "r2", "r3"):
        assert all(by_argv[(fw, rail, n)]["rc"] == 0 for n in "012")
    assert m["hung"] == [{"source": "fwread", "device": "0000:0a:00.0"}]
    assert any("0000:0a:00.0" in n for n in m["notes"])
    # r2 and r3 share PF 0000:0b:00.1: their reads never overlapped.
    spans: dict[tuple[str, str], list[float]] = {}
    for line in log.read_text().splitlines():
        _what, rail, n, ts = line.split()
        spans.setdefault((rail, n), []).append(float(ts))
    shared = sorted(v for (rail, _), v in spans.items() if rail in ("r2", "r3"))
    assert len(shared) == 6
    for a, b in itertools.pairwise(shared):
        assert a[1] <= b[0]


def test_hung_firmware_from_before_is_not_tried_again(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    fw = script(tmp_path, "fwread", f"touch {marker}\n")
    plugins = [fake_replay({"r0": "0000:0a:00.0"}),
             plugin(Plugin("fw", 1, (Command((fw, "{rail}"), firmware="rail"),)))]
    bundle = run(tmp_path, plugins, skip_firmware=frozenset({"0000:0a:00.0"}))
    (it,) = [i for i in manifest(bundle)["items"] if i["argv"] == [fw, "r0"]]
    assert it["skipped"] and "hung" in it["reason"] and not marker.exists()


def test_generated_files_and_per_rail_expansion(tmp_path: Path) -> None:
    echo = script(tmp_path, "echo-arg", 'echo "$@"\n')
    plugins = [fake_replay({"r0": "0000:0a:00.0", "r1": "0000:0b:00.0"}),
             plugin(Plugin("g", 1, (Command((echo, "dev", "{rail}")), Generated("hello.txt", lambda ctx: b"hi\n"))))]
    bundle = run(tmp_path, plugins)
    got = members(bundle)
    assert got["hello.txt"] == b"hi\n"
    slug_base = echo.replace("/", "-")
    assert got[f"cmd/{slug_base}_dev_r0.stdout"] == b"dev r0\n"
    assert got[f"cmd/{slug_base}_dev_r1.stdout"] == b"dev r1\n"
    assert got[f"cmd/{slug_base}_dev_r1.rc"] == b"0\n"


def test_pod_namespaces_only_with_pod_netns(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var/run/netns").mkdir(parents=True)
    for name in ("cni-1f2e", "cni-9a8b"):
        (root / "var/run/netns" / name).write_text("")
    echo = script(tmp_path, "echo-arg", 'echo "$@"\n')
    plugins = [plugin(Plugin("n", 1, (Command((echo, "-n", "{netns}", "addr")),)))]
    off = items(run(tmp_path, plugins))
    (it,) = [i for i in off.values() if i.get("plugin") == "n"]
    assert it["skipped"] and "--pod-netns" in it["reason"]
    on = run(tmp_path, plugins, pod_netns=True)
    got = {tuple(i["argv"]): i for i in manifest(on)["items"] if i.get("plugin") == "n"}
    assert sorted(got) == [(echo, "-n", "cni-1f2e", "addr"), (echo, "-n", "cni-9a8b", "addr")]
    assert all(i["rc"] == 0 for i in got.values())


def test_commands_run_niced_with_lc_all_c_and_no_inherited_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RAILSCOPE_TEST_SECRET", "leak")
    probe = script(tmp_path, "probe", 'echo "lc=$LC_ALL secret=$RAILSCOPE_TEST_SECRET"\n'
                                      "cut -d' ' -f19 /proc/$$/stat\n")
    out = io.BytesIO()
    root = tmp_path / "root"
    root.mkdir()
    from agent.capture.runner import CaptureParams as P

    capture(LiveHost(str(root)), out, P(node="n", nice=10, recorder_gap_s=0),
            plugin_modules=[plugin(Plugin("p", 1, (Command((probe,)),)))], staging_dir=str(tmp_path))
    it = next(i for i in items(out.getvalue()).values() if i["argv"] == [probe])
    lines = members(out.getvalue())[it["path"]].decode().splitlines()
    assert lines[0] == "lc=C secret="
    assert int(lines[1]) >= 10


def test_firmware_reads_take_the_shared_firmware_gate_and_never_wait_past_the_deadline(tmp_path: Path,
                                                                                      held_elsewhere: Any) -> None:

    from agent.host.firmware import FirmwareGate

    fw = script(tmp_path, "fwread", "echo ok\n")
    plugins = [fake_replay({"r0": "0000:0a:00.0", "r1": "0000:0b:00.0"}),
             plugin(Plugin("fw", 1, (Command((fw, "{rail}"), firmware="rail"), Command((fw, "free")))))]
    gate = FirmwareGate()
    t0 = time.monotonic()
    with held_elsewhere(gate, "0000:0a:00.0"):  # a sampler's read of PF 0000:0a:00.0, stuck in the driver
        bundle = run(tmp_path, plugins, firmware_gate=gate, deadline_s=2.0)
    assert time.monotonic() - t0 < 8
    by_argv = {tuple(i["argv"]): i for i in manifest(bundle)["items"] if i["argv"]}
    assert by_argv[(fw, "r0")]["skipped"] and "held" in by_argv[(fw, "r0")]["reason"]
    assert by_argv[(fw, "r1")]["rc"] == 0  # another PF: not held up
    assert by_argv[(fw, "free")]["rc"] == 0  # not a firmware read: not held up
    bundle = run(tmp_path, plugins, firmware_gate=gate)
    by_argv = {tuple(i["argv"]): i for i in manifest(bundle)["items"] if i["argv"]}
    assert by_argv[(fw, "r0")]["rc"] == 0 and gate.acquire("0000:0a:00.0", 0)


def test_two_captures_in_one_second_get_two_files(tmp_path: Path, monkeypatch) -> None:
    import tarfile

    from agent.capture import runner

    monkeypatch.setattr(runner, "bundle_name", lambda node, when=None: "node-a-20261201T000000Z")
    root = tmp_path / "root"
    root.mkdir()
    plugins = [plugin(Plugin("g", 1, (Generated("x.txt", lambda ctx: b"x"),)))]
    params = CaptureParams(node="node-a", nice=0, recorder_gap_s=0)
    out = str(tmp_path / "out") + "/"
    a = runner.capture_to_file(LiveHost(str(root)), out, params, plugin_modules=plugins)
    b = runner.capture_to_file(LiveHost(str(root)), out, params, plugin_modules=plugins)
    assert (a.name, b.name) == ("node-a-20261201T000000Z", "node-a-20261201T000000Z-2")
    assert Path(a.path).exists() and Path(b.path).exists()
    with tarfile.open(b.path) as tf:
        assert {n.split("/")[0] for n in tf.getnames()} == {b.name}
