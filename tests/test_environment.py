"""What the README tells a reader to run is installed by `make install`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", ["jupyter-lab", "jupyter-notebook", "jupyter-book", "ruff"])
def test_readme_commands_are_installed(command: str) -> None:
    assert (BIN / command).is_file(), f"{command} is missing from {BIN}: re-run make install"


def test_python_is_one_the_book_supports() -> None:
    assert sys.version_info >= (3, 11), "the pinned NumPy and PyTorch need Python 3.11 or newer"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_passes_allow_root_exactly_for_root() -> None:
    """JupyterLab refuses to start as root without --allow-root (containers, cloud machines)."""
    dry_run = subprocess.run(
        ["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    lab = [line for line in dry_run.splitlines() if "jupyter lab" in line]
    assert lab, f"make -n lab printed no jupyter lab command:\n{dry_run}"
    assert ("--allow-root" in lab[-1]) == (os.getuid() == 0), lab[-1]


def test_ci_workflow_runs_the_readme_commands() -> None:
    """GitHub's CI tests with `make test`, publishes what `make book` builds, and caches .venv
    under a key that changes whenever a pinned version does."""
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]

    def runs(job: str) -> list[str]:
        return [step.get("run", "") for step in jobs[job]["steps"]]

    assert "make test" in runs("test")
    assert "make book" in runs("build-book")
    readme = (ROOT / "README.md").read_text()
    assert "make test " in readme and "make book " in readme
    for job in ("test", "macos", "build-book"):
        keys = [
            step["with"]["key"]
            for step in jobs[job]["steps"]
            if step.get("with", {}).get("path") == ".venv"
        ]
        assert keys and all("constraints.txt" in key for key in keys), job
