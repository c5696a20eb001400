"""A node image captured again through the runner (a recorded host): the plugins expand from what the
replay readers saw, the rail PFs' devlink health reporters included (the snapshot's own parse)."""

from __future__ import annotations

import io
from pathlib import Path

from agent.capture.runner import CaptureParams, capture
from agent.host.recorded import open_image

IMAGES = Path(__file__).resolve().parents[2] / "images"


def test_health_diagnose_runs_for_the_rail_pfs_reporters_only() -> None:
    # nic-health-vf-reporter also lists a port's reporter (pci/<bdf>/<port>): not a rail PF's own.
    with open_image(str(IMAGES / "nic-health-vf-reporter")) as host:
        res = capture(host, io.BytesIO(), CaptureParams(node="n", nice=0, recorder_gap_s=0,
                                                        plugins=("replay", "devlink")))
    diagnosed = sorted(" ".join(i["argv"][4:]) for i in res.manifest["items"]
                       if i.get("argv") and "diagnose" in i["argv"])
    assert diagnosed == ["pci/0000:0c:00.0 reporter fw", "pci/0000:0c:00.0 reporter fw_fatal",
                         "pci/0000:8d:00.0 reporter fw", "pci/0000:8d:00.0 reporter fw_fatal"]
    # The replay's own items are the bundle's, with the plug-in that made them.
    replayed = [i for i in res.manifest["items"] if i.get("plugin") == "replay"]
    assert any(i["path"] == "events.json" for i in replayed) and any(i["path"] == "netlink/links.json" for i in replayed)
