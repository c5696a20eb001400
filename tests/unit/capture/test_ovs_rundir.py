"""Which OVS the ovs plug-in and the OVS reader look at: the built-in run directories on a node as
deployed, ``$OVS_RUNDIR/db.sock`` when that is set (the OVS tools' own variable), which the command
runner then hands to the tools and to nothing else of the agent's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.capture.context import CaptureContext
from agent.capture.plugins import ovs as ovs_plan
from agent.host.live import LiveHost
from agent.host.runner import run_argv
from agent.readers.ovs import DB_SOCKETS, db_sockets


def _root_with_socket(tmp_path: Path, where: str) -> Path:
    root = tmp_path / "root"
    path = root / where.lstrip("/")
    path.parent.mkdir(parents=True)
    # A plain file: existence is what is looked at (a socket's name could outgrow sun_path here).
    path.touch()
    return root


def test_unset_the_built_in_run_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    assert db_sockets() == DB_SOCKETS == ("/var/run/openvswitch/db.sock", "/run/openvswitch/db.sock")
    root = _root_with_socket(tmp_path, "/run/openvswitch/db.sock")
    assert ovs_plan.skip(CaptureContext(host=LiveHost(str(root)))) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    why = ovs_plan.skip(CaptureContext(host=LiveHost(str(empty))))
    assert why == "no OVS db socket at /var/run/openvswitch/db.sock or /run/openvswitch/db.sock"


def test_ovs_rundir_is_the_only_socket_looked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OVS_RUNDIR", "/srv/ovs")
    assert db_sockets() == ("/srv/ovs/db.sock",)
    assert ovs_plan.skip(CaptureContext(host=LiveHost(str(_root_with_socket(tmp_path, "/srv/ovs/db.sock"))))) is None
    # The tools would not contact the default socket with OVS_RUNDIR set, so it does not count.
    other = _root_with_socket(tmp_path / "b", "/run/openvswitch/db.sock")
    assert ovs_plan.skip(CaptureContext(host=LiveHost(str(other)))) == "no OVS db socket at /srv/ovs/db.sock"


def test_the_runner_hands_ovs_rundir_to_the_tools_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVS_RUNDIR", "/srv/ovs")
    monkeypatch.setenv("RAILSCOPE_TEST_SECRET", "x")
    env = dict(line.split("=", 1) for line in run_argv(["env"]).text.splitlines())
    assert env["OVS_RUNDIR"] == "/srv/ovs" and env["LC_ALL"] == "C"
    assert set(env) == {"PATH", "LC_ALL", "OVS_RUNDIR"}
    monkeypatch.delenv("OVS_RUNDIR")
    assert "OVS_RUNDIR" not in dict(line.split("=", 1) for line in run_argv(["env"]).text.splitlines())
