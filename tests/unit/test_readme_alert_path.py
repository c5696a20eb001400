"""The README's "How an alert becomes a bundle" names modules and their functions: each must exist, so
the newcomer's path through the code cannot drift from the code."""

from __future__ import annotations

import importlib
import re

from tests.support import ROOT

SECTION = re.compile(r"<!-- alert-path -->\n(.*?)<!-- /alert-path -->", re.S)
#: `path/to/module.py` followed by one or more `Name` / `Class.method` references on the same step
STEP_REF = re.compile(r"`([a-z_/]+\.py)`((?:\s+`[A-Za-z_][\w.]*`(?:\s*(?:→|,)\s*)?)*)")


def _steps() -> list[str]:
    m = SECTION.search((ROOT / "README.md").read_text())
    assert m, "README.md lost its alert-path section"
    return [line for line in m.group(1).splitlines() if re.match(r"\d+\. ", line)]


def test_the_alert_path_has_its_ten_steps_in_order() -> None:
    steps = _steps()
    assert [int(s.split(".")[0]) for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) >= 10


def test_every_module_and_name_on_the_alert_path_exists() -> None:
    checked = 0
    for step in _steps():
        for m in STEP_REF.finditer(step):
            path, names = m.group(1), re.findall(r"`([A-Za-z_][\w.]*)`", m.group(2))
            assert (ROOT / path).is_file(), f"{path} (in: {step})"
            module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
            for name in names:
                obj = module
                for part in name.split("."):
                    assert hasattr(obj, part), f"{path} has no {name} (in: {step})"
                    obj = getattr(obj, part)
                checked += 1
    assert checked >= 15
