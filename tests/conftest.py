"""Shared fixtures: the repository root and one strict build of the book per test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

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
    """Build the book once, strictly, into a temporary folder (the working tree is untouched).

    Under pytest-xdist each worker has its own session: the first worker that needs the book
    builds it into the run's shared temporary folder, under a file lock, and the others reuse it.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder all workers of this run share
    out = shared / "built-book"
    result = out / "build-result.json"
    with FileLock(str(shared / "built-book.lock")):
        if not result.is_file():
            out.mkdir(exist_ok=True)
            returncode, log = _strict_build(out)
            result.write_text(json.dumps({"returncode": returncode, "log": log}))
        done = json.loads(result.read_text())
    return BookBuild(done["returncode"], done["log"], out / "_build" / "html")


def _strict_build(out: Path) -> tuple[int, str]:
    """Run `jupyter-book build -W -n --keep-going` into OUT; return its exit code and log."""
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
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for the browser tests (tests/test_browser*.py), one per test module (so
    that no two Playwright sessions are open at once)."""
    from browser_support import CHROMIUM, CHROMIUM_ARGS

    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium not found at {CHROMIUM}: install Debian's chromium (make chromium)")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()
