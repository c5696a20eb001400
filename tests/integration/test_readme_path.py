"""The README's set-up and test commands, verbatim, in a fresh copy of the project that has nothing
beside it (no kernel lab script): a new venv, ``pip install .``, ``railscope doctor`` on this machine, then the
test command. The commands are read out of README.md (``scripts/readme_commands.py``), never copied.

The test command would run the whole suite inside this test, so it runs verbatim with
``PYTEST_ADDOPTS`` naming a few quick test files: what it proves is that the extra installs, that
collection does not abort and that tests pass from a copy anywhere. ``.ci/run`` runs the same command
on the whole suite. Slow (two installs into an empty venv) and needs the package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import script

ROOT = Path(__file__).resolve().parents[2]
readme_commands = script("scripts/readme_commands.py")

pytestmark = pytest.mark.slow


def _copy_project(dest: Path) -> None:
    """The files a clone has (tracked, plus new ones not ignored), symlinks kept as symlinks."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = ROOT / rel, dest / rel
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the work tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)


def _sh(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_readme_commands_work_verbatim_in_a_fresh_venv(tmp_path: Path) -> None:
    if not shutil.which("git"):
        pytest.skip("git is needed to list the project's files")
    project = tmp_path / "clone" / "railscope"
    _copy_project(project)
    assert not (project.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAILSCOPE_", "PYTHON", "VIRTUAL_ENV"))}
    blocks = readme_commands.blocks((project / "README.md").read_text(encoding="utf-8"))
    install, doctor = readme_commands.commands(blocks["install"])

    done = _sh(install, project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (project / ".venv" / "bin" / "railscope").exists()
    ran = _sh(doctor, project, env, timeout=300)
    # 0-2: a diagnosis (findings or none); 3 would be bad usage. It says plainly when there is no NIC.
    assert ran.returncode in (0, 1, 2), ran.stderr
    assert "RAIL " in ran.stdout or "no ConnectX NIC found" in ran.stdout

    (test_cmd,) = readme_commands.commands(blocks["test"])
    quick = "tests/unit/test_readme.py tests/unit/commands/test_doctor_cli.py tests/unit/test_images.py"
    ran = _sh(test_cmd, project, {**env, "PYTEST_ADDOPTS": f"-q -p no:cacheprovider {quick}"})
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout and "skipped" not in ran.stdout.splitlines()[-1], ran.stdout[-2000:]
