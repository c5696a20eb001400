"""``railscope report --html``: one self-contained page per bundle, loaded in real headless Chromium
with JavaScript off; the screenshot shows the rail table and the charts."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
IMAGES = ROOT / "tests" / "images"
ALL = sorted(p.name for p in IMAGES.iterdir() if (p / "expected.json").is_file())

from tests.support import chromium  # noqa: E402
from tests.support.hostile_text import HOSTILE, hostile_image  # noqa: E402


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def page(path: Path, out: Path, *args: str) -> tuple[str, int]:
    code = main(["report", str(path), "--html", str(out), *args])
    return out.read_text(encoding="utf-8"), code


def parsed(text: str) -> _Tags:
    p = _Tags()
    p.feed(text)
    p.close()
    return p


def assert_self_contained(tags: _Tags) -> None:
    names = {t for t, _ in tags.tags}
    assert not names & {"script", "img", "link", "iframe", "object", "embed", "image"}, names
    for tag, attrs in tags.tags:
        for key, val in attrs.items():
            assert not key.startswith("on"), (tag, key)
            if key in ("src", "href", "xlink:href", "action"):
                raise AssertionError(f"{tag} has {key}={val!r}: the page must fetch nothing")
    csp = [a for t, a in tags.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")


#: images whose flight recorder holds the PHY counters only (the corrected-bit ratio and symbol errors)
PHY_CHARTS = {"link-degrading-ber-recorder": 4, "link-degrading-ber-warning-recorder": 4, "link-degrading-symbol-recorder": 4,
              "link-idle-too-few-bits": 2}


@pytest.mark.parametrize("name", ALL)
def test_every_image_gives_a_self_contained_page_naming_every_finding(name: str, tmp_path: Path) -> None:
    expected = json.loads((IMAGES / name / "expected.json").read_text())
    text, code = page(IMAGES / name, tmp_path / "r.html", *expected["args"])
    assert code == expected["exit"]
    tags = parsed(text)
    assert_self_contained(tags)
    body = " ".join(tags.text)
    for fcode, severity, subject in expected["findings"]:
        assert fcode in body and subject in body and severity.upper() in body
    assert ("<table id=\"rails\">" in text) and text.count("<tr") >= 3
    has_rec = (IMAGES / name / "recorder.jsonl").exists()
    # 2 rails x the 4 incident series; the PHY recorders: 2 rails x (ratio, symbol errors), or 1 rail
    charts = PHY_CHARTS.get(name, 8) if has_rec else 0
    assert text.count('class="chart"') == charts


def test_bundle_text_is_escaped_in_the_page(tmp_path: Path) -> None:
    text, _ = page(hostile_image(tmp_path / "hostile"), tmp_path / "r.html")
    tags = parsed(text)
    assert_self_contained(tags)
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\x1b" not in text and "\x07" not in text
    assert sum(HOSTILE[20:40] in t for t in tags.text) >= 3


def test_an_unwritable_page_is_exit_1_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", str(IMAGES / "spectrumx-2rail-healthy"), "--html", str(tmp_path / "no" / "r.html")])
    assert code == 1 and "railscope report: error:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_headless_chromium_with_javascript_off_shows_the_rail_table_and_a_chart(tmp_path: Path) -> None:
    if chromium.chromium_binary() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    out = tmp_path / "storm.html"
    page(IMAGES / "pfc-storm-recorder", out)
    rail0_pause = 'tr:nth-child(1) svg[data-metric="pause_share"]'
    rail1_pause = 'tr:nth-child(2) svg[data-metric="pause_share"]'
    got = chromium.load(out.as_uri(), boxes=("#rails", "#recorder", f"#recorder {rail0_pause}",
                                             f"#recorder {rail1_pause}"))
    (tmp_path / "storm.png").write_bytes(got.png)
    assert got.requests == [out.as_uri()]  # nothing fetched but the page itself
    assert got.title == "railscope report: gpu-node-017"
    dom = parsed(got.dom)
    assert sum(1 for t, _ in dom.tags if t == "svg") == 8
    assert "net_rail0" in got.dom and "PfcStorm" in got.dom

    width, height, rows = chromium.decode_png(got.png)
    assert width == 1280 and height > 900
    for sel in ("#rails", "#recorder", f"#recorder {rail0_pause}", f"#recorder {rail1_pause}"):
        assert sel in got.boxes, sel
    _x, _y, w, h = got.boxes["#rails"]
    assert w > 600 and h > 40 and chromium.ink(rows, got.boxes["#rails"]) > 2000  # the table's text is drawn
    # The storm: rail 0 paused 80 % of the time, drawn in the transmit colour; rail 1 stayed flat.
    storm = chromium.ink(rows, got.boxes[f"#recorder {rail0_pause}"], transmit=True)
    calm = chromium.ink(rows, got.boxes[f"#recorder {rail1_pause}"], transmit=True)
    assert storm > 2000 and storm > 5 * max(calm, 1), (storm, calm)


@pytest.mark.slow
def test_chromium_runs_no_script_in_the_harness(tmp_path: Path) -> None:
    """The harness itself: a page whose script would change the title keeps its title."""
    if chromium.chromium_binary() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    probe = tmp_path / "probe.html"
    probe.write_text("<!DOCTYPE html><title>static</title><script>document.title='script ran'</script>")
    assert chromium.load(probe.as_uri()).title == "static"


def test_report_html_of_a_hostile_bundle_is_bounded(tmp_path: Path) -> None:
    """70,000 events and a recorder of 5,000 netdevs: the first rails and the latest events are
    drawn, the rest counted, and the page stays small (it was 34 MB and 75 MB)."""
    import subprocess
    import sys as _sys

    from tests.support.hostile_bundles import hostile_bundle

    bundle = tmp_path / "hostile.tar.gz"
    bundle.write_bytes(hostile_bundle(events=70_000, message=300, netdevs=5_000))
    out = tmp_path / "page.html"
    subprocess.run([_sys.executable, "-m", "agent.cli", "report", "--html", str(out), str(bundle)],
                   capture_output=True, timeout=300, cwd=Path(__file__).resolve().parents[3])
    text = out.read_text()
    assert "69,800 more events" in text and "4,968 more netdevs" in text
    assert len(text) < 1 << 20
