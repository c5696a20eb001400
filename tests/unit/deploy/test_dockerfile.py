"""The image can run every command the agent's readers and capture plug-ins run.

No Docker engine runs here, so the check is made on Debian's package file lists: each argv[0] of the
source registry and of every capture plug-in must be a program of a package the Dockerfile installs
(its ``.deb``, fetched with ``apt-get download`` and listed with ``dpkg-deb -c``), or of a package every
Debian image has (Essential or Priority required: the base of ``*-slim-bookworm``). Bookworm's
``openvswitch-common`` has ``ovs-appctl`` but not ``ovs-vsctl`` (``openvswitch-switch``): a Dockerfile
naming only the former fails here. New sources and plug-ins are picked up from the registries.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.capture.plugin import Command
from agent.capture.plugins import load
from agent.readers.sources import SOURCES

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
BIN_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin")


def programs() -> dict[str, str]:
    """Every argv[0] the agent runs, with who runs it."""
    found: dict[str, str] = {}
    for src in SOURCES:
        for argv in src.commands:
            found.setdefault(argv[0], f"source {src.name}")
    for mod in load():
        for step in mod.PLUGIN.steps:
            if isinstance(step, Command):
                found.setdefault(step.argv[0], f"capture plug-in {mod.PLUGIN.name}")
    return found


def dockerfile_packages(text: str) -> list[str]:
    """The packages of the Dockerfile's ``apt-get install`` (continuation lines joined)."""
    joined = re.sub(r"\\\n", " ", text)
    pkgs: list[str] = []
    for m in re.finditer(r"apt-get install ([^&\n]*)", joined):
        pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


def deb_programs(pkg: str, workdir: Path) -> set[str]:
    """The programs (files under bin/ and sbin/) of a package's .deb."""
    got = subprocess.run(["apt-get", "download", pkg], cwd=workdir, capture_output=True, text=True, timeout=300)
    debs = sorted(workdir.glob(f"{pkg}_*.deb"))
    if got.returncode != 0 or not debs:
        pytest.skip(f"apt-get download {pkg} failed (no package lists or no network): {got.stderr.strip()[-300:]}")
    listing = subprocess.run(["dpkg-deb", "-c", str(debs[0])], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    out = set()
    for line in listing.splitlines():
        path = line.split()[5].removeprefix("./")
        head, _, name = path.rpartition("/")
        if head in BIN_DIRS and name:
            out.add(name)
    return out


def base_package_of(program: str) -> str | None:
    """The Essential or Priority-required package that holds ``program`` on this Debian, if any."""
    for d in BIN_DIRS:
        got = subprocess.run(["dpkg-query", "-S", f"/{d}/{program}"], capture_output=True, text=True, timeout=60)
        if got.returncode == 0:
            pkg = got.stdout.split(":")[0]
            info = subprocess.run(["dpkg-query", "-W", "-f=${Essential} ${Priority}", pkg], capture_output=True,
                                  text=True, timeout=60).stdout.split()
            if info and (info[0] == "yes" or info[-1] == "required"):
                return pkg
    return None


@pytest.fixture(scope="module")
def debian() -> None:
    for tool in ("apt-get", "dpkg-deb", "dpkg-query"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: the package file lists need a Debian machine")


def test_the_dockerfile_parser_reads_the_install_line() -> None:
    text = "RUN apt-get update \\\n && apt-get install -y --no-install-recommends a b \\\n   c \\\n && rm -rf x\n"
    assert dockerfile_packages(text) == ["a", "b", "c"]


@pytest.mark.slow
def test_every_program_the_agent_runs_is_in_the_image(debian: None, tmp_path: Path) -> None:
    pkgs = dockerfile_packages(DOCKERFILE.read_text(encoding="utf-8"))
    assert pkgs, "the Dockerfile installs no package"
    provided: dict[str, str] = {}
    for pkg in pkgs:
        for prog in deb_programs(pkg, tmp_path):
            provided.setdefault(prog, pkg)
    missing = {}
    for prog, who in sorted(programs().items()):
        if prog in provided:
            continue
        base = base_package_of(prog)
        if base is None:
            missing[prog] = who
    assert not missing, f"the image lacks programs the agent runs: {missing} (the Dockerfile installs {pkgs})"


@pytest.mark.slow
def test_ovs_vsctl_comes_from_openvswitch_switch(debian: None, tmp_path: Path) -> None:
    # The check above is only as good as its file lists: bookworm moved ovs-vsctl out of -common.
    assert "ovs-vsctl" in deb_programs("openvswitch-switch", tmp_path)
    assert "ovs-vsctl" not in deb_programs("openvswitch-common", tmp_path)
