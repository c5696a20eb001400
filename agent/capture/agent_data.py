"""Fetch a running agent's events and flight recorder for a capture made beside it (``railscope
capture --agent unix:/run/railscope/agent.sock``, or ``http://ADDR:PORT`` with a token file)."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any

__all__ = ["AgentDataError", "fetch_agent_data", "fetch_events"]

#: the recorder is a few MB (15 min x 8 rails); refuse a runaway answer
MAX_BYTES = 64 << 20


class AgentDataError(Exception):
    """The agent did not give its data; the message is one line for the operator."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def _get(agent: str, path: str, token: str | None, timeout: float) -> bytes:
    if agent.startswith("unix:"):
        conn: http.client.HTTPConnection = _UnixConnection(agent[len("unix:"):], timeout)
        base = ""
    else:
        url = urllib.parse.urlsplit(agent if "://" in agent else "http://" + agent)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise AgentDataError(f"--agent {agent}: expected unix:PATH or http://ADDR:PORT")
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = cls(url.netloc, timeout=timeout)
        base = url.path.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request("GET", base + path, headers=headers)
        resp = conn.getresponse()
        body = resp.read(MAX_BYTES + 1)
    except OSError as exc:
        raise AgentDataError(f"{agent}{path}: {exc.strerror or exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise AgentDataError(f"{agent}{path}: HTTP {resp.status}: {body[:200].decode('utf-8', 'replace').strip()}")
    if len(body) > MAX_BYTES:
        raise AgentDataError(f"{agent}{path}: more than {MAX_BYTES >> 20} MiB, refusing")
    return body


def _token(token_file: str | None) -> str | None:
    if not token_file:
        return None
    try:
        with open(token_file, encoding="utf-8") as fh:
            return fh.read(4096).strip()
    except OSError as exc:
        raise AgentDataError(f"--agent-token-file {token_file}: {exc.strerror or exc}") from None


def fetch_events(agent: str, token_file: str | None = None, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The agent's event log (``/v1/events``), oldest first, as it serves it."""
    return _events(agent, _token(token_file), timeout_s)


def _events(agent: str, token: str | None, timeout_s: float) -> list[dict[str, Any]]:
    try:
        doc = json.loads(_get(agent, "/v1/events", token, timeout_s))
        events = doc["events"] if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise ValueError("no events list")
    except (ValueError, KeyError) as exc:
        raise AgentDataError(f"{agent}/v1/events: not an events document ({exc})") from None
    return events


def fetch_agent_data(agent: str, token_file: str | None = None,
                     timeout_s: float = 30.0) -> tuple[list[dict[str, Any]], bytes | None]:
    """(events, recorder.jsonl bytes or None when the agent's recorder is off)."""
    token = _token(token_file)
    events = _events(agent, token, timeout_s)
    try:
        recorder: bytes | None = _get(agent, "/v1/recorder", token, timeout_s)
    except AgentDataError as exc:
        if "HTTP 404" not in str(exc):
            raise
        recorder = None
    return events, recorder
