"""The repository's documents stand alone: no tracked file cites a document the repository does not
hold (a design or style document kept elsewhere), points at a path outside the checkout, or names a
section of ``docs/design.md`` that it lacks.

The one input from outside is the kernel lab (``tests/klab``): its lab script is not part of
railscope, and the tier is skipped, with the reason, where ``../shared/klab/run-lab.sh`` beside the
checkout (or ``KLAB_LAB``) does not name it. That location is the only path outside allowed, and only
as that string.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The kernel lab's script: outside the repository by nature (see the module docstring).
KLAB_LAB = "../shared/klab/run-lab.sh"

# Recorded or third-party text is quoted, not cited: a node image's files are a machine's, the public
# fixtures are other people's words, kept verbatim.
_QUOTED = (re.compile(r"^tests/fixtures/public/"), re.compile(r"^tests/images/[^/]+/(fs|cmd|netlink)/"),
           re.compile(r"^tests/golden/"), re.compile(r"^proto/vectors/"))
_ELSEWHERE = [
    (re.compile(r"\bDESIGN\b"), "a design document the repository does not hold (docs/design.md is the one)"),
    (re.compile(r"\bSTYLE\b(?!\s*=)"), "a style document the repository does not hold (docs/design.md §11)"),
    (re.compile(r"design doc", re.I), "a design document: name it (docs/design.md)"),
    (re.compile(r"\.\./shared\b"), "a path outside the checkout"),
    (re.compile(r"(?<![\w.])/work/"), "a path outside the checkout"),
]
_DOC = re.compile(r"(?<![\w./%-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_SECTION = re.compile(r"docs/design\.md\s+((?:§\d+(?:[-–]§?\d+)?(?:,\s*)?)+)")


def _tracked() -> list[str]:
    """The files the scans read: every tracked file but quoted ones."""
    return [n for n in _all() if not any(q.search(n) for q in _QUOTED)]


def _all() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        # not a git checkout (an unpacked source tree): every file under the root but caches
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".git", ".venv", "__pycache__", "node_modules"} & set(p.relative_to(ROOT).parts)]
    return sorted(names)


def _texts() -> list[tuple[str, str]]:
    out = []
    for name in _tracked():
        path = ROOT / name
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        out.append((name, data.decode("utf-8", "replace")))
    return out


def test_no_file_cites_a_document_or_path_outside_the_repository() -> None:
    bad = []
    for name, text in _texts():
        if name == "tests/unit/test_docs_stand_alone.py":
            continue  # it names what it looks for
        for n, line in enumerate(text.splitlines(), 1):
            line_ = line.replace(KLAB_LAB, "")
            for pat, why in _ELSEWHERE:
                if pat.search(line_):
                    bad.append(f"{name}:{n}: {why}: {line.strip()[:140]}")
    assert not bad, f"{len(bad)} citation(s) of what is not in the repository:\n" + "\n".join(bad[:60])


def test_every_document_a_file_names_exists() -> None:
    """``docs/codes.md``, ``proto/SPEC.md``, a Markdown link: each resolves from the root, from the file's
    folder, or (a bare name such as ``SPEC.md``) to a file of that name somewhere in the repository."""
    names = _all()
    basenames = {Path(n).name for n in names}
    missing = []
    for name, text in _texts():
        here = ROOT / Path(name).parent
        refs = set(_DOC.findall(text))
        if name.endswith(".md"):
            refs |= {t for t in _LINK.findall(text) if "://" not in t and not t.startswith("mailto:")}
        for ref in sorted(refs):
            # from the root, from the file's folder, from a folder below it (a generator writes the
            # README of each image it makes), or a bare name of a file that exists
            bases = [ROOT, here, *(p for p in here.iterdir() if p.is_dir())] if here.is_dir() else [ROOT]
            if any((b / ref).exists() for b in bases) or ("/" not in ref and ref in basenames):
                continue
            missing.append(f"{name}: {ref}")
    assert not missing, "documents named but not in the repository:\n" + "\n".join(missing[:60])


def test_every_section_of_the_design_that_is_cited_exists() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = {int(m) for m in re.findall(r"^## (\d+)\. ", design, re.M)}
    bad = []
    for name, text in _texts():
        for m in _SECTION.finditer(text):
            for a, b in re.findall(r"§(\d+)(?:[-–]§?(\d+))?", m.group(1)):
                for s in range(int(a), int(b or a) + 1):
                    if s not in sections:
                        bad.append(f"{name}: §{s}")
    assert not bad, f"sections docs/design.md lacks (it has {sorted(sections)}):\n" + "\n".join(bad)


_PATH = re.compile(r"`((?:agent|collector|proto|tests|scripts|deploy|bench|docs|\.ci)/[\w./*<>-]*)`")
_KEY = re.compile(r"(?<![\w/])([a-z0-9][a-z0-9._-]*/\d{4}-\d{2}-\d{2}/[a-z0-9][a-z0-9._-]*/[^\s`'\")]+\.tar\.gz)")


def test_the_readmes_paths_and_bundle_keys_are_real() -> None:
    """Every repository path the README names in backticks exists (a glob matches something), and every
    stored bundle's key it shows is one the collector could have stored (``proto.keys``)."""
    from proto.keys import KeyPartError, parse_name

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = []
    for path in sorted(set(_PATH.findall(readme))):
        if "<" in path:
            continue  # a pattern: `tests/unit/<part>/`
        if not (list(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()):
            missing.append(path)
    assert not missing, f"README names paths that do not exist: {missing}"
    keys = _KEY.findall(readme)
    assert keys, "the README shows a stored bundle's key"
    bad = []
    for key in keys:
        try:
            parse_name(*key.split("/"))
        except (KeyPartError, TypeError) as exc:
            bad.append(f"{key}: {exc}")
    assert not bad, "README keys no collector stores:\n" + "\n".join(bad)
