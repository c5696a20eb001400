"""Load a page in real headless Chromium with JavaScript off, over the DevTools protocol on a pipe.

Chromium's own ``--screenshot`` and ``--dump-dom`` switches evaluate script in the page to do their
work, so with ``--blink-settings=scriptEnabled=false`` they silently write nothing. Here the
browser is driven over ``--remote-debugging-pipe`` (NUL-separated JSON on fds 3 and 4): scripts are
disabled for the page (the blink setting and ``Emulation.setScriptExecutionDisabled``), every
request the page makes is recorded, and the DOM and a full-page PNG come back through the
protocol, which needs no script in the page.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--blink-settings=scriptEnabled=false", "--remote-debugging-pipe")


def chromium_binary() -> str | None:
    # Debian's /usr/bin/chromium is a shell wrapper; the binary itself takes the pipe fds as given.
    for cand in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or ""):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


@dataclass
class Page:
    dom: str
    png: bytes
    requests: list[str] = field(default_factory=list)
    title: str = ""
    #: selector -> (x, y, width, height) of its border box, in screenshot pixels
    boxes: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    status: int | None = None  # the HTTP status of the page itself (None for file://)


def _high(fd: int) -> int:
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class _Cdp:
    def __init__(self, binary: str, profile: str) -> None:
        # Above 4, so that the child's dup2 onto 3 and 4 cannot overwrite one end with the other.
        self.to_r, self.to_w, self.from_r, self.from_w = (_high(fd) for fd in (*os.pipe(), *os.pipe()))

        def fds() -> None:
            os.dup2(self.to_r, 3)
            os.dup2(self.from_w, 4)

        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=fds, pass_fds=(3, 4, self.to_r, self.from_w),
                                     start_new_session=True)
        os.close(self.to_r)
        os.close(self.from_w)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            import select

            ready, _, _ = select.select([self.from_r], [], [], 0.5)
            if ready:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            got = self._read_message(deadline)
            if got.get("id") == self.next_id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got.get("result", {})
            self.events.append(got)

    def wait_event(self, method: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            got = self._read_message(deadline)
            if got.get("method") == method:
                return got
            self.events.append(got)

    def close(self) -> None:
        try:
            os.write(self.to_w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)


def load(url: str, width: int = 1280, binary: str | None = None, boxes: tuple[str, ...] = (),
         headers: dict[str, str] | None = None) -> Page:
    """The page at ``url`` with scripts off: its DOM, a full-page screenshot, the URLs it requested.

    ``headers`` go with every request of the page (``Authorization`` for the collector's pages)."""
    binary = binary or chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium")
    profile = tempfile.mkdtemp(prefix="rs-chromium-")
    cdp = _Cdp(binary, profile)
    try:
        targets = cdp.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        sid = cdp.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        cdp.call("Emulation.setScriptExecutionDisabled", {"value": True}, sid)
        cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                        "mobile": False}, sid)
        cdp.call("Network.enable", {}, sid)
        if headers:
            cdp.call("Network.setExtraHTTPHeaders", {"headers": headers}, sid)
        cdp.call("Page.enable", {}, sid)
        cdp.call("Page.navigate", {"url": url}, sid)
        cdp.wait_event("Page.loadEventFired")
        requests = [ev["params"]["request"]["url"] for ev in cdp.events
                    if ev.get("method") == "Network.requestWillBeSent"]
        status = next((int(ev["params"]["response"]["status"]) for ev in cdp.events
                       if ev.get("method") == "Network.responseReceived"
                       and ev["params"]["response"]["url"] == url and ev["params"].get("type") == "Document"), None)
        root = cdp.call("DOM.getDocument", {"depth": -1}, sid)["root"]
        dom = cdp.call("DOM.getOuterHTML", {"nodeId": root["nodeId"]}, sid)["outerHTML"]
        metrics = cdp.call("Page.getLayoutMetrics", {}, sid)
        height = int(metrics["cssContentSize"]["height"]) + 1
        cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False}, sid)
        root = cdp.call("DOM.getDocument", {"depth": 0}, sid)["root"]
        found = {}
        for sel in boxes:
            node = cdp.call("DOM.querySelector", {"nodeId": root["nodeId"], "selector": sel}, sid)["nodeId"]
            if not node:
                continue
            quad = cdp.call("DOM.getBoxModel", {"nodeId": node}, sid)["model"]["border"]
            xs, ys = quad[0::2], quad[1::2]
            found[sel] = (int(min(xs)), int(min(ys)), int(max(xs) - min(xs)), int(max(ys) - min(ys)))
        shot = cdp.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, sid)
        title = cdp.call("Target.getTargetInfo", {"targetId": page["targetId"]})["targetInfo"]["title"]
        return Page(dom, base64.b64decode(shot["data"]), requests, title, found, status)
    finally:
        cdp.close()
        shutil.rmtree(profile, ignore_errors=True)


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = 0
    channels = 3
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        prev = line
        if channels == 4:
            rgb = bytearray()
            for i in range(0, stride, 4):
                rgb += line[i:i + 3]
            rows.append(bytes(rgb))
        else:
            rows.append(bytes(line))
    return width, height, rows


def ink(rows: list[bytes], box: tuple[int, int, int, int], transmit: bool = False) -> int:
    """Pixels in the box that are not page background (or, with ``transmit``, in the transmit
    colour's orange, line or the tint under it: red well above blue)."""
    x, y, w, h = box
    n = 0
    for row in rows[y:y + h]:
        for i in range(x, min(x + w, len(row) // 3)):
            r, g, b = row[3 * i], row[3 * i + 1], row[3 * i + 2]
            n += (r - b > 15) if transmit else ((r + g + b) < 600)
    return n
