"""The collector's pages as a browser asks for them: a bundle of a node image, Basic auth, a GET."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import aiohttp

__all__ = ["IMAGES", "basic", "bundle_of", "fetch"]

IMAGES = Path(__file__).resolve().parents[1] / "images"


def bundle_of(image: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(IMAGES / image, arcname=image)
    return buf.getvalue()


def basic(token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"operator:{token}".encode()).decode()}


async def fetch(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict]:
    async with aiohttp.ClientSession() as s, s.get(url + path, headers=headers or {}) as r:
        return r.status, (await r.read()).decode("utf-8", "replace"), dict(r.headers)
