"""The capture request contract (``proto/requests.py``) against its golden vectors and its rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proto.keys import bundle_id
from proto.requests import (
    PLANS,
    CaptureRequest,
    PlanSpec,
    RequestError,
    check_params,
    object_key,
    plan_ref,
    request_for,
)

VECTORS_FILE = Path(__file__).resolve().parents[3] / "proto" / "vectors" / "requests.json"
VECTORS = json.loads(VECTORS_FILE.read_text())["vectors"]
OK = [v for v in VECTORS if "request" in v]
BAD = [v for v in VECTORS if "error" in v]


def test_the_vector_file_covers_both_kinds() -> None:
    assert len(OK) >= 5 and len(BAD) >= 10
    assert {v["error"] for v in BAD} >= {"schema", "plan", "params", "id", "key_part", "state", "time",
                                         "not_json", "too_large"}


@pytest.mark.parametrize("vec", OK, ids=[v["name"] for v in OK])
def test_ok_vector_reads_and_rewrites_byte_for_byte(vec: dict) -> None:
    req = CaptureRequest.loads(vec["json"].encode())
    assert req.to_json() == vec["request"]
    assert req.dumps() == vec.get("canonical_json", vec["json"]).encode()
    assert req.plan_ref == vec["plan_ref"] and req.object_key() == vec["key"]
    # a later take's id is the bundle id of the plan ref with "#take<n>" (id_ref names it)
    assert req.id == bundle_id(req.incident, req.node, vec.get("id_ref", vec["plan_ref"]))
    # the canonical form reads back to itself
    assert CaptureRequest.loads(req.dumps()).dumps() == req.dumps()


@pytest.mark.parametrize("vec", BAD, ids=[v["name"] for v in BAD])
def test_bad_vector_is_refused_with_its_code(vec: dict) -> None:
    with pytest.raises(RequestError) as info:
        CaptureRequest.loads(vec["json"].encode())
    assert info.value.code == vec["error"]


def test_a_new_request_is_its_own_vector_shape() -> None:
    req = request_for("inc-9", "gpu-node-017", now=1796117903, ttl_s=1800, params={"redact": True},
                      alertname="RailscopePfcStorm", severity="critical")
    assert req.id == bundle_id("inc-9", "gpu-node-017", "node-bundle/v1;redact=true")
    assert req.params == {"pod_netns": False, "redact": True} and req.expires == 1796117903 + 1800
    assert CaptureRequest.loads(req.dumps()) == req


def test_plan_ref_writes_each_parameter_as_json() -> None:
    """Not only bools: a string is quoted and an integer bare, so two plans never collide."""
    plans = {"p": PlanSpec("p", 3, {"depth": (int, 1), "label": (str, ""), "on": (bool, False)})}
    full = check_params("p", {"depth": 2, "label": "a;b", "on": True}, plans)
    assert plan_ref("p", full, plans) == 'p/v3;depth=2;label="a;b";on=true'
    assert plan_ref("p", check_params("p", {"label": "2"}, plans), plans) == 'p/v3;label="2"'
    assert plan_ref("p", check_params("p", {}, plans), plans) == "p/v3"
    with pytest.raises(RequestError):
        check_params("p", {"depth": True}, plans)  # True is an int to Python, not to the contract


def test_check_params_refuses_what_no_plan_takes() -> None:
    assert check_params("node-bundle", None) == {"pod_netns": False, "redact": False}
    for plan, params in (("shell", {}), (None, {}), ("node-bundle", {"argv": ["id"]}),
                         ("node-bundle", {"pod_netns": 1}), ("node-bundle", ["pod_netns"])):
        with pytest.raises(RequestError):
            check_params(plan, params)
    assert set(PLANS) == {"node-bundle"}


def test_object_key_checks_its_parts() -> None:
    assert object_key("n1", "b1") == "_requests/n1/b1.json"
    for node, rid in (("../n", "b1"), ("n1", "x/y"), ("N1", "b1")):
        with pytest.raises(ValueError):
            object_key(node, rid)


def test_the_spec_names_every_plan_with_its_version_and_parameters() -> None:
    """A plan added or changed in code without SPEC.md's table is a wire change nobody wrote down."""
    spec = (Path(__file__).resolve().parents[3] / "proto" / "SPEC.md").read_text()
    section = spec[spec.index("## Capture requests"):spec.index("## Security considerations")]
    for spec_plan in PLANS.values():
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{spec_plan.name}` |")]
        assert f"| {spec_plan.version} |" in row
        for name, (kind, default) in spec_plan.params.items():
            assert f"`{name}` ({kind.__name__}, `{json.dumps(default)}`)" in row, name
    assert "`railscope.request/v1`" in section and "GET /v1/requests?node=" in section
