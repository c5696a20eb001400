"""The expectations a bundle records (DESIGN §2): written from the flags in force, read back as
untrusted input, and overridden only by what the command line states."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.cli import main
from agent.config import Expectations, expectations_from_json, expectations_to_json, judge_image

IMAGES = Path(__file__).resolve().parents[1] / "images"


def test_the_recorded_document_reads_back_as_the_same_expectations() -> None:
    exp = Expectations(rails=8, eswitch_mode="switchdev", esw_multiport=False, rdma_netns="exclusive",
                       lossless_prio=4, net_templates=("gpu%rail_id%",), event_window_s=60.0, flap_count=5)
    doc = expectations_to_json(exp)
    assert doc["rails"] == 8 and doc["expect_eswitch_mode"] == "switchdev" and doc["net_template"] == ["gpu%rail_id%"]
    got, problems = expectations_from_json(json.loads(json.dumps(doc)))
    assert problems == ()
    assert Expectations(**got) == exp


@pytest.mark.parametrize("key, value", [
    ("rails", "8"), ("rails", -1), ("rails", True), ("rails", 2.5), ("lossless_prio", 9),
    ("expect_eswitch_mode", "rm -rf"), ("expect_esw_multiport", "yes"), ("net_template", ["net_%bogus%"]),
    ("net_template", "net_rail%rail_id%"), ("event_window", float("inf")), ("storm_ratio", 2),
])
def test_a_bad_recorded_value_is_refused_by_name_and_the_rest_kept(key: str, value: object) -> None:
    got, problems = expectations_from_json({key: value, "rails": 2} if key != "rails" else {key: value,
                                                                                          "lossless_prio": 4})
    assert len(problems) == 1 and key in problems[0]
    assert ("rails" in got) != (key == "rails")


def test_not_an_object_unknown_keys_and_nulls() -> None:
    assert expectations_from_json([1])[1] == ("manifest.json: expectations: not a JSON object, ignored",)
    got, problems = expectations_from_json({"future_flag": 1, "rails": None, "lossless_prio": None})
    assert problems == () and got == {"rails": None}


def test_the_command_line_wins_field_by_field_and_says_so() -> None:
    recorded = expectations_to_json(Expectations(rails=4, eswitch_mode="switchdev"))
    judged = judge_image(Expectations(rails=8), {"rails": "--rails"}, recorded)
    assert (judged.expectations.rails, judged.expectations.eswitch_mode) == (8, "switchdev")
    doc = judged.as_json()
    assert doc["rails"] == {"value": 8, "from": "--rails", "bundle": 4}
    assert doc["expect_eswitch_mode"] == {"value": "switchdev", "from": "bundle"}
    assert judged.words() == "expect_eswitch_mode=switchdev (bundle), rails=8 (--rails; the bundle had 4)"
    old = judge_image(Expectations(), {}, None)
    assert old.expectations == Expectations() and old.words().startswith("the command line's")


def test_a_kernel_table_path_of_the_node_is_recorded_but_never_opened() -> None:
    recorded = expectations_to_json(Expectations(kernel_table_file="/etc/railscope/kernels.json"))
    judged = judge_image(Expectations(), {}, recorded)
    assert judged.expectations.kernel_table_file is None
    assert judged.as_json()["kernel_table"] == {"value": None, "from": "default",
                                                "bundle": "/etc/railscope/kernels.json"}


def _image_with(tmp_path: Path, expectations: object) -> Path:
    img = tmp_path / "img"
    shutil.copytree(IMAGES / "rail-missing", img, symlinks=True)
    man = json.loads((img / "manifest.json").read_text())
    man["expectations"] = expectations
    (img / "manifest.json").write_text(json.dumps(man))
    return img


def test_doctor_from_judges_with_the_recorded_expectations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    img = _image_with(tmp_path, {"expect_eswitch_mode": "legacy", "rails": 3})
    code = main(["doctor", "--from", str(img), "--json"])
    doc = json.loads(capsys.readouterr().out)
    codes = {(f["code"], f["subject"]) for f in doc["findings"]}
    assert ("RailMissing", "net_rail2") in codes  # --rails 3 beyond the rules' two
    assert any(c == "EswitchModeUnexpected" for c, _ in codes)
    assert doc["expectations"]["rails"] == {"value": 3, "from": "bundle"}
    assert doc["notes"] == ["--rails 3: the udev rules name rail(s) 0,1; rail(s) 2 are expected from --rails as well"]
    assert code == 2

    main(["doctor", "--from", str(img), "--expect-eswitch-mode", "switchdev", "--rails", "2"])
    out = capsys.readouterr().out
    assert "EswitchModeUnexpected" not in out and "net_rail2" not in out
    assert "judged with: expect_eswitch_mode=switchdev (--expect-eswitch-mode; the bundle had legacy), " \
           "rails=2 (--rails; the bundle had 3)" in out


def test_an_environment_variable_is_the_command_line_too(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    img = _image_with(tmp_path, {"rails": 3})
    monkeypatch.setenv("RAILSCOPE_RAILS", "2")
    main(["doctor", "--from", str(img), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "expectations" not in doc  # judged as the command line says: the document of a live run
    assert "net_rail2" not in json.dumps(doc["findings"])
    main(["doctor", "--from", str(img)])
    assert "judged with: rails=2 (RAILSCOPE_RAILS; the bundle had 3)" in capsys.readouterr().out


def test_a_tampered_value_is_named_and_the_image_still_judged(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    img = _image_with(tmp_path, {"rails": "\x1b[2Jall", "expect_eswitch_mode": "legacy"})
    main(["doctor", "--from", str(img)])
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out
    assert "manifest.json: expectations: rails:" in out
    assert "EswitchModeUnexpected" in out


def test_the_ber_expectations_are_recorded_and_read_back_checked() -> None:
    exp = Expectations(ber_warning=1e-3, ber_window_s=60.0)
    doc = expectations_to_json(exp)
    assert (doc["ber_warning"], doc["ber_window"]) == (1e-3, 60.0)
    got, problems = expectations_from_json(json.loads(json.dumps(doc)))
    assert problems == () and Expectations(**got) == exp
    # as --ber-warning / --ber-window take them: a ratio in (0, 1), a positive window
    for key, value in (("ber_warning", 1), ("ber_warning", 0), ("ber_warning", True), ("ber_warning", "1e-3"),
                       ("ber_window", 0), ("ber_window", -5)):
        got, problems = expectations_from_json({key: value, "rails": 2})
        assert len(problems) == 1 and key in problems[0] and got == {"rails": 2}
    assert expectations_from_json({"ber_warning": None, "ber_window": None}) == ({}, ())


def test_doctor_from_judges_the_phy_counters_with_the_recorded_ber_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    img = tmp_path / "img"
    shutil.copytree(IMAGES / "link-degrading-ber-recorder", img, symlinks=True)
    man = json.loads((img / "manifest.json").read_text())
    man["expectations"] = {"ber_warning": 1e-3}  # the node was judged with a looser threshold than the default
    (img / "manifest.json").write_text(json.dumps(man))
    code = main(["doctor", "--from", str(img), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and not [f for f in doc["findings"] if f["code"] == "LinkDegrading"]
    assert doc["expectations"]["ber_warning"] == {"value": 1e-3, "from": "bundle"}
    code = main(["doctor", "--from", str(img), "--ber-warning", "2.4e-4"])
    out = capsys.readouterr().out
    assert code == 1 and "LinkDegrading" in out
    assert "ber_warning=0.00024 (--ber-warning; the bundle had 0.001)" in out
