"""Every object of every fixture cluster is valid against its operator's published CRD (``openAPIV3Schema``)."""

from __future__ import annotations

import jsonschema
import pytest

from tests.support import kube_cluster


def _validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    out = {}
    for crd in kube_cluster.crds():
        spec = crd["spec"]
        for ver in spec["versions"]:
            schema = ver["schema"]["openAPIV3Schema"]
            out[(f"{spec['group']}/{ver['name']}", spec["names"]["kind"])] = jsonschema.Draft7Validator(schema)
    return out


VALIDATORS = _validators()


def test_every_crd_of_the_five_operators_is_here() -> None:
    kinds = {k for _v, k in VALIDATORS}
    assert {"NicClusterPolicy", "NicNodePolicy", "NicDevice", "NicConfigurationTemplate", "NicInterfaceNameTemplate",
            "NicFirmwareTemplate", "NicFirmwareSource", "SriovNetworkNodeState", "SriovNetworkNodePolicy",
            "SriovOperatorConfig", "SpectrumXRailPoolConfig", "CIDRPool", "IPPool", "NodeMaintenance"} <= kinds


@pytest.mark.parametrize("name", sorted(kube_cluster.SCENARIOS))
def test_fixture_objects_follow_their_crd(name: str) -> None:
    checked = 0
    for obj in kube_cluster.scenario(name, nodes=4):
        v = VALIDATORS.get((obj["apiVersion"], obj["kind"]))
        if v is None:
            assert obj["apiVersion"] in ("v1", "apps/v1", "apiextensions.k8s.io/v1"), obj["kind"]
            continue
        errors = sorted(v.iter_errors(obj), key=lambda e: list(e.path))
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: " + "; ".join(
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])
        checked += 1
    assert checked > 20


def test_a_wrong_object_is_caught() -> None:
    """The validation bites: a state the CRD's enum lacks, a missing required field."""
    v = VALIDATORS[("spectrumx.nvidia.com/v1alpha2", "SpectrumXRailPoolConfig")]
    bad = {"apiVersion": "spectrumx.nvidia.com/v1alpha2", "kind": "SpectrumXRailPoolConfig", "metadata": {"name": "x"},
           "spec": {"railTopology": []}, "status": {"nodeStates": [{"name": "n", "state": "Done"}]}}
    messages = [e.message for e in v.iter_errors(bad)]
    assert any("numVfs" in m for m in messages) and any("Done" in m for m in messages)
