"""``railscope preflight``: one line per check and a verdict, exit 0 / 1 / 3, from node images; the
resources check against a stand-in API server (one GET of the Node object); --since fails on a
regression; the help says what it cannot see."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main

IMAGES = Path(__file__).resolve().parents[2] / "images"
TOKEN = "preflight-token"


def preflight(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["preflight", *argv])
    return code, capsys.readouterr().out


def lines(out: str) -> dict[str, str]:
    return {ln.split()[1]: ln.split()[0] for ln in out.splitlines()[:-1]}


def test_a_ready_gpu_node_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = preflight(capsys, "--from", str(IMAGES / "gpudirect-hgx-pix-healthy"))
    assert code == 0, out
    assert lines(out) == {"rails": "ok", "rdma": "ok", "gpudirect": "ok", "firmware": "skip", "mtu": "ok",
                          "driver": "skip", "findings": "ok", "resources": "skip", "rollout": "skip", "since": "skip"}
    assert out.splitlines()[-1].startswith("PREFLIGHT PASS: gpu-node-017 is ready")


@pytest.mark.parametrize(("image", "args", "failed"), [
    ("gpudirect-not-ready-peermem-lost", (), "gpudirect"),
    ("firmware-pending-activation", (), "firmware"),
    ("mtu-mismatch", (), "mtu"),
    ("driver-not-doca", ("--expect-driver", "doca"), "driver"),
    ("rail-naming-conflict-function", (), "rails"),
    ("rail-link-down", (), "rails, rdma"),
    ("pfc-disabled", (), "findings"),
])
def test_each_readiness_fault_fails_its_check(capsys: pytest.CaptureFixture[str], image: str, args: tuple[str, ...],
                                               failed: str) -> None:
    code, out = preflight(capsys, "--from", str(IMAGES / image), *args)
    assert code == 1, out
    assert out.splitlines()[-1].endswith(f"failed: {failed}")


def test_a_roce_node_whose_rdma_devices_are_gone_fails_the_rdma_check(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 28 item 9: the healthy image without /sys/class/infiniband and the RDMA links said
    # "ok rdma 0 RDMA port(s) ACTIVE", "PREFLIGHT PASS", exit 0
    for image in ("rdma-gone-rules-name-rdma", "rdma-gone-mlx5-roce-enabled"):
        code, out = preflight(capsys, "--from", str(IMAGES / image))
        assert code == 1, out
        assert lines(out)["rdma"] == "FAIL" and lines(out)["findings"] == "ok"
        assert "FAIL  rdma       RailRdmaMissing net_rail0; RailRdmaMissing net_rail1" in out
        assert out.splitlines()[-1].startswith("PREFLIGHT FAIL") and out.splitlines()[-1].endswith("failed: rdma")


def test_an_ethernet_only_node_passes_unless_rdma_is_expected(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = preflight(capsys, "--from", str(IMAGES / "rdma-absent-roce-disabled"))
    assert code == 0 and lines(out)["rdma"] == "ok", out
    code, out = preflight(capsys, "--from", str(IMAGES / "rdma-absent-roce-disabled"), "--expect-rdma", "--json")
    doc = json.loads(out)
    assert code == 1 and {c["check"]: c["status"] for c in doc["checks"]}["rdma"] == "fail"


def test_a_stored_firmware_the_nic_cannot_read_fails_the_firmware_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = preflight(capsys, "--from", str(IMAGES / "firmware-stored-unreadable"))
    assert code == 1 and lines(out)["firmware"] == "FAIL" and lines(out)["findings"] == "ok", out
    assert "FirmwareStoredUnreadable pci/0000:0c:00.0" in out and "FirmwarePendingActivation" not in out


def test_since_fails_on_a_regression_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = preflight(capsys, "--from", str(IMAGES / "mtu-mismatch"), "--since",
                          str(IMAGES / "spectrumx-2rail-healthy"), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ready"] is False and doc["schema"] == "railscope.preflight/v1"
    assert {c["check"]: c["detail"] for c in doc["checks"]}["since"] == "MtuMismatched net_rail1"
    code, out = preflight(capsys, "--from", str(IMAGES / "spectrumx-2rail-healthy"), "--since",
                          str(IMAGES / "spectrumx-2rail-healthy"))
    assert code == 0 and lines(out)["since"] == "ok"


def test_bad_usage_exits_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["preflight", "--from", str(tmp_path / "nope")]) == 3
    assert main(["preflight", "--from", str(IMAGES / "spectrumx-2rail-healthy"), "--since", str(tmp_path)]) == 3


def test_help_says_what_it_cannot_check(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["preflight", "--help"])
    out = capsys.readouterr().out
    assert "east-west" in out and "nccl-tests" in out and "GPUDirect" in out and "--since" in out


# -- resources: a stand-in API server that answers GET /api/v1/nodes/<name> --------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    state: dict[str, Any] = {"alloc": {"nvidia.com/rail0": "1", "nvidia.com/rail1": "1", "nvidia.com/gpu": "8"},
                             "requests": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state["requests"].append(self.path)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_response(401)
                self.end_headers()
                return
            if self.path != "/api/v1/nodes/gpu-node-017":
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps({"kind": "Node", "metadata": {"name": "gpu-node-017"},
                               "status": {"allocatable": state["alloc"]}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", str(token), state
    finally:
        srv.shutdown()
        srv.server_close()


def test_resources_advertised_lost_and_unreachable(capsys: pytest.CaptureFixture[str], api, tmp_path: Path) -> None:
    url, token, state = api
    base = ("--from", str(IMAGES / "spectrumx-2rail-healthy"), "--api-server", url, "--api-token-file", token)
    code, out = preflight(capsys, *base)
    assert code == 0 and "ok    resources  nvidia.com/rail0=1, nvidia.com/rail1=1" in out
    state["alloc"]["nvidia.com/rail1"] = "0"
    code, out = preflight(capsys, *base)
    assert code == 1 and "FAIL  resources  0 allocatable: nvidia.com/rail1" in out
    # resources: one GET of its own Node, never a list (this server serves no discovery: rollout is skipped)
    assert [r for r in state["requests"] if r.startswith("/api/v1/nodes")] == ["/api/v1/nodes/gpu-node-017"] * 2
    assert "skip  rollout    the API server cannot be read: 404" in out
    (tmp_path / "bad").write_text("wrong")
    code, out = preflight(capsys, "--from", str(IMAGES / "spectrumx-2rail-healthy"), "--api-server", url,
                          "--api-token-file", str(tmp_path / "bad"))
    assert code == 1 and "FAIL  resources  GET node gpu-node-017: HTTP Error 401" in out


def test_a_failed_check_says_what_to_do_next(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.findings import NEXT_STEPS

    code, out = preflight(capsys, "--from", str(IMAGES / "gpudirect-not-ready-peermem-lost"))
    assert code == 1 and f"next: {NEXT_STEPS['GpuDirectNotReady']}" in out
    main(["doctor", "--from", str(IMAGES / "gpudirect-not-ready-peermem-lost")])
    doctor_out = " ".join(capsys.readouterr().out.split())  # doctor wraps the step under the finding
    assert f"next: {NEXT_STEPS['GpuDirectNotReady']}" in doctor_out


class _ThisNode:
    """A stand-in for ``LiveHost``: the node image ``image`` read as this node, live (no manifest to judge
    it by: ``image`` is None, as on a real node)."""

    image = None

    def __init__(self, image: Path) -> None:
        from agent.host.recorded import RecordedHost

        self._inner = RecordedHost(str(image))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _ThisNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


def _bundle_of(image: str, tmp_path: Path, *flags: str) -> Path:
    """A bundle of ``image`` captured by the real runner with the expectations ``capture``'s parser gives ``flags``."""
    import io

    from agent.capture.runner import CaptureParams, capture
    from agent.cli import build_parser
    from agent.config import expectations_to_json
    from agent.expectations import expectations_from_args
    from agent.host.recorded import RecordedHost

    args = build_parser(only="capture").parse_args(["capture", "-o", str(tmp_path / "unused.tar.gz"), *flags])
    buf = io.BytesIO()
    with RecordedHost(str(IMAGES / image)) as host:
        capture(host, buf, CaptureParams(node="gpu-node-017", nice=0, recorder_gap_s=0,
                                         expectations=expectations_to_json(expectations_from_args(args))))
    out = tmp_path / f"{image}.tar.gz"
    out.write_bytes(buf.getvalue())
    return out


def _both_rails_at_1500(tmp_path: Path) -> Path:
    """mtu-mismatch with net_rail0 put back to 1500 too: the rails agree with each other, not with 9000."""
    import shutil

    img = tmp_path / "both-1500"
    shutil.copytree(IMAGES / "mtu-mismatch", img, symlinks=True)
    links = img / "netlink" / "links.json"
    doc = json.loads(links.read_text())
    for ln in doc["links"]:
        if ln.get("ifname") in ("net_rail0", "net_rail0_0"):
            ln["mtu"] = 1500
    links.write_text(json.dumps(doc))
    for mtu in img.glob("fs/sys/devices/**/net/net_rail0*/mtu"):
        mtu.write_text("1500\n")
    return img


def test_since_judges_this_node_with_the_bundles_recorded_expectations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``preflight --since BUNDLE`` judges the live side as ``diff BUNDLE live`` does: with the expectations
    the capture recorded (here --expect-mtu 9000), under the flags given. An upgrade that left both rails at
    1500 is an MTU regression diff reports; the mtu check must fail, not read "the rails agree"."""
    import agent.host.live

    before = _bundle_of("spectrumx-2rail-healthy", tmp_path, "--expect-mtu", "9000")
    live = _both_rails_at_1500(tmp_path)
    monkeypatch.setattr(agent.host.live, "LiveHost", lambda root, **_: _ThisNode(live))
    assert main(["diff", str(before), "live", "--json"]) == 1
    regressions = {(i["code"], i["subject"], i["message"].split(":")[0])
                   for i in json.loads(capsys.readouterr().out)["regressions"]}
    assert regressions == {("FindingNew", "net_rail0", "MtuMismatch"), ("FindingNew", "net_rail1", "MtuMismatch")}

    code, out = preflight(capsys, "--since", str(before), "--json")
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert code == 1 and checks["mtu"][0] == "fail", checks
    assert "MtuMismatch net_rail0" in checks["mtu"][1] and "MtuMismatch net_rail1" in checks["mtu"][1]
    assert checks["since"][0] == "fail"
    # the command line still wins over the bundle, as for diff: 1500 expected, both rails agree with it
    code, out = preflight(capsys, "--since", str(before), "--json", "--expect-mtu", "1500")
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}
    assert checks["mtu"] == ("ok", "rails at MTU 1500"), checks
