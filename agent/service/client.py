"""Fetch a node image from a running agent (``GET /v1/image``): what ``railscope record --agent URL``
does. The agent records the image *now*, with its flight recorder and event history, and streams it
as a ``tar.gz``; this unpacks it into a directory, or keeps the archive as it came.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request

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
    the ``.tar.gz`` file itself. ``out`` must not exist or be an empty directory. Returns ``out``."""
    out = os.path.abspath(out)
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        raise AgentFetchError(f"{out}: exists and is not an empty directory, refusing to overwrite")
    url = _url(agent_url, reason, incident)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".railscope-fetch-", suffix=".tar.gz", dir=parent)
    try:
        try:
            # The agent's data endpoints answer over TCP only with its bearer token (--data-token-file).
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
            with urllib.request.urlopen(req, timeout=timeout_s) as resp, os.fdopen(fd, "wb") as fh:
                total = 0
                while chunk := resp.read(_CHUNK):
                    total += len(chunk)
                    if total > MAX_BYTES:
                        raise AgentFetchError(f"{url}: more than {MAX_BYTES >> 20} MiB, refusing")
                    fh.write(chunk)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace").strip()
            raise AgentFetchError(f"{url}: HTTP {exc.code}" + (f": {detail}" if detail else "")) from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", None) or exc
            raise AgentFetchError(f"{url}: {why}") from None
        if not unpack:
            if os.path.isdir(out):
                os.rmdir(out)
            os.replace(tmp, out)
            return out
        _unpack(tmp, out)
        return out
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _unpack(archive: str, out: str) -> None:
    """Unpack the image's single top directory as ``out``."""
    work = tempfile.mkdtemp(prefix=".railscope-unpack-", dir=os.path.dirname(out))
    try:
        try:
            with tarfile.open(archive, "r:gz") as tf:
                tf.extractall(work, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise AgentFetchError(f"the agent sent a damaged archive ({exc})") from None
        entries = os.listdir(work)
        if len(entries) != 1 or not os.path.isdir(os.path.join(work, entries[0])):
            raise AgentFetchError("the agent's archive has no single top directory")
        if os.path.isdir(out):
            os.rmdir(out)
        os.rename(os.path.join(work, entries[0]), out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
