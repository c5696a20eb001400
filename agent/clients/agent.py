"""A running agent's data endpoints (``/v1/events``, ``/v1/recorder``, ``/v1/image``): one client.

The agent serves them on its data socket (``unix:/run/railscope/agent.sock`` in the pod: what
``railscope capture --agent`` uses beside it) or over TCP with a bearer token (``--data-token-file`` on
the agent, ``--agent-token-file`` here). :func:`fetch_image` is ``railscope record --agent URL``: the
agent records the image *now*, with its flight recorder and event history, and streams it as a
``tar.gz``; it is read in memory (never extracted) and written as a directory, or kept as it came.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import tempfile
import urllib.parse
from typing import Any

from agent.host.image import LIMITS, ImageError, open_tree, write_tree
from proto.tokens import TokenFileError, read_token

__all__ = ["AgentClient", "AgentClientError", "fetch_image"]

_CHUNK = 1 << 16
#: the recorder is a few MB (15 min x 8 rails); refuse a runaway answer
MAX_DATA_BYTES = 64 << 20
#: a node image is a few MB; refuse a runaway stream
MAX_IMAGE_BYTES = 512 << 20


class AgentClientError(Exception):
    """The agent did not answer as asked; the message is one line for the operator.

    ``usage`` marks what the operator must change (the URL, the token file, the output path), not the agent.
    """

    def __init__(self, message: str, status: int | None = None, usage: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.usage = usage


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class AgentClient:
    """One agent, at ``unix:PATH`` or ``http(s)://ADDR:PORT[/prefix]``, with an optional token file."""

    def __init__(self, agent: str, *, token_file: str | None = None, token: str | None = None,
                 timeout_s: float = 30.0, token_flag: str = "--agent-token-file") -> None:
        self.agent = agent
        self.token_file = token_file
        self.token = token
        self.timeout_s = timeout_s
        self.token_flag = token_flag
        if agent.startswith("unix:"):
            self._unix: str | None = agent[len("unix:"):]
            self._base = ""
            self._netloc = ""
            self._https = False
        else:
            url = urllib.parse.urlsplit(agent if "://" in agent else "http://" + agent)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise AgentClientError(f"--agent {agent}: expected unix:PATH or http://ADDR:PORT", usage=True)
            self._unix = None
            self._base = url.path.rstrip("/")
            self._netloc = url.netloc
            self._https = url.scheme == "https"

    def _headers(self) -> dict[str, str]:
        token = self.token
        if self.token_file:
            try:
                token = read_token(self.token_file, self.token_flag)
            except TokenFileError as exc:
                raise AgentClientError(str(exc), usage=True) from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout)
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._netloc, timeout=timeout)

    def _where(self, path: str) -> str:
        return f"{self.agent.rstrip('/')}{path.split('?')[0]}"

    def get(self, path: str, limit: int, timeout_s: float | None = None) -> bytes:
        """The body of ``GET path`` (at most ``limit`` bytes), or :class:`AgentClientError`."""
        headers = self._headers()
        conn = self._connection(timeout_s or self.timeout_s)
        where = self._where(path)
        try:
            conn.request("GET", self._base + path, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                detail = resp.read(500).decode("utf-8", "replace").strip()
                raise AgentClientError(f"{where}: HTTP {resp.status}" + (f": {detail}" if detail else ""),
                                       status=resp.status)
            chunks, total = [], 0
            while chunk := resp.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise AgentClientError(f"{where}: more than {limit >> 20} MiB, refusing")
                chunks.append(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise AgentClientError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from None
        finally:
            conn.close()
        return b"".join(chunks)

    def events(self) -> list[dict[str, Any]]:
        """The agent's recent events, newest last."""
        try:
            doc = json.loads(self.get("/v1/events", MAX_DATA_BYTES))
            events = doc["events"] if isinstance(doc, dict) else None
            if not isinstance(events, list):
                raise ValueError("no events list")
        except (ValueError, KeyError, RecursionError) as exc:
            raise AgentClientError(f"{self._where('/v1/events')}: not an events document ({exc})") from None
        return events

    def recorder(self) -> bytes | None:
        """The flight recorder as ``recorder.jsonl``, or None when the agent's recorder is off (404)."""
        try:
            return self.get("/v1/recorder", MAX_DATA_BYTES)
        except AgentClientError as exc:
            if exc.status == 404:
                return None
            raise

    def image(self, *, reason: str | None = None, incident: str | None = None,
              timeout_s: float | None = None) -> bytes:
        """A node image recorded by the agent now, as the ``tar.gz`` it streams."""
        query = urllib.parse.urlencode({k: v for k, v in (("reason", reason), ("incident", incident)) if v})
        return self.get("/v1/image" + (f"?{query}" if query else ""), min(MAX_IMAGE_BYTES, LIMITS.total_bytes),
                        timeout_s)


def fetch_image(agent_url: str, out: str, *, reason: str | None = "railscope record --agent",
                incident: str | None = None, timeout_s: float = 300.0, unpack: bool = True,
                token: str | None = None, token_file: str | None = None) -> str:
    """Download the agent's node image into ``out``: a directory holding the image (``unpack``), or
    the ``.tar.gz`` file itself. ``out`` must not exist or be an empty directory. Returns ``out``.

    The archive is read in memory by the node image reader (``agent.host.image``: never extracted, a
    hostile archive refused with one line) and the directory written from what it read."""
    out = os.path.abspath(out)
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise AgentClientError(f"{out}: exists and is not an empty directory, refusing to overwrite", usage=True)
    client = AgentClient(agent_url, token=token, token_file=token_file, timeout_s=timeout_s)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    data = client.image(reason=reason, incident=incident)
    try:
        tree = open_tree(data, name="the agent's archive")
    except ImageError as exc:
        raise AgentClientError(str(exc)) from None
    # Written beside ``out`` and renamed into place: a failure (or SIGTERM, which ``railscope
    # record`` turns into an exit) leaves no half image behind.
    work = tempfile.mkdtemp(prefix=".railscope-fetch-", dir=parent)
    try:
        if unpack:
            if not tree.base:
                raise AgentClientError("the agent's archive has no single top directory")
            write_tree(tree, os.path.join(work, "image"))
            src = os.path.join(work, "image")
        else:
            src = os.path.join(work, "image.tar.gz")
            with open(src, "wb") as fh:
                fh.write(data)
        if os.path.isdir(out):
            os.rmdir(out)
        os.rename(src, out)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
