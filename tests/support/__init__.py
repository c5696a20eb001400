"""What the tests share: the repository's paths and the helpers several test modules use (node
builders, stand-in servers, image and bundle makers). Test modules import from here, never from each
other; the repository root is on ``sys.path`` (pyproject's ``pythonpath``, or ``PYTHONPATH``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
IMAGES = TESTS / "images"
PUBLIC = TESTS / "fixtures" / "public"
#: The example image (the README's): the repository's own copy, so that a clone anywhere runs every test.
EXAMPLE_IMAGE = IMAGES / "spectrumx-2rail-healthy"


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def script(path: str) -> ModuleType:
    """The module of a program the repository runs as a script (``scripts/gen_codes_doc.py``,
    ``tests/images/make_images.py``), by its path from the root, imported once under its file name.

    Scripts are not a package; loading them by path keeps ``sys.path`` as it is. Registered in
    ``sys.modules`` first, so that a script importing a sibling by name (``make_pairs`` imports
    ``make_images``) gets this same module."""
    file = ROOT / path
    name = file.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(file):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None, f"not a Python file: {file}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
