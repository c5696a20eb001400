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
           "OutputTooLarge", "TokenBucket", "fit_summary", "jwt_for", "loads", "read_capped", "summarise_doctor",
           "summary_bytes"]

#: The analysis child's answer (the summary and the page, as JSON); past it the child is killed. The
#: page is bounded by ``agent.report.html``'s caps: this is a ceiling for what those caps let through.
ANALYSIS_OUTPUT_BYTES = 16 << 20
#: A cached report page read back: the child's whole answer, so every page written reads back (the
#: page's UTF-8 is never longer than its JSON-escaped ASCII in the answer) and none is analysed again.
PAGE_BYTES = ANALYSIS_OUTPUT_BYTES
#: The summary an incident page reads per bundle: what its rows and the fleet view need, no more.
#: It is written to fit (``fit_summary``): one past it would never be read back.
SUMMARY_BYTES = 1 << 20
SUMMARY_FINDINGS = 100
_SUMMARY_ROWS = 100
_SUMMARY_NOTES = 20
_SUMMARY_EXPECTATIONS = 64
#: Characters kept of a finding's message, of a reason or note, of any other text of the summary.
_MESSAGE_CHARS = 1000
_TEXT_CHARS = 200


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


def _cut(value: Any, n: int = _TEXT_CHARS) -> Any:
    """A string of at most ``n`` characters (an ellipsis says it was cut); other scalars as they are."""
    if isinstance(value, str):
        return value if len(value) <= n else value[:n - 1] + "…"
    return value if value is None or isinstance(value, (bool, int, float)) else _cut(str(value), n)


def _row(row: Any) -> Any:
    """A ``rails[]`` / ``unavailable[]`` row with its text cut (``peer`` one level down, as it is)."""
    if not isinstance(row, dict):
        return None
    out: dict[str, Any] = {}
    for k, v in list(row.items())[:32]:
        if isinstance(v, dict):
            out[_cut(k, 64)] = {_cut(k2, 64): _cut(v2) if not isinstance(v2, list) else [_cut(x) for x in v2[:16]]
                                for k2, v2 in list(v.items())[:16]}
        elif isinstance(v, list):
            out[_cut(k, 64)] = [_cut(x) for x in v[:16]]
        else:
            out[_cut(k, 64)] = _cut(v, _MESSAGE_CHARS if k == "reason" else _TEXT_CHARS)
    return out


def summarise_doctor(doctor: dict[str, Any]) -> dict[str, Any]:
    """``doctor``'s JSON cut to what the incident page shows: the worst findings (they come worst
    first) without their evidence but what fabric correlation reads, the count of all of them, and the
    first rails (with their LLDP peers), gaps and notes with their counts; every text cut. A summary
    summarised again keeps its counts."""
    findings = doctor.get("findings")
    findings = findings if isinstance(findings, list) else []
    out: dict[str, Any] = {k: _cut(doctor.get(k)) for k in ("schema", "node", "kernel") if k in doctor}
    out["findings"] = [{**{k: _cut(f.get(k), _MESSAGE_CHARS if k == "message" else _TEXT_CHARS)
                           for k in ("code", "subject", "severity", "message") if k in f}, **_fabric_evidence(f)}
                       for f in findings[:SUMMARY_FINDINGS] if isinstance(f, dict)]
    out["findings_total"] = _total(doctor, "findings", findings)
    for name, n in (("rails", _SUMMARY_ROWS), ("unavailable", _SUMMARY_ROWS), ("notes", _SUMMARY_NOTES)):
        rows = doctor.get(name)
        if isinstance(rows, list):
            out[name] = [_row(r) if name != "notes" else _cut(r, _MESSAGE_CHARS) for r in rows[:n]]
            out[f"{name}_total"] = _total(doctor, name, rows)
    exp = doctor.get("expectations")
    if isinstance(exp, dict):
        out["expectations"] = {_cut(k, 64): _row(v) if isinstance(v, dict) else _cut(v)
                               for k, v in list(exp.items())[:_SUMMARY_EXPECTATIONS]}
    return out


def _total(doctor: dict[str, Any], name: str, rows: list[Any]) -> int:
    total = doctor.get(f"{name}_total")
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= len(rows) else len(rows)


def summary_bytes(doc: dict[str, Any]) -> bytes:
    """The summary as it is stored (compact JSON, ASCII: a character outside it takes up to 12 bytes)."""
    return json.dumps(doc, separators=(",", ":")).encode()


def fit_summary(doc: dict[str, Any], cap: int = SUMMARY_BYTES) -> dict[str, Any]:
    """``doc`` (an analysis summary) within ``cap`` bytes as stored: its doctor's lists halved, the
    longest first (never below one row), until it fits (their ``*_total`` still count them all), then
    the text beside the doctor document cut short."""
    if len(summary_bytes(doc)) <= cap:
        return doc
    out = dict(doc)
    doctor = dict(out["doctor"]) if isinstance(out.get("doctor"), dict) else None
    while doctor is not None:
        out["doctor"] = doctor
        if len(summary_bytes(out)) <= cap:
            return out
        lists = [k for k in ("findings", "rails", "unavailable", "notes") if isinstance(doctor.get(k), list)
                 and len(doctor[k]) > 1]
        if not lists:
            break
        longest = max(lists, key=lambda k: len(summary_bytes({"x": doctor[k]})))
        doctor[longest] = doctor[longest][:len(doctor[longest]) // 2]
    # What is left past the cap is text beside the doctor document (an error); the envelope is what
    # the cache is matched by, kept whole.
    envelope = {k: out[k] for k in ("schema", "sha256", "version", "key", "expectations") if k in out}
    out = {k: v if k in envelope or isinstance(v, dict) else _cut(v, _MESSAGE_CHARS) for k, v in out.items()}
    if len(summary_bytes(out)) > cap:
        out = {**envelope, "error": "the analysis summary did not fit the collector's cap"}
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
