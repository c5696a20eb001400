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
