"""Property: no mutation of the example image's JSON files makes the doctor raise.

Each example replaces one value (or one line, or the tail of the bytes) of one JSON file of the
image -- the manifest, the link dump, events, the flight recorder, a command's JSON output -- with
a value of any JSON type, NaN / Infinity and huge integers included, and runs what ``railscope
doctor --from`` runs: snapshot, topology, history, diagnosis, the text rendering and the strict
JSON document.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import Expectations
from agent.host.image import open_tree
from agent.host.recorded import RecordedHost
from agent.offline import diagnose_host
from agent.readers.kernel_table import load_kernel_table
from agent.report.jsondoc import strict_json
from agent.report.text import render
from tests.support.hostile_images import BASE

TREE = open_tree(str(BASE))
TREE.files["recorder.jsonl"] = b"".join(
    json.dumps({"ts": 1772359000 + i, "netdev": f"net_rail{i % 2}",
                "counters": {"tx_prio3_pause_duration": 1000 * i, "rx_prio3_discards": i}}).encode() + b"\n"
    for i in range(6))
TREE.dirs[""].add("recorder.jsonl")


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


JSON_FILES = sorted(k for k, v in TREE.files.items()
                    if k.endswith((".json", ".jsonl")) or (k.startswith("cmd/") and k.endswith(".stdout") and _is_json(v)))
EXP = Expectations(eswitch_mode="switchdev", esw_multiport=False, rdma_netns="exclusive")
TABLE = load_kernel_table(None)

_leaf = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
         | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
         | st.sampled_from(["", "9" * 5000, "\x1b[2J", "UP", "net_rail0", "pci/0000:0c:00.0", "NaN"]))
VALUES = st.recursive(_leaf, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                                                       max_size=3), max_leaves=8)


def _slots(doc: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) of a document: the places a value can be replaced."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((doc, k))
            _slots(v, out)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append((doc, i))
            _slots(v, out)
    return out


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    rel = draw(st.sampled_from(JSON_FILES))
    data = TREE.files[rel]
    how = draw(st.sampled_from(["value", "value", "value", "delete", "cut", "whole"]))
    if how == "cut":
        return rel, data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "whole":
        return rel, json.dumps(draw(VALUES)).encode()
    lines = data.split(b"\n") if rel.endswith(".jsonl") else [data]
    n = draw(st.integers(0, len(lines) - 1))
    if not lines[n].strip():
        return rel, data
    doc = json.loads(lines[n])
    wrapper = [copy.deepcopy(doc)]
    slots = _slots(wrapper[0], [(wrapper, 0)])
    container, key = slots[draw(st.integers(0, len(slots) - 1))]
    if how == "delete" and container is not wrapper:
        del container[key]
    else:
        container[key] = draw(VALUES)
    lines[n] = json.dumps(wrapper[0]).encode()
    return rel, b"\n".join(lines)


def _doctor(host: RecordedHost) -> None:
    diag = diagnose_host(host, EXP, TABLE).diagnosis
    out = io.StringIO()
    render(diag, out, colour=False)
    json.dumps(strict_json(diag.as_json()), allow_nan=False)


def test_the_unmutated_image_diagnoses() -> None:
    _doctor(RecordedHost(TREE))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
@pytest.mark.slow
def test_mutated_json_never_raises(change: tuple[str, bytes]) -> None:
    rel, data = change
    tree = copy.copy(TREE)
    tree.files = {**TREE.files, rel: data}
    _doctor(RecordedHost(tree))
