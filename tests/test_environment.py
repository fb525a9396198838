"""What the README tells a reader to run is installed by `make install`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("command", ["jupyter-lab", "jupyter-notebook", "jupyter-book", "ruff"])
def test_readme_commands_are_installed(command: str) -> None:
    assert (BIN / command).is_file(), f"{command} is missing from {BIN}: re-run make install"


def test_python_is_one_the_book_supports() -> None:
    assert sys.version_info >= (3, 11), "the pinned NumPy and PyTorch need Python 3.11 or newer"
