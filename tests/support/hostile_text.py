"""Bundle text that must never reach a terminal or a page as it is: terminal escapes, markup, a remote
image; and the example image carrying it in its manifest and its events."""

from __future__ import annotations

from pathlib import Path

from tests.support import EXAMPLE_IMAGE, script

HOSTILE = "\x1b]0;owned\x07\x1b[2J<script>alert(1)</script><img src=http://example.invalid/x.png>"


def hostile_image(root: Path) -> Path:
    """Write the example image, ``HOSTILE`` in its capture reason, a command and an event, under ``root``."""
    make_images = script("tests/images/make_images.py")
    img = make_images.Image.load(EXAMPLE_IMAGE)
    img.manifest["reason"] = HOSTILE
    img.manifest["items"].append({"path": None, "kind": "command", "argv": ["ip", HOSTILE], "rc": None,
                                  "skipped": True, "reason": HOSTILE})
    make_images.set_events(img, [{"ts": make_images.ENDED_AT - 5, "code": "LinkFlapping", "severity": "warning",
                                  "subject": "net_rail0", "message": HOSTILE, "evidence": {"x": HOSTILE}}])
    img.save(root, "hostile", {})
    return root
