"""``railscope capture`` on the netns rail host: the bundle replays to the live diagnosis, its
``.sha256`` checks, it unpacks under one top directory, and the manifest names every step."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.capture.plugins import PLUGINS, load
from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

DOCTOR = ("doctor", "--json", "--rails", "2")


def capture(rails: RailNetns, out: Path | str, *args: str) -> tuple[Path, str]:
    res = rails.railscope("capture", "-o", str(out), "--recorder-gap", "1", *args, timeout=180)
    assert res.returncode == 0, res.stderr
    path, sha = res.stdout.strip().splitlines()
    assert sha.startswith("sha256 ")
    return Path(path), sha.split()[1]


def manifest_of(bundle: Path) -> dict:
    with tarfile.open(bundle) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        f = tf.extractfile(member)
        assert f is not None
        return json.loads(f.read())


def test_capture_replays_to_the_live_diagnosis(rails: RailNetns, tmp_path: Path) -> None:
    rails.set_peer(1, "down")
    bundle, sha = capture(rails, f"{tmp_path}/out/", "--node", "node-a", "--cluster", "lab",
                          "--incident", "inc-7", "--reason", "test")
    live = rails.railscope(*DOCTOR)
    assert live.returncode in (0, 1, 2), live.stderr
    # The replay runs outside the namespace: nothing of the live node may leak into it.
    res = subprocess.run([sys.executable, "-m", "agent.cli", *DOCTOR, "--from", str(bundle)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == live.returncode, res.stderr
    live_doc, replay_doc = json.loads(live.stdout), json.loads(res.stdout)
    live_doc.pop("node", None)
    replay_doc.pop("node", None)
    assert replay_doc["unavailable"] == live_doc["unavailable"], json.dumps([replay_doc["unavailable"], live_doc["unavailable"]])
    assert replay_doc == live_doc
    assert any(f["code"] == "RailLinkDown" for f in replay_doc["findings"])

    # sha256sum accepts the .sha256 beside it, and it is the digest the command printed.
    check = subprocess.run(["sha256sum", "-c", bundle.name + ".sha256"], cwd=bundle.parent,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert subprocess.run(["sha256sum", str(bundle)], capture_output=True, text=True).stdout.split()[0] == sha

    names = subprocess.run(["tar", "tzf", str(bundle)], capture_output=True, text=True, check=True).stdout.split()
    assert {n.split("/")[0] for n in names} == {bundle.name.removesuffix(".tar.gz")}
    assert bundle.parent == tmp_path / "out" and bundle.name.startswith("node-a-")

    m = manifest_of(bundle)
    from agent.host.image import parse_manifest

    parsed, problems = parse_manifest(json.dumps(m).encode())
    assert problems == () and len(parsed.items) == len(m["items"])  # what the image reader accepts
    assert (m["node"], m["cluster"], m["incident"], m["reason"]) == ("node-a", "lab", "inc-7", "test")
    assert [p["name"] for p in m["plugins"]] == list(PLUGINS)
    assert all(p["version"] >= 1 for p in m["plugins"])
    items = m["items"]
    for it in items:
        assert set(it) >= {"path", "kind", "argv", "rc", "duration_s", "bytes", "sha256", "truncated",
                           "timed_out", "skipped"}, it
        assert it["skipped"] == ("reason" in it) or it["timed_out"], it
    by_plugin = {it.get("plugin") for it in items}
    assert set(PLUGINS) <= by_plugin  # every plug-in's steps are listed with their outcome
    # every step of every plug-in is there: per-rail steps once per rail
    paths = {it["path"] for it in items}
    for mod in load():
        for step in mod.PLUGIN.steps:
            argv = getattr(step, "argv", None)
            if argv and "{rail}" in argv:
                for rail in ("net_rail0", "net_rail1"):
                    want = "cmd/" + "_".join(a.replace("{rail}", rail) for a in argv).replace("/", "-") + ".stdout"
                    assert want in paths, want
    ip = next(it for it in items if it["argv"] == ["ip", "-s", "-d", "link", "show", "net_rail1"])
    assert ip["rc"] == 0 and ip["bytes"] > 0 and len(ip["sha256"]) == 64
    with tarfile.open(bundle) as tf:
        top = bundle.name.removesuffix(".tar.gz")
        data = tf.extractfile(f"{top}/{ip['path']}").read()  # type: ignore[union-attr]
    assert b"net_rail1" in data
    rec = next(it for it in items if it["path"] == "recorder.jsonl")
    assert rec["bytes"] > 0
    with tarfile.open(bundle) as tf:
        lines = tf.extractfile(f"{top}/recorder.jsonl").read().decode().splitlines()  # type: ignore[union-attr]
    stamps = {json.loads(x)["ts"] for x in lines}
    assert len(stamps) == 2  # two samples, so rates exist offline


def test_capture_to_a_file_name_and_never_over_it(rails: RailNetns, tmp_path: Path) -> None:
    out = tmp_path / "case-42.tar.gz"
    bundle, _ = capture(rails, out)
    assert bundle == out and (tmp_path / "case-42.tar.gz.sha256").exists()
    names = subprocess.run(["tar", "tzf", str(out)], capture_output=True, text=True, check=True).stdout.split()
    assert {n.split("/")[0] for n in names} == {"case-42"}
    again = rails.railscope("capture", "-o", str(out), "--recorder-gap", "0")
    assert again.returncode == 1 and "refusing to overwrite" in again.stderr
    assert "Traceback" not in again.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case-42.tar.gz", "case-42.tar.gz.sha256"]


@pytest.mark.parametrize("tty", [True, False])
def test_a_progress_line_on_a_terminal_only(tmp_path: Path, tty: bool) -> None:
    import os
    import pty

    master, slave = pty.openpty() if tty else (None, None)
    try:
        res = subprocess.run([sys.executable, "-m", "agent.cli", "capture", "-o", f"{tmp_path}/",
                              "--recorder-gap", "0"], stdout=subprocess.PIPE,
                             stderr=slave if tty else subprocess.PIPE, timeout=180)
        if tty:
            os.close(slave)  # type: ignore[arg-type]
            err = b""
            while True:
                try:
                    chunk = os.read(master, 65536)  # type: ignore[arg-type]
                except OSError:
                    break
                if not chunk:
                    break
                err += chunk
        else:
            err = res.stderr
    finally:
        if master is not None:
            os.close(master)
    assert res.returncode == 0
    path, sha = res.stdout.decode().split("\n")[:2]
    assert Path(path).is_file() and sha.startswith("sha256 ")
    # "\x1b[K": the line erases what a longer one before it left (agent/commands/progress.py)
    progress = [p.replace("\x1b[K", "") for p in err.decode().split("\r") if " steps, " in p]
    if tty:
        last = progress[-1].strip().splitlines()[0]
        done, total = last.split(": ")[1].split(" steps")[0].split("/")
        assert done == total and int(total) > 10 and last.endswith("MB")
    else:
        assert not progress
