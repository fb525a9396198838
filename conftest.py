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

import copy
import functools
import json
import os
from pathlib import Path

import pytest

from tools.prose_numbers import RECORD, Binding, format_record, notebook_bindings

# Kernels started by nbval inherit this: a quiet IPython profile (see its config file).
os.environ.setdefault("IPYTHONDIR", str(Path(__file__).parent / "tests" / "ipython"))


ROOT = Path(__file__).parent
# The notebooks whose re-execution takes longest, handed out first, one to each worker: the GPT
# chapter (its ablation and training, 6 to 12 minutes on one thread of the AMD and the Intel
# test machines) and the modern chapter (its ablation, 3 to 6). Handed out late, the second one
# would start on whichever worker is free and finish minutes after everything else.
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


# --- nbval compares a glued number as the prose shows it -------------------------------------
# A code cell records a number with glue("name", value) at full precision; the prose shows it
# typed, formatted (tools/prose_numbers.py). Comparing the full-precision record would fail on
# any CPU whose rounding path differs in the 15th digit, although nothing a reader sees changed.
# So nbval compares each record as the prose shows it: formatted with every format the prose
# binds it to, or, for a binding with a tolerance, as a number within that tolerance of the
# committed one. A record no prose binds is shown nowhere and is not compared.


@functools.lru_cache(maxsize=32)
def _bindings_of(path: Path) -> dict[str, list[Binding]]:
    found: dict[str, list[Binding]] = {}
    for _, binding in notebook_bindings(json.loads(path.read_text())):
        found.setdefault(binding.name, []).append(binding)
    return found


def _shown(value: str, binds: list[Binding], committed: str | None) -> str:
    """A record as the prose shows it; committed is the committed record, for tolerances."""
    parts = []
    for b in binds:
        if b.tolerance is not None and committed is not None:
            try:
                close = abs(float(value) - float(committed)) <= b.tolerance
            except ValueError:
                close = False
            parts.append(
                f"{b.text} (within {b.tolerance})"
                if close
                else f"{value} (not within {b.tolerance} of {b.text})"
            )
        else:
            parts.append(format_record(value, b.format))
    return " | ".join(parts)


def _as_shown(outputs: list, binds: dict[str, list[Binding]], committed: dict[str, str]) -> list:
    shown = []
    for output in outputs:
        name = output.get("metadata", {}).get("scrapbook", {}).get("name")
        data = output.get("data", {})
        if name and any(key.startswith("application/papermill.record/") for key in data):
            if name not in binds:
                continue  # shown nowhere
            output = copy.deepcopy(output)
            value = data.get(RECORD, "")
            value = "".join(value) if isinstance(value, list) else value
            output["data"] = {RECORD: _shown(value, binds[name], committed.get(name))}
        shown.append(output)
    return shown


def _records_by_name(outputs: list) -> dict[str, str]:
    found = {}
    for output in outputs:
        name = output.get("metadata", {}).get("scrapbook", {}).get("name")
        value = output.get("data", {}).get(RECORD)
        if name and value is not None:
            found[name] = "".join(value) if isinstance(value, list) else value
    return found


def _patch_nbval() -> None:
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:  # nbval is not installed: nothing to patch
        return
    compare = IPyNbCell.compare_outputs
    if getattr(compare, "_compares_as_shown", False):
        return

    def compare_as_shown(self, test, ref, skip_compare=None):
        path = Path(str(self.fspath))
        binds = _bindings_of(path)
        committed = _records_by_name(ref)
        return compare(
            self,
            _as_shown(test, binds, committed),
            _as_shown(ref, binds, committed),
            skip_compare,
        )

    compare_as_shown._compares_as_shown = True
    IPyNbCell.compare_outputs = compare_as_shown


_patch_nbval()
