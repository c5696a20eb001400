"""The published JSON Schemas of railscope's documents (``docs/schemas/``), loaded as validators."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["SCHEMAS", "errors", "schema_of", "validator"]

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"


def schema_of(doc_id: str) -> dict[str, Any]:
    """``railscope.doctor/v1`` -> the schema in ``docs/schemas/railscope.doctor.v1.json``."""
    return json.loads((SCHEMAS / (doc_id.replace("/", ".") + ".json")).read_text())


def validator(doc_id: str) -> Draft202012Validator:
    return Draft202012Validator(schema_of(doc_id))


def errors(doc: Any, doc_id: str | None = None) -> list[str]:
    """Every way ``doc`` departs from its schema (the one its ``schema`` field names), one line each."""
    name = doc_id or doc["schema"]
    return [f"{e.json_path}: {e.message[:300]}" for e in validator(name).iter_errors(doc)]
