"""The Grafana dashboard (deploy/grafana/railscope-rails.json) as data: its queries, the series names
they read, and each query as Grafana sends it with every variable at "All"."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "railscope-rails.json"
_NAME = re.compile(r"\brailscope[_:][a-zA-Z0-9_:]*")


#: the dashboard's variables as Grafana sends them with "All" selected, and its interval macros
VARIABLES = {"$cluster": ".*", "$node": ".*", "$rail": ".*", "$leaf": ".*", "$prio": "3", "$collector_job": ".*railscope.*collector.*",
             "$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}


def substitute(expr: str) -> str:
    """A query as Prometheus receives it from Grafana with every variable at "All"."""
    for var in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(var, VARIABLES[var])
    return expr


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def targets(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query, annotations included."""
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    out += [(f"annotation {a['name']}", a["expr"]) for a in dash["annotations"]["list"] if "expr" in a]
    return out


def metric_names(expr: str) -> set[str]:
    """The railscope series names a query reads (quoted strings removed first: label values are not names)."""
    return set(_NAME.findall(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)))


def panel_targets(dash: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every panel query, then (``annotation <name>``, ``-``, expr)."""
    out = [(p["title"], t["refId"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    out += [(f"annotation {a['name']}", "-", a["expr"]) for a in dash["annotations"]["list"] if "expr" in a]
    return out


#: Recorded nodes whose exposition (``railscope metrics --from``) stands beside the live agent: the series a
#: veth rail has none of (PFC, RDMA, PHY, optics, hwmon, PCIe, LLDP), healthy and at fault. node -> image.
IMAGE_NODES = {
    "gpu-healthy": "degradation-sources-healthy",
    "gpu-ber": "link-degrading-ber-recorder",
    "gpu-optics": "optics-out-of-range-alarm",
    "gpu-temp": "nic-temperature-high",
    "gpu-pcie": "pcie-link-degraded",
    "gpu-down": "rail-link-down",
    "gpu-lldp": "lldp-peers-healthy",
}


def image_expositions(python: str) -> dict[str, bytes]:
    """Each of ``IMAGE_NODES``' expositions as the agent renders it (``railscope metrics --from``), rendered
    in parallel."""
    import subprocess

    procs = {node: subprocess.Popen([python, "-m", "agent.cli", "metrics", "--from", str(ROOT / "tests" / "images" / image)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
             for node, image in IMAGE_NODES.items()}
    out = {}
    for node, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, (node, stderr.decode()[-2000:])
        out[node] = stdout
    return out
