#!/usr/bin/env python3
"""``doctor --from`` of every node image under tests/images, here and in another checkout, compared
byte for byte after taking out only what the readiness sources add: the ``gpu`` / ``gpu_link`` keys
of ``rails[]`` and the ``unavailable`` entries of the ``firmware`` and ``gpus`` sources.

    python3 scripts/doctor_compat.py ../railscope-main     # exit 1 and a diff when an image differs

Only images that exist in both checkouts are compared (new images have nothing to compare with).
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

NEW_RAIL_KEYS = ("gpu", "gpu_link")
NEW_SOURCES = ("firmware", "gpus")


def doctor(checkout: Path, image: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json", "--from", str(image)],
                         cwd=checkout, capture_output=True, text=True, timeout=120, check=False)
    return res.stdout


def strip(text: str) -> str:
    doc = json.loads(text)
    for row in doc.get("rails", []):
        for k in NEW_RAIL_KEYS:
            row.pop(k, None)
    doc["unavailable"] = [u for u in doc.get("unavailable", []) if u.get("source") not in NEW_SOURCES]
    return json.dumps(doc, indent=2)


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent.parent
    base = Path(argv[1]).resolve() if len(argv) > 1 else here
    bad = 0
    images = sorted(p for p in (here / "tests/images").iterdir() if p.is_dir() and (base / "tests/images" / p.name).is_dir())
    for img in images:
        old, new = doctor(base, base / "tests/images" / img.name), doctor(here, img)
        same_raw = old == new
        same = strip(old) == strip(new) if old and new else old == new
        print(f"{'same' if same else 'DIFFERS':8} {'(identical)' if same_raw else '(new keys only)':16} {img.name}")
        if not same:
            bad += 1
            sys.stdout.writelines(difflib.unified_diff(strip(old).splitlines(True), strip(new).splitlines(True),
                                                       "before", "after", n=2))
    print(f"{len(images)} image(s), {bad} differ beyond the readiness sources' additions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
