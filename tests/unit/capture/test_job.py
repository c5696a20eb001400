"""The capture job: one plan, one bundle id per (incident, node, plan) whoever asks, the request's
capture the same object as before (its id, name and hello), the CLI's parameters as the CLI gives them."""

from __future__ import annotations

import itertools

from agent.capture.job import Job, Shared, plan_ref
from agent.config import AgentSettings
from agent.host.firmware import FirmwareGate
from proto.keys import bundle_id
from proto.requests import CaptureRequest, check_params
from proto.requests import plan_ref as requests_plan_ref

SETTINGS = AgentSettings(node="gpu-node-017", cluster="prod-east", capture_deadline_s=42.0)


def _request(**params: bool) -> CaptureRequest:
    full = check_params("node-bundle", params)
    ref = requests_plan_ref("node-bundle", full)
    return CaptureRequest(id=bundle_id("inc-7", "gpu-node-017", ref), incident="inc-7", node="gpu-node-017",
                       plan="node-bundle", plan_version=1, params=full, created=1796117903,
                       expires=1796118503, alertname="RailscopeLinkFlapping")


def test_every_trigger_names_the_plan_as_a_request_does() -> None:
    for pod_netns, redact in itertools.product((False, True), repeat=2):
        params = {"pod_netns": pod_netns, "redact": redact}
        req = _request(**params)
        assert plan_ref(params) == req.plan_ref == requests_plan_ref("node-bundle", params)
        assert Job.for_request(req, SETTINGS).plan == req.plan_ref
        cli = Job("cli", "gpu-node-017", "railscope capture", incident="inc-7", pod_netns=pod_netns, redact=redact)
        sent = cli.for_upload("ignored", 1796117903.4)
        # the CLI's hello names the same plan; its start time makes each run a bundle of its own
        assert sent.hello().plan == req.plan_ref
        assert sent.bundle_id == bundle_id("inc-7", "gpu-node-017", f"{req.plan_ref}@1796117903400")
        # two runs within one second are two bundles
        assert cli.for_upload("ignored", 1796117903.9).bundle_id != sent.bundle_id


def test_a_requests_capture_keeps_its_id_name_and_hello() -> None:
    req = _request()
    job = Job.for_request(req, SETTINGS)
    gate = FirmwareGate()
    params = job.params(Shared(gate=gate, hung_tools=frozenset({("devlink", "pci/0000:0c:00.0")}),
                               hung_firmware=frozenset({("counters", "net_rail0")}), events=[]))
    assert params.bundle_id == req.id == bundle_id("inc-7", "gpu-node-017", "node-bundle/v1")
    assert params.name == "gpu-node-017-20261201T093823Z"  # the request's time: the same bundle when retried
    assert (params.node, params.cluster, params.incident, params.deadline_s) == \
        ("gpu-node-017", "prod-east", "inc-7", 42.0)
    assert params.firmware_gate is gate and params.events == []
    assert params.skip_firmware == frozenset({"pci/0000:0c:00.0", "net_rail0"})
    hello = job.hello(node="gpu-node-017", cluster="prod-east", reason="RailscopeLinkFlapping")
    assert hello.to_json() == {"bundle": req.id, "node": "gpu-node-017", "cluster": "prod-east",
                               "incident": "inc-7", "reason": "RailscopeLinkFlapping", "agent": hello.agent,
                               "created": 1796117903, "plan": "node-bundle/v1"}


def test_an_event_is_an_incident_of_its_own_in_the_collectors_alphabet() -> None:
    job = Job.for_event("LinkFlapping", "net_rail0 flapped", "GPU_Node_7", SETTINGS, 1796117903.5)
    assert job.incident == "linkflapping-20261201t093823z"
    assert job.bundle_id == bundle_id(job.incident, "gpu_node_7", "node-bundle/v1")
    assert job.reason == "event LinkFlapping: net_rail0 flapped" and job.name is None


def test_the_cli_capture_outside_the_daemon_takes_no_lock_and_a_random_id() -> None:
    job = Job("cli", None, "railscope capture", events=[{"code": "x"}])
    params = job.params()
    assert params.bundle_id is None and params.name is None and params.firmware_gate is None
    assert params.events == [{"code": "x"}] and params.hung_tools == frozenset()
