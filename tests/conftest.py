"""Shared fixtures: the repository root and one strict build of the book per test session."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder."""
    return ROOT


@dataclass(frozen=True)
class BookBuild:
    returncode: int
    log: str
    html_dir: Path


@pytest.fixture(scope="session")
def book_build(tmp_path_factory: pytest.TempPathFactory) -> BookBuild:
    """Build the book once, strictly, into a temporary folder (the working tree is untouched)."""
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run(
        [
            str(jupyter_book),
            "build",
            str(ROOT),
            "-W",
            "-n",
            "--keep-going",
            "--path-output",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return BookBuild(proc.returncode, proc.stdout + proc.stderr, out / "_build" / "html")
