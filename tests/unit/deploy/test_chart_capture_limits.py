"""What a capture made in the agent pod cannot read is said in the chart's values: every file a
capture plug-in reads outside the host paths the DaemonSet mounts, and dmesg, which needs a capability
the pod drops. New plug-in steps are picked up from the plug-in registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.capture.plugin import Command, File
from agent.capture.plugins import load
from tests.support.chart import CHART, container, render


def _host_mounts(docs: list[dict[str, Any]]) -> list[str]:
    return [m["mountPath"].removeprefix("/host") for m in container(docs)["volumeMounts"]
            if m["mountPath"].startswith("/host/")]


def test_every_unmounted_capture_path_and_dmesg_are_named_in_the_values(chart: Any) -> None:
    docs = render(chart, {"ovs": {"enabled": True}})
    mounts = _host_mounts(docs)
    values = (Path(CHART) / "values.yaml").read_text(encoding="utf-8")
    unmounted = set()
    for mod in load():
        for step in mod.PLUGIN.steps:
            if not isinstance(step, File):
                continue
            prefix = step.glob.split("{")[0].split("*")[0]
            # a glob is named by its directory, a plain path by itself
            path = prefix[: prefix.rfind("/") + 1] if prefix != step.glob else prefix
            if not any(path.rstrip("/") == m or path.startswith(m + "/") for m in mounts):
                unmounted.add(path)
    assert unmounted, "every capture file is mounted: then the values need not warn (update this test)"
    assert {"/etc/sriov_config.json", "/lib/udev/rules.d/"} <= unmounted, unmounted
    missing = sorted(p for p in unmounted if p not in values)
    assert not missing, f"values.yaml does not say the pod cannot read {missing}"
    runs_dmesg = any(isinstance(s, Command) and s.argv[0] == "dmesg" for m in load() for s in m.PLUGIN.steps)
    caps = container(docs)["securityContext"]["capabilities"]["add"]
    if runs_dmesg and "SYSLOG" not in caps:
        assert "dmesg" in values and "CAP_SYSLOG" in values
