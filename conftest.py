"""Markers from where a test lives, so that `pytest -m unit` (or book, notebooks) picks a layer.

- book: the strict book build and the headless-browser checks of the built pages
  (tests/test_build*.py, tests/test_browser*.py), and JupyterLab rendering a chapter
  (tests/test_jupyterlab*.py);
- notebooks: checks of the committed notebooks (tests/test_notebooks.py) and nbval's
  re-execution of every notebook under book/;
- unit: everything else (the helpers' tests).

Under pytest-xdist (`make test` runs `-n JOBS --dist loadfile --no-loadscope-reorder`), a worker
runs a whole file (a notebook's cells share one kernel), and files are handed out in the order
set here: the GPT and modern chapters first (their long trainings keep two workers busy), then
the tests of the built book (the worker that gets them builds the book once; see
tests/conftest.py), then the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Kernels started by nbval inherit this: a quiet IPython profile (see its config file).
os.environ.setdefault("IPYTHONDIR", str(Path(__file__).parent / "tests" / "ipython"))


ROOT = Path(__file__).parent
# The notebooks whose re-execution takes longest, handed out first, one to each worker: the GPT
# chapter (its training, about 7 minutes on one thread) and the modern chapter (its ablation,
# about 4). Handed out late, the second one would start on whichever worker is free and
# finish minutes after everything else.
LONGEST_FIRST = (ROOT / "book" / "part2" / "gpt.ipynb", ROOT / "book" / "part3" / "modern.ipynb")
BUILT_BOOK_FILES = ("test_build", "test_browser")  # file-name prefixes


def schedule_rank(item: pytest.Item) -> int:
    """Where a test's file goes in the order pytest-xdist hands files to its workers."""
    path = Path(str(item.fspath))
    return 0 if path in LONGEST_FIRST else 1 if path.name.startswith(BUILT_BOOK_FILES) else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix == ".ipynb" or path.name.startswith("test_notebooks"):
            item.add_marker(pytest.mark.notebooks)
        elif path.name.startswith(("test_build", "test_browser", "test_jupyterlab")):
            item.add_marker(pytest.mark.book)
        else:
            item.add_marker(pytest.mark.unit)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=schedule_rank)  # stable: each file keeps its own order
