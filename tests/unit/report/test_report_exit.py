"""``railscope report``'s exit status: each code it documents (``--help``, the README) is what it returns,
on node images that give it, and the documents say the same words."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from agent.cli import main
from agent.commands.report import EXIT_STATUS
from tests.support.collector_helpers import OPERATOR_TOKEN, local_settings, running

ROOT = Path(__file__).resolve().parents[3]
IMAGES = ROOT / "tests" / "images"


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_help_and_the_readme_give_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report", "--help"])
    assert done.value.code == 0
    helptext = _flat(capsys.readouterr().out)
    readme = _flat((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [n for n, _ in EXIT_STATUS] == [0, 1, 2, 3]
    for n, words in EXIT_STATUS:
        assert f"{n} {words}" in helptext, (n, helptext[-600:])
        assert f"{n} {words}" in readme, n


def test_each_exit_status_is_what_report_returns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(IMAGES / "spectrumx-2rail-healthy")]) == 0
    assert main(["report", str(IMAGES / "global-pause-enabled")]) == 1  # warnings only
    assert main(["report", str(IMAGES / "rail-link-down")]) == 2  # RailLinkDown is critical
    assert main(["report", str(IMAGES / "spectrumx-2rail-healthy"), "--html", str(tmp_path / "no" / "r.html")]) == 1
    assert main(["report", str(tmp_path / "no-such-bundle.tar.gz")]) == 3  # not a node image
    with pytest.raises(SystemExit) as done:
        main(["report", str(IMAGES / "spectrumx-2rail-healthy"), "--no-such-flag"])
    assert done.value.code == 3  # bad usage
    token = tmp_path / "operator"
    token.write_text(OPERATOR_TOKEN + "\n")
    token.chmod(0o600)

    async def stored_bundle_not_found() -> int:
        async with running(local_settings(tmp_path)) as (url, _col):
            key = "prod-east/2026-12-01/inc-none/gpu-node-017-20261201T093823Z-b0.tar.gz"
            return await asyncio.to_thread(main, ["report", key, "--collector", url, "--token-file", str(token)])

    assert asyncio.run(stored_bundle_not_found()) == 3  # the collector did not give it
    assert "answered 404" in capsys.readouterr().err
