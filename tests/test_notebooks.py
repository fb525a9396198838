"""Committed notebooks are executed top to bottom, and runnable in a fresh Colab/Binder session.

nbval passes a notebook whose outputs were cleared (there is nothing to compare), so these checks
make sure what nbval compares is really there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Jupyter saves checkpoints of opened notebooks in .ipynb_checkpoints/ (ignored by git).
NOTEBOOKS = sorted(
    p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def code_cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks found under book/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed_in_order(path: Path) -> None:
    cells = code_cells(path)
    counts = [c["execution_count"] for c in cells]
    assert None not in counts, f"{path.name}: {counts.count(None)} code cell(s) never executed"
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: not run top to bottom in one go"
    assert any(c["outputs"] for c in cells), f"{path.name}: no stored outputs at all"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_installs_helpers_when_missing(path: Path) -> None:
    first = "".join(code_cells(path)[0]["source"])
    assert "import helpers.attention" in first and "except ImportError" in first
    assert f"git+{REPOSITORY_URL}" in first, "install URL must match repository.url in _config.yml"
    assert code_cells(path)[0]["outputs"] == [], (
        "the install cell must be silent when helpers is present"
    )


# Characters per code line. The narrowest code boxes of the HTML book at a 1024 px window (folded
# and boxed cells) hold 713 px of text: 99 characters of Liberation Mono at 12 px (7.20 px each)
# fill it exactly, and Menlo or DejaVu Sans Mono (7.22 px) scroll 2 px. 98 leaves 5 px to spare.
MAX_LINE = 98


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_page(path: Path) -> None:
    long_lines = [
        f"cell {n}: {len(line)} chars: {line[:60]}..."
        for n, cell in enumerate(json.loads(path.read_text())["cells"])
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if len(line) > MAX_LINE
    ]
    assert long_lines == [], f"{path.name}: code lines over {MAX_LINE} characters:\n" + "\n".join(
        long_lines
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_names_its_kernel(path: Path) -> None:
    """Without a kernelspec, Jupyter asks the reader which kernel to use."""
    kernelspec = json.loads(path.read_text())["metadata"].get("kernelspec", {})
    assert kernelspec.get("name") == "python3", f"{path.name}: kernelspec {kernelspec}"


SOLUTIONS_HEADING = re.compile(r"(\([\w-]+\)=\n)?## Solutions")  # a MyST label may come first


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solutions_are_folded_in_jupyter(path: Path) -> None:
    """In JupyterLab a reader meets the exercises first: the solutions follow them under a
    `## Solutions` heading of its own, which JupyterLab folds down to the next heading of its
    level or above (so none follows), and the code of every solution is hidden (the HTML book
    puts each solution in a closed dropdown)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    markdown = [n for n, c in enumerate(cells) if c["cell_type"] == "markdown"]
    exercises = [n for n in markdown if re.search(r"\{exercise(-start)?\}", sources[n])]
    if not exercises:
        return
    headings = [n for n in markdown if "## Solutions" in sources[n]]
    assert len(headings) == 1, f"{path.name}: {len(headings)} cells with a Solutions heading"
    (heading,) = headings
    assert SOLUTIONS_HEADING.fullmatch(sources[heading].strip()), (
        f"{path.name}: cell {heading} holds more than the Solutions heading"
    )
    assert cells[heading]["metadata"].get("jp-MarkdownHeadingCollapsed") is True, (
        f"{path.name}: the Solutions heading is not folded"
    )
    assert heading > exercises[-1], f"{path.name}: an exercise after the solutions"
    starts = [n for n in markdown if "{solution-start}" in sources[n]]
    assert starts and min(starts) > heading, f"{path.name}: a solution before the Solutions heading"
    after = [n for n in markdown if n > heading and re.search(r"^#{1,2} ", sources[n], re.M)]
    assert after == [], f"{path.name}: headings after the Solutions end the fold: cells {after}"
    inside, shown = False, []
    for n, (cell, source) in enumerate(zip(cells, sources, strict=True)):
        if cell["cell_type"] == "markdown":
            # a cell may end one solution and start the next
            for directive in re.findall(r"\{solution-(start|end)\}", source):
                inside = directive == "start"
        elif inside and not cell["metadata"].get("jupyter", {}).get("source_hidden"):
            shown.append(n)
    assert shown == [], f"{path.name}: solution code cells not hidden: {shown}"
