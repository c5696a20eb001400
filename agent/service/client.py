"""Fetch a node image from a running agent (``GET /v1/image``): what ``railscope record --agent URL``
does. The agent records the image *now*, with its flight recorder and event history, and streams it
as a ``tar.gz``; this reads it in memory and writes it as a directory, or keeps the archive as it came.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from agent.host.image import LIMITS, ImageError, open_tree, write_tree

__all__ = ["AgentFetchError", "fetch_image"]

_CHUNK = 1 << 16
#: a node image is a few MB; refuse a runaway stream
MAX_BYTES = 512 << 20


class AgentFetchError(Exception):
    """The agent could not give an image; the message is one line for the operator."""


def _url(base: str, reason: str | None, incident: str | None) -> str:
    if "://" not in base:
        base = "http://" + base
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AgentFetchError(f"--agent {base}: expected http://ADDR:PORT")
    query = {k: v for k, v in (("reason", reason), ("incident", incident)) if v}
    path = parts.path.rstrip("/") + "/v1/image"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


def fetch_image(agent_url: str, out: str, *, reason: str | None = "railscope record --agent",
                incident: str | None = None, timeout_s: float = 300.0, unpack: bool = True,
                token: str | None = None) -> str:
    """Download the agent's node image into ``out``: a directory holding the image (``unpack``), or
    the ``.tar.gz`` file itself. ``out`` must not exist or be an empty directory. Returns ``out``.

    The archive is read in memory by the node image reader (``agent.host.image``: never extracted, a
    hostile archive refused with one line) and the directory written from what it read."""
    out = os.path.abspath(out)
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise AgentFetchError(f"{out}: exists and is not an empty directory, refusing to overwrite")
    url = _url(agent_url, reason, incident)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    cap = min(MAX_BYTES, LIMITS.total_bytes)
    chunks: list[bytes] = []
    try:
        # The agent's data endpoints answer over TCP only with its bearer token (--data-token-file).
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            total = 0
            while chunk := resp.read(_CHUNK):
                total += len(chunk)
                if total > cap:
                    raise AgentFetchError(f"{url}: more than {cap >> 20} MiB, refusing")
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace").strip()
        raise AgentFetchError(f"{url}: HTTP {exc.code}" + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise AgentFetchError(f"{url}: {why}") from None
    data = b"".join(chunks)
    try:
        tree = open_tree(data, name="the agent's archive")
    except ImageError as exc:
        raise AgentFetchError(str(exc)) from None
    # Written beside ``out`` and renamed into place: a failure (or SIGTERM, which ``railscope
    # record`` turns into an exit) leaves no half image behind.
    work = tempfile.mkdtemp(prefix=".railscope-fetch-", dir=parent)
    try:
        if unpack:
            if not tree.base:
                raise AgentFetchError("the agent's archive has no single top directory")
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
