"""``railscope diff`` on pairs of node images (``tests/images/make_pairs.py``): each change alone gives
exactly its regression or change; identities survive renamed netdevs; counter resets are resets."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.cli import main
from tests.support import script

ROOT = Path(__file__).resolve().parents[3]
make_pairs = script("tests/images/make_pairs.py")

PAIRS = {p.name: p for p in make_pairs.PAIRS}


# Building the pairs takes tens of seconds: every test of them is in the slow tier.
@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pairs")
    make_pairs.build(out)
    return out


def run_diff(pairs: Path, name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, int]:
    pair = PAIRS[name]
    code = main(["diff", str(pairs / name / "before"), str(pairs / name / "after"), "--json",
                 *pair.args, *extra])
    return json.loads(capsys.readouterr().out), code


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.slow
def test_each_pair_names_exactly_its_change(pairs: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    pair = PAIRS[name]
    doc, code = run_diff(pairs, name, capsys)
    assert doc["schema"] == "railscope.diff/v1"
    assert sorted((r["code"], r["subject"]) for r in doc["regressions"]) == sorted(pair.regressions)
    assert sorted((c["code"], c["subject"]) for c in doc["changes"]) == sorted(pair.changes)
    assert code == (1 if pair.regressions else 0)
    assert doc["seconds"] == make_pairs.AFTER_S


@pytest.mark.slow
def test_a_new_finding_the_regression_explains_is_folded_into_it(pairs: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = run_diff(pairs, "rail-down", capsys)
    by_code = {r["code"]: r for r in doc["regressions"]}
    assert by_code["RailDown"]["findings"] == ["RailLinkDown net_rail0"]
    assert by_code["RdmaPortDown"]["findings"] == ["RdmaLinkDown rdma_rail0"]
    assert by_code["RailDown"]["key"] == {"rail": 0, "plane": None, "pci": "0000:0c:00.0"}
    assert doc["after"]["findings"]["critical"] == 2


@pytest.mark.slow
def test_a_new_finding_with_no_structural_cause_is_its_own_regression(pairs: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = run_diff(pairs, "finding-new", capsys)
    (reg,) = doc["regressions"]
    assert reg["key"] == {"finding": "GlobalPauseEnabled"} and reg["severity"] == "warning"


@pytest.mark.slow
def test_a_version_bump_is_changes_only_and_exit_0_unless_asked(pairs: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = run_diff(pairs, "upgrade", capsys)
    assert code == 0 and doc["regressions"] == []
    fw = [c for c in doc["changes"] if c["code"] == "FirmwareChanged"]
    assert {(c["before"], c["after"]) for c in fw} == {("28.42.1000", "28.43.1014")}
    kernel = next(c for c in doc["changes"] if c["code"] == "KernelChanged")
    assert (kernel["before"], kernel["after"]) == ("6.8.0-60-generic", "6.8.0-65-generic")
    _, code = run_diff(pairs, "upgrade", capsys, "--fail-on", "change")
    assert code == 1
    _, code = run_diff(pairs, "rail-down", capsys, "--fail-on", "never")
    assert code == 0


@pytest.mark.slow
def test_renamed_netdevs_on_the_same_pci_function_are_the_same_rail(pairs: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = run_diff(pairs, "renamed-both", capsys)
    (mtu,) = doc["changes"]
    assert mtu["key"]["pci"] == "0000:8d:00.0" and (mtu["before"], mtu["after"]) == (9000, 4200)
    # its counters are still compared, under the rail's identity, not the netdev name
    rail1 = [c for c in doc["counters"] if c["rail"] == 1]
    assert rail1 and {c["subject"] for c in rail1} == {"net_rail1"}
    doc, _ = run_diff(pairs, "rail-renamed", capsys)
    (ren,) = doc["regressions"]
    assert (ren["before"], ren["after"]) == ("net_rail1", "enp141s0f0np0")
    assert ren["findings"] == ["RailNameMismatch net_rail1"]
    assert not any(c["code"] == "RailAdded" for c in doc["changes"])


@pytest.mark.slow
def test_counter_rates_over_the_time_between_captures(pairs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = run_diff(pairs, "counters-grow", capsys)
    c = {(x["subject"], x["counter"]): x for x in doc["counters"]}
    frames = c[("net_rail0", "tx_prio3_pause")]
    assert frames["delta"] == 6000 and frames["seconds"] == 600 and frames["rate"] == pytest.approx(10.0)
    share = c[("net_rail0", "tx_prio3_pause_duration")]
    assert share["unit"] == "us" and share["rate"] == pytest.approx(0.05)  # 30 s paused in 600 s
    assert c[("net_rail1", "tx_prio3_pause")]["delta"] == 0


@pytest.mark.slow
def test_a_counter_that_went_backwards_is_a_reset_never_a_negative_rate(pairs: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    doc, code = run_diff(pairs, "counters-reset", capsys)
    assert code == 0 and doc["regressions"] == []
    resets = {x["counter"] for x in doc["counters"] if x["reset"]}
    assert resets == {"tx_prio3_pause", "rx_prio3_pause", "tx_prio3_pause_duration", "rx_prio3_pause_duration"}
    for x in doc["counters"]:
        if x["reset"]:
            assert x["delta"] is None and x["rate"] is None
        assert x["rate"] is None or x["rate"] >= 0


@pytest.mark.slow
def test_text_output_regressions_then_changes_then_counters(pairs: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diff", str(pairs / "upgrade-broke-a-rail" / "before"), str(pairs / "upgrade-broke-a-rail" / "after")])
    out = capsys.readouterr().out
    assert code == 1
    reg, chg, cnt = out.index("REGRESSIONS (2)"), out.index("CHANGES ("), out.index("COUNTERS (")
    assert reg < chg < cnt
    assert "FirmwareChanged  net_rail0, net_rail1  28.42.1000 -> 28.43.1014 on 2 rails" in out
    lines = out[reg:chg].strip().splitlines()[1:]
    assert [ln.split()[0] for ln in lines] == ["RailDown", "RdmaPortDown"]
    assert "tx_prio3_pause           +6000  10/s" in out[cnt:]
    code = main(["diff", str(pairs / "counters-reset" / "before"), str(pairs / "counters-reset" / "after")])
    out = capsys.readouterr().out
    assert "tx_prio3_pause           reset (4432 -> 7" in out


@pytest.mark.slow
def test_a_bundle_tar_gz_side_and_bad_usage(pairs: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "after.tar.gz"
    with tarfile.open(bundle, "w:gz") as tf:
        tf.add(pairs / "pfc-lost" / "after", arcname="gpu-node-017-after")
    cmd = [sys.executable, "-m", "agent.cli", "diff", str(pairs / "pfc-lost" / "before"), str(bundle), "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 1, res.stderr
    assert [r["code"] for r in json.loads(res.stdout)["regressions"]] == ["PfcLost"]

    for argv, why in (([str(tmp_path / "nope"), str(bundle)], "no such file"),
                      ([str(pairs / "identical" / "before")], "required"),
                      (["live", "live"], "both be live")):
        res = subprocess.run([sys.executable, "-m", "agent.cli", "diff", *argv], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert res.returncode == 3, (argv, res.stderr)
        assert why in res.stderr and "Traceback" not in res.stderr
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "diff", str(tmp_path / "junk.tar.gz"), str(bundle)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 3 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.slow
def test_an_image_without_a_capture_time_gives_deltas_but_no_rates(pairs: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    untimed = tmp_path / "after"
    shutil.copytree(pairs / "counters-grow" / "after", untimed, symlinks=True)
    (untimed / "manifest.json").unlink()
    code = main(["diff", str(pairs / "counters-grow" / "before"), str(untimed), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["seconds"] is None and doc["after"]["captured_at"] is None
    moved = [c for c in doc["counters"] if c["delta"]]
    assert moved and all(c["rate"] is None and c["seconds"] is None for c in moved)
    main(["diff", str(pairs / "counters-grow" / "before"), str(untimed)])
    assert f"no capture time in {untimed} (no rates)" in capsys.readouterr().out


@pytest.mark.slow
def test_the_diff_document_keeps_its_shape(pairs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``railscope.diff/v1`` is a contract: these keys, no more, no fewer."""
    doc, _ = run_diff(pairs, "upgrade-broke-a-rail", capsys)
    assert set(doc) == {"schema", "before", "after", "seconds", "regressions", "changes", "counters"}
    for side in (doc["before"], doc["after"]):
        # "expectations" only where a bundle's recorded expectations changed the judgement
        assert {"source", "node", "kernel", "captured_at", "rails", "findings"} <= set(side) <= {
            "source", "node", "kernel", "captured_at", "rails", "findings", "expectations"}
        assert set(side["findings"]) == {"critical", "warning", "info"}
    for item in doc["regressions"] + doc["changes"]:
        assert {"code", "subject", "key", "before", "after", "message"} <= set(item)
        assert set(item) <= {"code", "subject", "key", "before", "after", "message", "severity", "findings"}
    assert doc["counters"] and all(set(c) == {"subject", "rail", "plane", "counter", "unit", "before", "after",
                                              "delta", "seconds", "rate", "reset"} for c in doc["counters"])
    from agent.analysis.diff import CHANGE_CODES, REGRESSION_CODES

    assert {i["code"] for i in doc["regressions"]} <= set(REGRESSION_CODES)
    assert {i["code"] for i in doc["changes"]} <= set(CHANGE_CODES)


def test_capture_times_are_utc_text_without_a_clock_module() -> None:
    """The analysis formats times by arithmetic (it may not import datetime); the text is datetime's."""
    import random
    from datetime import UTC, datetime

    from agent.analysis.diff import utc_text

    rng = random.Random(7)
    for t in [0, 951782400, 951868799.5, 1793197233.999, 4102444800, *(rng.uniform(0, 5e9) for _ in range(2000))]:
        assert utc_text(t) == datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), t
