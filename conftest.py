"""Markers from where a test lives, so that `pytest -m unit` (or book, notebooks) picks a layer.

- book: the strict book build and the headless-browser checks of the built pages
  (tests/test_build*.py, tests/test_browser*.py);
- notebooks: checks of the committed notebooks (tests/test_notebooks.py) and nbval's
  re-execution of every notebook under book/;
- unit: everything else (the helpers' tests).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Kernels started by nbval inherit this: a quiet IPython profile (see its config file).
os.environ.setdefault("IPYTHONDIR", str(Path(__file__).parent / "tests" / "ipython"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix == ".ipynb" or path.name.startswith("test_notebooks"):
            item.add_marker(pytest.mark.notebooks)
        elif path.name.startswith(("test_build", "test_browser")):
            item.add_marker(pytest.mark.book)
        else:
            item.add_marker(pytest.mark.unit)
