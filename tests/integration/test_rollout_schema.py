"""``railscope rollout --json`` of every rollout scenario of the API stand-in follows
``docs/schemas/railscope.rollout.v1.json``, and a renamed field does not."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.cli import main
from tests.support import kube_cluster
from tests.support.kube_apiserver import KubeApi
from tests.support.schemas import errors


@contextmanager
def _served(scenario: str) -> Iterator[str]:
    """The stand-in with the scenario loaded, served from a thread of its own: rollout runs in this one."""
    loop = asyncio.new_event_loop()
    api = KubeApi()
    kube_cluster.load(api, scenario)
    url = loop.run_until_complete(api.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(api.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.fixture
def rollout_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    for var in [v for v in os.environ if v.startswith(("RAILSCOPE_", "KUBERNETES_"))]:
        monkeypatch.delenv(var)
    token = tmp_path / "token"
    token.write_text("railscope-test-token")
    token.chmod(0o600)

    def run(scenario: str) -> dict:
        with _served(scenario) as url:
            code = main(["rollout", "--api-server", url, "--api-token-file", str(token), "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert doc["schema"] == "railscope.rollout/v1" and doc["exit"] == code, scenario
        return doc

    return run


@pytest.mark.parametrize("scenario", sorted(kube_cluster.SCENARIOS))
def test_rollout_json_of_every_scenario_follows_its_schema(scenario: str, rollout_json) -> None:
    doc = rollout_json(scenario)
    assert errors(doc) == []
    # what each shape needs exercised is exercised by some scenario
    if scenario == "component-error":
        assert {c["kind"] for c in doc["components"]} == {"NicClusterPolicy", "DaemonSet"}
        assert {n["verdict"] for n in doc["nodes"]} == {"failed"}
    if scenario == "no-spectrum-x":
        assert doc["skipped"]


def test_a_renamed_or_missing_rollout_field_fails_the_schema(rollout_json) -> None:
    doc = rollout_json("validation-2h")
    assert {n["verdict"] for n in doc["nodes"]} == {"stuck", "converged"}
    bad = copy.deepcopy(doc)
    bad["nodes"][0]["state"] = bad["nodes"][0].pop("verdict")
    assert errors(bad)
    doc = rollout_json("operator-conflicts")
    assert doc["findings"] and errors(doc) == []
    bad = copy.deepcopy(doc)
    del bad["findings"][0]["evidence"]
    assert errors(bad)
    bad = copy.deepcopy(doc)
    bad["exit_status"] = bad.pop("exit")
    assert errors(bad)
