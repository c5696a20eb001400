"""A bundle's ``manifest.json`` is written through ``agent.host.image.Manifest`` and its
``events.json`` through the one writer of that document (``agent.host.image.events``): what the
runner, the recording host, the ``agent`` plug-in and the daemon's event log write is the same."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

from agent.capture.manifest import as_item
from agent.capture.plugins import agent as agent_plugin
from agent.capture.runner import CaptureParams, capture
from agent.host.image import Manifest, manifest_to_json, parse_manifest
from agent.host.image.events import events_json
from agent.host.recorded import open_image
from agent.host.recording import RecordingHost
from agent.model import Event
from agent.service.events import EventLog

IMAGES = Path(__file__).resolve().parents[2] / "images"


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf.getmembers()  # type: ignore[union-attr]
                if m.isfile() and "/" in m.name}


def test_the_manifest_is_the_manifests_own_text_and_reads_back_without_a_problem(tmp_path: Path) -> None:
    out = io.BytesIO()
    events = [{"ts": 1.0, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail0"}]
    with open_image(str(IMAGES / "nic-health-vf-reporter")) as host:
        res = capture(host, out, CaptureParams(node="n", nice=0, recorder_gap_s=0, events=events,
                                               plugins=("replay", "devlink", "agent")))
    files = _members(out.getvalue())
    manifest, problems = parse_manifest(files["manifest.json"])
    assert problems == ()
    assert json.loads(files["manifest.json"]) == res.manifest
    assert manifest.extra["plugins"] and [p["name"] for p in manifest.extra["plugins"]] == ["replay", "devlink",
                                                                                             "agent"]
    assert {i["plugin"] for i in res.manifest["items"]} >= {"replay", "devlink", "agent"}
    # written by manifest_to_json from a Manifest: the v1 fields, the capture's own keys beside them
    v1 = ("node", "cluster", "incident", "reason", "agent_version", "started_at", "ended_at")
    built = Manifest(**{k: res.manifest[k] for k in v1}, items=tuple(as_item(i) for i in res.manifest["items"]),
                     extra={k: v for k, v in res.manifest.items() if k not in (*v1, "schema", "items")})
    assert files["manifest.json"].decode() == manifest_to_json(built)
    assert files["events.json"] == events_json(events)


def test_events_json_has_one_writer(tmp_path: Path, example_image: Path) -> None:
    log = EventLog()
    log.add(Event(2.0, "PfcStorm", "critical", "net_rail1", message="storm", evidence=(("pause", 9),)))
    doc = log.to_json()["events"]
    with open_image(str(example_image)) as inner:
        rec = RecordingHost(inner, str(tmp_path / "rec"))
        rec.items(events=doc)
    written = {
        "the event log": log.dumps().encode(),
        "the recording host": (tmp_path / "rec" / "events.json").read_bytes(),
        "the agent plug-in": agent_plugin._events(SimpleNamespace(events=doc)),  # type: ignore[arg-type]
    }
    assert set(written.values()) == {events_json(doc)}, written
