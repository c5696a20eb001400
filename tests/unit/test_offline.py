"""One offline pipeline: ``doctor --from``, ``report``, ``metrics --from`` and the collector's analysis
judge an image the same way, what it could not read included (``agent.offline``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent.config import Expectations
from agent.host.recorded import open_image
from agent.metrics.image import state_from_image
from agent.offline import diagnose_image
from collector.analysis import analyse_file

EXP = Expectations()


def _damaged(tmp_path: Path, example_image: Path) -> Path:
    """The example image with a manifest item of the wrong type and a link entry that is no object."""
    img = tmp_path / "img"
    shutil.copytree(example_image, img, symlinks=True)
    man = json.loads((img / "manifest.json").read_text())
    man["items"][0]["duration_s"] = "soon"
    (img / "manifest.json").write_text(json.dumps(man))
    links = json.loads((img / "netlink/links.json").read_text())
    links["links"].append(7)
    (img / "netlink/links.json").write_text(json.dumps(links))
    return img


def test_every_offline_caller_names_the_same_unavailable_parts(tmp_path: Path, example_image: Path) -> None:
    img = _damaged(tmp_path, example_image)
    got = diagnose_image(str(img), EXP, ())
    sources = {src for src, _why in got.diagnosis.unavailable}
    assert {"manifest", "netlink"} <= sources
    assert got.manifest_error is not None and "duration_s" in got.manifest_error
    with open_image(str(img)) as host:
        metrics = state_from_image(host, EXP, ())
    assert metrics.diagnosis.unavailable == got.diagnosis.unavailable
    collector = analyse_file(str(img), "stored.tar.gz", EXP)
    assert collector["doctor"]["unavailable"] == got.diagnosis.as_json()["unavailable"]
    assert "duration_s" in collector["html"]
