"""Alertmanager webhook v4 payloads as Alertmanager sends them (``notify/webhook``), for the collector's
capture-on-alert tests."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.support.collector_helpers import ALERTING_TOKEN

T0 = "2026-11-30T09:00:00.123456789Z"
#: the clock the capture policy's tests decide at
NOW = 1_796_000_000.0  # 2026-11-30


def alert(node: str | None, *, name: str = "RailscopeLinkFlapping", severity: str = "warning",
          status: str = "firing", starts: str = T0, **labels: str) -> dict[str, Any]:
    lab = {"alertname": name, "severity": severity, "job": "railscope", **labels}
    if node is not None:
        lab["node"] = node
    return {"status": status, "labels": lab, "annotations": {"summary": "x"}, "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": f"{abs(hash((node, name))) % (1 << 60):016x}"}


def payload(alerts: list[dict[str, Any]], *, key: str = '{}:{alertname="RailscopeLinkFlapping"}',
            status: str | None = None, **extra: Any) -> bytes:
    firing = any(a["status"] == "firing" for a in alerts)
    name = {"alertname": alerts[0]["labels"]["alertname"]} if alerts and "alertname" in alerts[0]["labels"] else {}
    doc = {"version": "4", "groupKey": key, "truncatedAlerts": 0, "status": status or ("firing" if firing else "resolved"),
           "receiver": "railscope", "groupLabels": name, "commonLabels": name,
           "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "alerts": alerts, **extra}
    return json.dumps(doc).encode()


async def call(method: str, url: str, *, token: str | None, data: bytes | None = None,
               json_body: object = None) -> tuple[int, dict]:
    """One request to the collector: (status, its JSON answer, or {"raw": text})."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.request(method, url, data=data, json=json_body, headers=headers) as r:
        try:
            return r.status, await r.json(content_type=None)
        except ValueError:
            return r.status, {"raw": (await r.text())[:200]}


def post_alerts(url: str, body_: bytes, token: str | None = ALERTING_TOKEN):  # type: ignore[no-untyped-def]
    """Alertmanager's webhook POST of ``body_`` to the collector at ``url``."""
    return call("POST", url + "/v1/alerts", token=token, data=body_)
