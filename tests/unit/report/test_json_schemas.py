"""The JSON Schemas of ``docs/schemas/`` (draft 2020-12) against real outputs: ``doctor --json`` and
``preflight --from --json`` of every node image, ``diff --json`` of every image pair; and strict enough that a
renamed or missing field fails. ``rollout --json`` of the stand-in scenarios:
``tests/integration/test_rollout_schema.py``."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agent.cli import main
from agent.config import EXPECTATION_FLAGS
from tests.support import script
from tests.support.schemas import SCHEMAS, errors, schema_of

IMAGES = Path(__file__).resolve().parents[2] / "images"
NAMES = sorted(p.name for p in IMAGES.iterdir() if (p / "expected.json").exists())
make_pairs = script("tests/images/make_pairs.py")
DOCUMENTS = ("railscope.doctor/v1", "railscope.diff/v1", "railscope.preflight/v1", "railscope.rollout/v1")


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith(("RAILSCOPE_", "KUBERNETES_"))]:
        monkeypatch.delenv(var)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


def _args(name: str) -> list[str]:
    return json.loads((IMAGES / name / "expected.json").read_text())["args"]


def test_every_document_has_its_schema_named_by_its_id_and_each_is_a_valid_2020_12_schema() -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted(d.replace("/", ".") + ".json" for d in DOCUMENTS)
    for doc_id in DOCUMENTS:
        schema = schema_of(doc_id)
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["properties"]["schema"] == {"const": doc_id} and schema["title"] == doc_id


def test_the_expectations_a_document_may_carry_are_every_judging_flag() -> None:
    """A judging flag added to agent.config.EXPECTATION_FLAGS is a key of ``expectations``: the schema too."""
    words = {f.lstrip("-").replace("-", "_") for f in EXPECTATION_FLAGS.values()}
    for doc_id in ("railscope.doctor/v1", "railscope.diff/v1"):
        assert set(schema_of(doc_id)["$defs"]["expectations"]["properties"]) == words, doc_id


@pytest.mark.parametrize("name", NAMES)
def test_doctor_and_preflight_of_every_image_follow_their_schemas(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, ["doctor", "--from", str(IMAGES / name), "--json", *_args(name)])
    assert doc["schema"] == "railscope.doctor/v1" and errors(doc) == []
    doc = _json(capsys, ["preflight", "--from", str(IMAGES / name), "--json", *_args(name)])
    assert doc["schema"] == "railscope.preflight/v1" and errors(doc) == []


def test_a_doctor_document_that_records_its_judgement_follows_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    # the bundle's recorded rail map judged it: "expectations" is there, with every flag's entry
    doc = _json(capsys, ["doctor", "--from", str(IMAGES / "rail-map-pci-healthy"), "--json"])
    assert doc["expectations"]["rail_map"]["from"] == "bundle" and errors(doc) == []
    # a flag over the bundle's value: "bundle" says what it had
    doc = _json(capsys, ["doctor", "--from", str(IMAGES / "rail-map-pci-healthy"), "--json", "--rails", "2"])
    assert errors(doc) == []


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pairs")
    make_pairs.build(out)
    return out


@pytest.mark.parametrize("after", [n for n in NAMES if n != "spectrumx-2rail-healthy"])
def test_diff_of_the_base_image_and_every_other_follows_its_schema(after: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, ["diff", str(IMAGES / "spectrumx-2rail-healthy"), str(IMAGES / after), "--json"])
    assert doc["schema"] == "railscope.diff/v1" and errors(doc) == []


# Building the pairs takes seconds to tens of seconds (make_pairs writes 38 images): the slow tier, as
# tests/unit/analysis/test_diff.py.
@pytest.mark.slow
def test_diff_of_every_image_pair_follows_its_schema(pairs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen = set()
    for pair in make_pairs.PAIRS:
        doc = _json(capsys, ["diff", str(pairs / pair.name / "before"), str(pairs / pair.name / "after"), "--json"])
        assert errors(doc) == [], pair.name
        seen.update(k for k in ("regressions", "changes", "counters") if doc[k])
    assert seen == {"regressions", "changes", "counters"}  # every part was exercised
    # a bundle whose recorded expectations judged it, against one that records none
    doc = _json(capsys, ["diff", str(IMAGES / "rail-map-function-missing"), str(IMAGES / "rail-map-pci-healthy"),
                         "--json"])
    assert "expectations" in doc["after"] and errors(doc) == []


def _doctor_doc(capsys: pytest.CaptureFixture[str]) -> dict:
    return _json(capsys, ["doctor", "--from", str(IMAGES / "rail-link-down"), "--json", *_args("rail-link-down")])


@pytest.mark.parametrize("where, change", [
    ("rails[0]", lambda d: d["rails"][0].update(netdev_name=d["rails"][0].pop("netdev"))),  # renamed
    ("rails[0]", lambda d: d["rails"][0].pop("pci")),  # missing
    ("findings[0]", lambda d: d["findings"][0].update(sev=d["findings"][0].pop("severity"))),
    ("findings[0].severity", lambda d: d["findings"][0].update(severity="error")),
    ("$", lambda d: d.pop("unavailable")),
    ("$", lambda d: d.update(extra=1)),
    ("schema", lambda d: d.update(schema="railscope.doctor/v2")),
    ("rails[0].oper", lambda d: d["rails"][0].update(oper="UP")),
])
def test_a_renamed_missing_or_unknown_doctor_field_fails_the_schema(where: str, change, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doctor_doc(capsys)
    assert errors(doc) == []
    bad = copy.deepcopy(doc)
    change(bad)
    got = errors(bad, "railscope.doctor/v1")
    assert got and any(e.startswith("$." + where if where != "$" else "$") for e in got), got


def test_a_renamed_diff_or_preflight_field_fails_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, ["diff", str(IMAGES / "spectrumx-2rail-healthy"), str(IMAGES / "rail-link-down"), "--json"])
    assert doc["regressions"] and doc["counters"] and errors(doc) == []
    bad = copy.deepcopy(doc)
    bad["counters"][0]["per_second"] = bad["counters"][0].pop("rate")
    assert errors(bad)
    bad = copy.deepcopy(doc)
    bad["regressions"][0].pop("key")
    assert errors(bad)
    bad = copy.deepcopy(doc)
    del bad["before"]["captured_at"]
    assert errors(bad)
    doc = _json(capsys, ["preflight", "--from", str(IMAGES / "rail-link-down"), "--json"])
    bad = copy.deepcopy(doc)
    bad["checks"][0]["name"] = bad["checks"][0].pop("check")
    assert errors(bad)
    bad = copy.deepcopy(doc)
    bad["checks"][0]["status"] = "FAIL"  # the text output's word, never the document's
    assert errors(bad)
