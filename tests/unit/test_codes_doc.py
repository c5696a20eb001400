"""Every finding code says what to do next, from one table (``NEXT_STEPS`` in agent/findings.py):
docs/codes.md is generated from it, doctor and the reports print it, and the alert rules link to the
code's section instead of keeping a second copy. New codes are picked up from ``CODES``."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.findings import CODE_RULES, CODE_SUBJECTS, CODES, NEXT_STEPS, Diagnosis, Finding
from agent.report import html as report_html
from agent.report import text as report_text
from tests.support import script

ROOT = Path(__file__).resolve().parents[2]
gen_codes_doc = script("scripts/gen_codes_doc.py")

RULES = ROOT / "deploy" / "prometheus" / "railscope-rules.yaml"


def _alerts() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_has_a_next_step_a_rule_and_a_subject(code: str) -> None:
    for table in (NEXT_STEPS, CODE_RULES, CODE_SUBJECTS):
        assert table.get(code, "").strip(), f"{code}: no entry"


def test_docs_codes_md_is_generated_from_the_tables() -> None:
    assert (ROOT / "docs" / "codes.md").read_text(encoding="utf-8") == gen_codes_doc.render(), \
        "docs/codes.md is out of date: python3 scripts/gen_codes_doc.py"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_codes_doc.py"), "--check"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_every_code_has_its_section_and_anchor() -> None:
    text = gen_codes_doc.render()
    for code in CODES:
        section = text[text.index(f"\n## {code}\n"):]
        section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
        assert NEXT_STEPS[code] in section and CODE_RULES[code] in section and CODE_SUBJECTS[code] in section
        assert f"](#{gen_codes_doc.anchor(code)})" in text


def test_the_alerts_link_to_the_code_reference_and_keep_no_copy() -> None:
    alerts = _alerts()
    covered = [c for c in CODES if f"Railscope{c}" in alerts]
    assert covered, "no alert is named after a finding code"
    for code in covered:
        assert alerts[f"Railscope{code}"]["annotations"]["runbook"] == f"docs/codes.md#{gen_codes_doc.anchor(code)}"
    assert alerts["RailscopeFinding"]["annotations"]["runbook"] == "docs/codes.md#{{ $labels.code | toLower }}"
    # no runbook of any alert repeats a next step (a sentence of one of them)
    sentences = {s.strip() for step in NEXT_STEPS.values() for s in re.split(r"[.:;]\s", step) if len(s) > 40}
    for name, rule in alerts.items():
        runbook = rule["annotations"].get("runbook", "")
        assert not [s for s in sentences if s in runbook], f"{name} keeps a copy of a next step"


def test_doctor_and_the_html_report_show_the_next_step() -> None:
    f = Finding("LinkFlapping", "warning", "net_rail0", "3 carrier losses")
    diag = Diagnosis("n1", "6.8.0", (), (f,))
    out = io.StringIO()
    report_text.render(diag, out, colour=False)
    flat = " ".join(out.getvalue().split())
    assert "next: " + " ".join(NEXT_STEPS["LinkFlapping"].split()) in flat
    page = report_html._findings(diag)
    assert "Next:" in page and report_html.esc(NEXT_STEPS["LinkFlapping"]) in page
    # a code this version does not know (a newer agent's bundle) prints no next step, and no error
    out = io.StringIO()
    report_text.render(Diagnosis("n1", None, (), (Finding("FutureCode", "info", "node", "m"),)), out, colour=False)
    assert "next:" not in out.getvalue()
