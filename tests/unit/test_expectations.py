"""The expectations a bundle records (docs/design.md §2): written from the flags in force, read back as
untrusted input, and overridden only by what the command line states."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
    exp = Expectations(ber_warning=1e-3, ber_critical=2e-3, ber_window_s=60.0)
    doc = expectations_to_json(exp)
    assert (doc["ber_warning"], doc["ber_critical"], doc["ber_window"]) == (1e-3, 2e-3, 60.0)
    got, problems = expectations_from_json(json.loads(json.dumps(doc)))
    assert problems == () and Expectations(**got) == exp
    # as --ber-warning / --ber-critical / --ber-window take them: a ratio in (0, 1), a positive window
    for key, value in (("ber_warning", 1), ("ber_warning", 0), ("ber_warning", True), ("ber_warning", "1e-3"),
                       ("ber_critical", 1), ("ber_critical", -1e-4), ("ber_critical", "2.4e-4"),
                       ("ber_window", 0), ("ber_window", -5)):
        got, problems = expectations_from_json({key: value, "rails": 2})
        assert len(problems) == 1 and key in problems[0] and got == {"rails": 2}
    assert expectations_from_json({"ber_warning": None, "ber_critical": None, "ber_window": None}) == ({}, ())


def test_a_bundle_records_both_ber_tiers() -> None:
    # the defaults of docs/design.md §4: a warning well below the RS(544,514) FEC's limit, critical at it
    doc = expectations_to_json(Expectations())
    assert (doc["ber_warning"], doc["ber_critical"]) == (1e-5, 2.4e-4)


def test_doctor_from_judges_the_phy_counters_with_the_recorded_ber_tiers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    img = tmp_path / "img"
    shutil.copytree(IMAGES / "link-degrading-ber-recorder", img, symlinks=True)  # 5e-4 over 300 s
    man = json.loads((img / "manifest.json").read_text())
    # the node was judged with looser tiers than the defaults: 5e-4 is not even a warning there
    man["expectations"] = {"ber_warning": 1e-3, "ber_critical": 2e-3}
    (img / "manifest.json").write_text(json.dumps(man))
    code = main(["doctor", "--from", str(img), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and not [f for f in doc["findings"] if f["code"] == "LinkDegrading"]
    assert doc["expectations"]["ber_warning"] == {"value": 1e-3, "from": "bundle"}
    assert doc["expectations"]["ber_critical"] == {"value": 2e-3, "from": "bundle"}
    code = main(["doctor", "--from", str(img), "--ber-warning", "2e-4"])
    out = capsys.readouterr().out
    assert code == 1 and "LinkDegrading" in out  # a warning: the bundle's critical edge 2e-3 still holds
    assert "ber_warning=0.0002 (--ber-warning; the bundle had 0.001)" in out
    assert main(["doctor", "--from", str(img), "--ber-critical", "2.4e-4"]) == 2
    assert "ber_critical=0.00024 (--ber-critical; the bundle had 0.002)" in capsys.readouterr().out


def test_every_expectation_has_a_flag_so_a_bundle_records_it() -> None:
    # A field without a flag is dropped from every manifest, and a replay judges without it: the map
    # must grow with the dataclass.
    from dataclasses import fields

    from agent.config import EXPECTATION_FLAGS

    assert [f.name for f in fields(Expectations) if f.name not in EXPECTATION_FLAGS] == []
    assert set(EXPECTATION_FLAGS) <= {f.name for f in fields(Expectations)}


def test_the_readiness_expectations_are_recorded_and_read_back_checked() -> None:
    exp = Expectations(mtu=9000, driver="doca")
    doc = expectations_to_json(exp)
    assert (doc["expect_mtu"], doc["expect_driver"]) == (9000, "doca")
    got, problems = expectations_from_json(json.loads(json.dumps(doc)))
    assert problems == () and Expectations(**got) == exp
    # as --expect-mtu / --expect-driver take them: 68-65535 bytes, a whole number; the word "doca"
    for key, value in (("expect_mtu", 67), ("expect_mtu", 65536), ("expect_mtu", 9000.5), ("expect_mtu", "9000"),
                       ("expect_mtu", True), ("expect_driver", "inbox"), ("expect_driver", "\x1b[2Jdoca"),
                       ("expect_driver", 1)):
        got, problems = expectations_from_json({key: value, "rails": 2})
        assert len(problems) == 1 and key in problems[0] and got == {"rails": 2}
    # null is a recorded "no expectation": it yields to nothing but a flag
    assert expectations_from_json({"expect_mtu": None, "expect_driver": None}) == (
        {"mtu": None, "driver": None}, ())


def _capture_with(image: str, tmp_path: Path, *flags: str) -> Path:
    """A bundle of the node image ``image`` captured by the real runner with the expectations the capture
    command's own parser gives ``flags`` (and the ``RAILSCOPE_*`` variables in force)."""
    from agent.cli import build_parser
    from agent.expectations import expectations_from_args

    args = build_parser(only="capture").parse_args(["capture", "-o", str(tmp_path / "unused.tar.gz"), *flags])
    return _capture_exp(image, tmp_path, expectations_from_args(args))


def _capture_exp(image: str, tmp_path: Path, exp: Expectations) -> Path:
    """A bundle of ``image`` captured by the real runner, its manifest recording ``exp`` as the agent's
    capture job and ``railscope capture`` record theirs."""
    import io

    from agent.capture.runner import CaptureParams, capture
    from agent.host.recorded import RecordedHost

    buf = io.BytesIO()
    with RecordedHost(str(IMAGES / image)) as host:
        capture(host, buf, CaptureParams(node="gpu-node-017", nice=0, recorder_gap_s=0,
                                         expectations=expectations_to_json(exp)))
    bundle = tmp_path / f"{image}.tar.gz"
    bundle.write_bytes(buf.getvalue())
    return bundle


def _codes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> set[tuple[str, str]]:
    main(argv)
    return {(f["code"], f["subject"]) for f in json.loads(capsys.readouterr().out)["findings"]}


CABLING = Path(__file__).resolve().parents[1] / "fixtures/cabling/RECONSTRUCTED-gpu-node-017.csv"


@pytest.mark.parametrize(("node", "want"), [
    ("gpu-node-017", [["gpu-node-017", "0", "leaf-02", "swp1"], ["gpu-node-017", "1", "leaf-02", "swp2"]]),
    ("gpu-node-017.dc1.example", [["gpu-node-017", "0", "leaf-02", "swp1"], ["gpu-node-017", "1", "leaf-02", "swp2"]]),
    ("gpu-node-099", None),  # a map without a row of this node (the image is gpu-node-017): no rows at all
])
def test_a_bundle_records_only_its_own_nodes_rows_of_the_cabling_map(tmp_path: Path, node: str,
                                                                     want: list[list[str]] | None) -> None:
    """A site's map names every node: the bundle of one node records that node's rows (its name or short
    name), none of another node's."""
    import io

    from agent.capture.runner import CaptureParams, capture
    from agent.expectations import read_cabling
    from agent.host.recorded import RecordedHost

    exp = Expectations(cabling=read_cabling(str(CABLING)))
    assert len(exp.cabling or ()) == 3
    if want is None:
        exp = Expectations(cabling=tuple(r for r in exp.cabling or () if r[0] != "gpu-node-017"))
    buf = io.BytesIO()
    with RecordedHost(str(IMAGES / "spectrumx-2rail-healthy")) as host:
        capture(host, buf, CaptureParams(node=node, nice=0, recorder_gap_s=0, expectations=expectations_to_json(exp)))
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(buf.getvalue())
    assert _manifest_of(bundle)["expectations"]["cabling"] == want


def test_a_capture_with_expect_mtu_replays_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # net_rail0 9000, net_rail1 1500: without a flag the tie goes to 9000 (net_rail1 is judged); the node
    # was judged against 1500, so net_rail0 is the rail off its MTU, live and replayed.
    live = _codes(["doctor", "--from", str(IMAGES / "mtu-mismatch"), "--json", "--expect-mtu", "1500"], capsys)
    assert ("MtuMismatch", "net_rail0") in live and ("MtuMismatch", "net_rail1") not in live
    bundle = _capture_with("mtu-mismatch", tmp_path, "--expect-mtu", "1500")
    assert _codes(["doctor", "--from", str(bundle), "--json"], capsys) == live
    main(["doctor", "--from", str(bundle)])
    assert "judged with: expect_mtu=1500 (bundle)" in capsys.readouterr().out
    main(["doctor", "--from", str(bundle), "--expect-mtu", "9000"])
    out = capsys.readouterr().out
    assert "net_rail1" in out and "expect_mtu=9000 (--expect-mtu; the bundle had 1500)" in out


def test_a_capture_with_expect_driver_replays_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    live = _codes(["doctor", "--from", str(IMAGES / "driver-not-doca"), "--json", "--expect-driver", "doca"], capsys)
    assert ("DriverNotDoca", "node") in live
    assert ("DriverNotDoca", "node") not in _codes(["doctor", "--from", str(IMAGES / "driver-not-doca"), "--json"],
                                                   capsys)
    bundle = _capture_with("driver-not-doca", tmp_path, "--expect-driver", "doca")
    assert _codes(["doctor", "--from", str(bundle), "--json"], capsys) == live
    main(["doctor", "--from", str(bundle)])
    assert "judged with: expect_driver=doca (bundle)" in capsys.readouterr().out

    # the variable forms are the capture's command line too, and the replay's
    monkeypatch.setenv("RAILSCOPE_EXPECT_DRIVER", "doca")
    monkeypatch.setenv("RAILSCOPE_EXPECT_MTU", "9000")
    (tmp_path / "env").mkdir()
    by_env = _capture_with("driver-not-doca", tmp_path / "env")
    monkeypatch.delenv("RAILSCOPE_EXPECT_DRIVER")
    monkeypatch.delenv("RAILSCOPE_EXPECT_MTU")
    man = _manifest_of(by_env)
    assert (man["expectations"]["expect_driver"], man["expectations"]["expect_mtu"]) == ("doca", 9000)
    assert ("DriverNotDoca", "node") in _codes(["doctor", "--from", str(by_env), "--json"], capsys)
    monkeypatch.setenv("RAILSCOPE_EXPECT_MTU", "4200")  # a variable overrides the bundle as a flag does
    main(["doctor", "--from", str(by_env)])
    assert "expect_mtu=4200 (RAILSCOPE_EXPECT_MTU; the bundle had 9000)" in capsys.readouterr().out


def test_a_capture_with_expect_rdma_records_it_and_replays_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # an Ethernet-only node (no RDMA rule, RoCE disabled): RailRdmaMissing only when --expect-rdma says so
    image = str(IMAGES / "rdma-absent-roce-disabled")
    assert _codes(["doctor", "--from", image, "--json"], capsys) == set()
    live = _codes(["doctor", "--from", image, "--json", "--expect-rdma"], capsys)
    assert live == {("RailRdmaMissing", "net_rail0"), ("RailRdmaMissing", "net_rail1")}
    bundle = _capture_with("rdma-absent-roce-disabled", tmp_path, "--expect-rdma")
    assert _manifest_of(bundle)["expectations"]["expect_rdma"] is True
    assert _codes(["doctor", "--from", str(bundle), "--json"], capsys) == live
    main(["doctor", "--from", str(bundle)])
    assert "judged with: expect_rdma=True (bundle)" in capsys.readouterr().out
    # without the flag the manifest records no expectation (null), and the replay judges nothing
    (tmp_path / "plain").mkdir()
    plain = _capture_with("rdma-absent-roce-disabled", tmp_path / "plain")
    assert _manifest_of(plain)["expectations"]["expect_rdma"] is None
    assert _codes(["doctor", "--from", str(plain), "--json"], capsys) == set()
    # the variable is the flag
    monkeypatch.setenv("RAILSCOPE_EXPECT_RDMA", "true")
    (tmp_path / "env").mkdir()
    assert _manifest_of(_capture_with("rdma-absent-roce-disabled", tmp_path / "env"))["expectations"]["expect_rdma"]
    # a manifest value that is not true is refused, as the flag takes only its presence
    got, problems = expectations_from_json({"expect_rdma": "yes"})
    assert got == {} and "expect_rdma" in problems[0]
    assert expectations_from_json({"expect_rdma": None}) == ({"rdma": None}, ())


def _manifest_of(bundle: Path) -> dict:
    import tarfile

    with tarfile.open(bundle) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        fh = tf.extractfile(member)
        assert fh is not None
        return json.loads(fh.read())


def test_preflight_from_a_bundle_judges_with_its_recorded_readiness_expectations_under_the_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def checks(*argv: str) -> tuple[int, dict[str, str]]:
        code = main(["preflight", "--json", *argv])
        return code, {c["check"]: f"{c['status']} {c['detail']}" for c in json.loads(capsys.readouterr().out)["checks"]}

    (tmp_path / "ofed").mkdir()
    ofed = _capture_with("driver-mlnx-ofed-healthy", tmp_path / "ofed", "--expect-driver", "doca")
    code, got = checks("--from", str(ofed))
    assert code == 0 and got["driver"] == "ok DOCA / OFED mlx5 driver", got  # judged, not "no --expect-driver"
    # a flag overrides what the bundle recorded (here: no expectation) as it does for doctor --from
    plain = _capture_with("driver-not-doca", tmp_path)
    assert _manifest_of(plain)["expectations"]["expect_driver"] is None
    code, got = checks("--from", str(plain), "--expect-driver", "doca")
    assert code == 1 and got["driver"].startswith("fail DriverNotDoca"), got


def test_metrics_from_a_bundle_takes_its_expectations_and_a_flag_overrides_them(
        tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    def exposition(*argv: str) -> str:
        assert main(["metrics", *argv]) == 0
        return capsysbinary.readouterr().out.decode()

    missing = 'railscope_finding{code="RailMissing",severity="critical",subject="net_rail2"} 1.0'
    img = _image_with(tmp_path, {"rails": 3})
    assert missing in exposition("--from", str(img))
    assert missing not in exposition("--from", str(img), "--rails", "2")  # the flag, not the bundle's 3
    bundle = _capture_with("mtu-mismatch", tmp_path, "--expect-mtu", "1500")
    got = exposition("--from", str(bundle))
    assert 'code="MtuMismatch",severity="warning",subject="net_rail0"' in got
    got = exposition("--from", str(bundle), "--expect-mtu", "9000")
    assert 'subject="net_rail1"' in got and 'code="MtuMismatch",severity="warning",subject="net_rail0"' not in got


def test_the_collectors_page_judges_a_bundle_with_its_recorded_mtu_under_its_own_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.expectations import expectations_from_env
    from collector.analysis import analyse_file

    for var in ("RAILSCOPE_EXPECT_MTU", "RAILSCOPE_EXPECT_DRIVER"):
        monkeypatch.delenv(var, raising=False)
    bundle = _capture_with("mtu-mismatch", tmp_path, "--expect-mtu", "1500")
    doc = analyse_file(str(bundle), "x", expectations_from_env())
    assert ("MtuMismatch", "net_rail0") in {(f["code"], f["subject"]) for f in doc["doctor"]["findings"]}
    assert doc["doctor"]["expectations"]["expect_mtu"] == {"value": 1500, "from": "bundle"}
    monkeypatch.setenv("RAILSCOPE_EXPECT_MTU", "9000")  # the collector's command line wins, and says so
    doc = analyse_file(str(bundle), "x", expectations_from_env())
    assert ("MtuMismatch", "net_rail1") in {(f["code"], f["subject"]) for f in doc["doctor"]["findings"]}
    assert "expect_mtu=9000 (RAILSCOPE_EXPECT_MTU; the bundle had 1500)" in doc["html"]


@pytest.mark.parametrize("var, value, flag", [
    ("RAILSCOPE_EXPECT_DRIVER", "inbox", "--expect-driver"), ("RAILSCOPE_EXPECT_DRIVER", "DOCA", "--expect-driver"),
    ("RAILSCOPE_EXPECT_MTU", "jumbo", "--expect-mtu"), ("RAILSCOPE_EXPECT_MTU", "70000", "--expect-mtu"),
    ("RAILSCOPE_EXPECT_ESWITCH_MODE", "switchdevv", "--expect-eswitch-mode"),
    ("RAILSCOPE_EXPECT_RDMA_NETNS", "private", "--expect-rdma-netns"),
])
def test_a_bad_variable_is_refused_as_its_flag_would_be(var: str, value: str, flag: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # never a silent "judge nothing", and never recorded into a bundle as if it were an expectation
    monkeypatch.setenv(var, value)
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "--from", str(IMAGES / "driver-not-doca")])
    err = capsys.readouterr().err
    assert exc.value.code == 3 and flag in err and value in err


def _a_value(action: Any) -> list[str]:
    """Command-line words that give the judging flag ``action`` a valid value other than its default."""
    opt = action.option_strings[0]
    if action.nargs == 0:
        return [opt]
    if action.choices:
        return [opt, next(str(c) for c in action.choices if c != action.default)]
    kind = getattr(action.type, "__name__", "") if action.type is not None else "str"
    by_kind = {"bool_word": "false" if action.default is not False else "true", "_prio": "5", "int": "3",
               "duration": "7m", "_ber": "3e-3", "_mtu": "4200", "_template": "gpu%rail_id%",
               "str": "/etc/railscope/extra-kernels.json",
               "rail_map_arg": "0=0000:0c:00.0,1=0000:8d:00.0",
               "_cabling_file": str(Path(__file__).resolve().parents[1] / "fixtures/cabling/RECONSTRUCTED-gpu-node-017.csv")}
    if kind not in by_kind:
        pytest.fail(f"{opt}: no test value for its type {kind!r}; add one to _a_value")
    return [opt, by_kind[kind]]


class _ThisNode:
    """A stand-in for ``LiveHost``: the image read as this node, live (no manifest: ``image`` is None)."""

    image = None

    def __init__(self, path: Path) -> None:
        from agent.host.recorded import RecordedHost

        self._inner = RecordedHost(str(path))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _ThisNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


def test_every_judging_flag_is_recorded_in_a_capture_and_replayed_by_doctor_preflight_and_diff(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole judging-flag table, a flag at a time: ``railscope capture --<flag> V`` records V in the
    manifest's ``expectations``, and ``doctor --from``, ``preflight --since`` and ``diff BUNDLE live`` judge
    with V (this node, live, too: it is judged as the capture it is compared with). A flag added to
    ``add_expectation_flags`` is picked up here; one missing from ``EXPECTATION_FLAGS`` fails."""
    import argparse
    from dataclasses import fields, replace

    import agent.host.live
    import agent.offline
    from agent.cli import build_parser
    from agent.config import EXPECTATION_FLAGS
    from agent.expectations import add_expectation_flags, expectations_from_args

    for var in [v for v in __import__("os").environ if v.startswith("RAILSCOPE_")]:
        monkeypatch.delenv(var)
    image = "spectrumx-2rail-healthy"
    seen: list[Expectations] = []
    real = agent.offline.diagnose_host

    def recording(*a: Any, **kw: Any) -> Any:
        got = real(*a, **kw)
        seen.append(got.expectations)
        return got

    monkeypatch.setattr(agent.offline, "diagnose_host", recording)
    monkeypatch.setattr(agent.host.live, "LiveHost", lambda root, **_: _ThisNode(IMAGES / image))

    def replays(bundle: Path) -> dict[str, list[Expectations]]:
        out = {}
        for name, argv in (("doctor --from", ["doctor", "--from", str(bundle), "--json"]),
                           ("preflight --since", ["preflight", "--since", str(bundle), "--json"]),
                           ("diff BUNDLE live", ["diff", str(bundle), "live", "--json"])):
            seen.clear()
            main(argv)
            capsys.readouterr()
            out[name] = list(seen)
        return out

    probe = argparse.ArgumentParser(add_help=False)
    add_expectation_flags(probe)
    flags = [a for a in probe._actions if a.option_strings]
    by_flag = {f: n for n, f in EXPECTATION_FLAGS.items()}
    assert [a.option_strings[0] for a in flags if a.option_strings[0] not in by_flag] == []  # recorded at all
    default = Expectations()
    cases: list[tuple[str, str, Expectations]] = []
    for action in flags:
        words = _a_value(action)
        args = build_parser(only="capture").parse_args(["capture", "-o", str(tmp_path / "x.tar.gz"), *words])
        cases.append((by_flag[words[0]], words[0], expectations_from_args(args)))
    # the judging values only the agent's own flags set (its capture job records them too)
    for name in sorted(set(EXPECTATION_FLAGS) - {n for n, _, _ in cases}):
        now = getattr(default, name)
        assert isinstance(now, int | float) and not isinstance(now, bool), name
        cases.append((name, EXPECTATION_FLAGS[name], replace(default, **{name: type(now)(now * 2) if isinstance(
            now, int) else now / 2})))
    assert {n for n, _, _ in cases} == set(EXPECTATION_FLAGS) <= {f.name for f in fields(Expectations)}

    for name, flag, exp in cases:
        want = getattr(exp, name)
        assert want != getattr(default, name), flag
        (tmp_path / name).mkdir()
        bundle = _capture_exp(image, tmp_path / name, exp)
        key = flag.lstrip("-").replace("-", "_")
        recorded = _manifest_of(bundle)["expectations"]
        if name == "cabling":  # the bundle records its own node's rows of the map alone
            want = tuple(r for r in want if r[0] == "gpu-node-017")
        # as JSON, the manifest's form (the cabling map's rows are lists of lists there)
        assert recorded[key] == json.loads(json.dumps(want)), flag
        if name == "kernel_table_file":
            # a file on the node, not in the bundle: recorded for people, never opened by a replay
            assert all(e.kernel_table_file is None for r in replays(bundle).values() for e in r)
            continue
        for how, judged in replays(bundle).items():
            assert judged and all(getattr(e, name) == want for e in judged), (flag, how, judged)


def test_a_pseudonymised_bundle_names_no_other_node_of_the_cabling_map(tmp_path: Path) -> None:
    """--redact pseudonymises this node's names; the map's other nodes it does not know: they are left out,
    not carried in the clear."""
    import io
    import tarfile

    from agent.capture.runner import CaptureParams, capture
    from agent.expectations import read_cabling
    from agent.host.recorded import RecordedHost

    exp = Expectations(cabling=read_cabling(str(CABLING)))
    buf = io.BytesIO()
    with RecordedHost(str(IMAGES / "spectrumx-2rail-healthy")) as host:
        capture(host, buf, CaptureParams(node="gpu-node-017", nice=0, recorder_gap_s=0, redact_key=b"k" * 32,
                                         expectations=expectations_to_json(exp)))
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tf:
        text = b"".join(tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()).decode("utf-8", "replace")
    assert "gpu-node-018" not in text and "gpu-node-017" not in text
