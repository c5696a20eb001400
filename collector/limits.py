"""Bounds the collector keeps against what it is sent or asked: the analysis a page reads, what a
stored summary holds. Every number here is what one request may cost the replica at most.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ANALYSIS_OUTPUT_BYTES", "MAX_JSON_DEPTH", "PAGE_BYTES", "SUMMARY_BYTES", "SUMMARY_FINDINGS",
           "OutputTooLarge", "TokenBucket", "jwt_for", "loads", "read_capped", "summarise_doctor"]

#: The analysis child's answer (the summary and the page, as JSON); past it the child is killed. The
#: page is bounded by ``agent.report.html``'s caps: this is a ceiling for what those caps let through.
ANALYSIS_OUTPUT_BYTES = 16 << 20
#: A cached report page read back (the same ceiling, less the summary).
PAGE_BYTES = 12 << 20
#: The summary an incident page reads per bundle: what its rows and the fleet view need, no more.
SUMMARY_BYTES = 1 << 20
SUMMARY_FINDINGS = 100
_SUMMARY_ROWS = 100


#: No document the collector is sent nests deeper than a few levels (a webhook: 4).
MAX_JSON_DEPTH = 32


def loads(data: bytes | str, what: str = "the body") -> Any:
    """JSON from a request or the store, nesting bounded (``agent.safejson``): a ``ValueError`` for
    anything that is not a bounded JSON document, never a ``RecursionError``."""
    from agent.safejson import loads_bounded

    text = data.decode("utf-8") if isinstance(data, bytes) else data  # UnicodeDecodeError is a ValueError
    return loads_bounded(text, what, MAX_JSON_DEPTH)


class OutputTooLarge(Exception):
    """A stream gave more than its cap."""


async def read_capped(stream: asyncio.StreamReader, cap: int) -> bytes:
    """The whole stream, or ``OutputTooLarge`` as soon as it passes ``cap`` bytes (nothing more is read)."""
    buf = bytearray()
    while True:
        piece = await stream.read(1 << 16)
        if not piece:
            return bytes(buf)
        buf += piece
        if len(buf) > cap:
            raise OutputTooLarge(f"more than {cap} bytes")


def _fabric_evidence(f: dict[str, Any]) -> dict[str, Any]:
    """What fabric correlation reads of a finding's evidence: an optics module's vendor and part (its
    batch), the pause direction; short strings only."""
    ev = f.get("evidence")
    if not isinstance(ev, dict):
        return {}
    kept = {k: ev[k][:64] for k in ("vendor", "part", "pause") if isinstance(ev.get(k), str)}
    return {"evidence": kept} if kept else {}


def summarise_doctor(doctor: dict[str, Any]) -> dict[str, Any]:
    """``doctor``'s JSON cut to what the incident page shows: the worst findings (they come worst
    first) without their evidence but what fabric correlation reads, the count of all of them, and the
    first rails (with their LLDP peers) and gaps."""
    findings = doctor.get("findings")
    findings = findings if isinstance(findings, list) else []
    keep = ("code", "subject", "severity", "message")
    out = dict(doctor)
    out["findings"] = [{**{k: f.get(k) for k in keep if k in f}, **_fabric_evidence(f)}
                       for f in findings[:SUMMARY_FINDINGS] if isinstance(f, dict)]
    out["findings_total"] = len(findings)
    for name in ("rails", "unavailable"):
        rows = doctor.get(name)
        if isinstance(rows, list):
            out[name] = rows[:_SUMMARY_ROWS]
            out[f"{name}_total"] = len(rows)
    return out


def _b64json(part: str) -> Any:
    data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    return json.loads(data)


def jwt_for(token: str, audience: str) -> bool:
    """Whether ``token`` is shaped as a JWT (RFC 7519: three base64url parts, a header naming its
    ``alg``) whose payload names ``audience``. Nothing is verified: this only decides whether the API
    server is asked, which verifies everything; a projected ServiceAccount token always passes."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[0] or not parts[1] or len(token) > 16384:
        return False
    try:
        header, payload = _b64json(parts[0]), _b64json(parts[1])
    except (ValueError, binascii.Error, RecursionError):
        return False
    if not isinstance(header, dict) or not isinstance(header.get("alg"), str) or not isinstance(payload, dict):
        return False
    aud = payload.get("aud")
    return aud == audience or (isinstance(aud, list) and audience in aud)


class TokenBucket:
    """``rate`` events per second with bursts of ``burst``; the clock is an argument."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False
