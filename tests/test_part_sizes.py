"""Part I stays short: a cap on its cells and on the words of its prose.

Short beats complete. Part I teaches one idea per chapter; a cell that does not earn its place
in the story goes to an exercise, an optional box or the appendix. These caps hold Part I to
what the best short treatments of the same ideas spend (a lecture's notebook, a book chapter),
so that growth is a decision someone makes, not drift.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PART_ONE = sorted((ROOT / "book" / "part1").glob("*.ipynb"))
MAX_CELLS = 380
MAX_WORDS = 15_000  # whitespace-separated tokens of the markdown cells


def size(notebook: Path) -> tuple[int, int]:
    """(cells, words of prose) of one notebook."""
    cells = json.loads(notebook.read_text())["cells"]
    words = sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
    return len(cells), words


def test_part_one_is_found() -> None:
    assert len(PART_ONE) == 6, [p.name for p in PART_ONE]


def test_part_one_stays_within_its_caps() -> None:
    sizes = {p.name: size(p) for p in PART_ONE}
    cells = sum(c for c, _ in sizes.values())
    words = sum(w for _, w in sizes.values())
    report = ", ".join(f"{name}: {c} cells, {w} words" for name, (c, w) in sizes.items())
    assert cells <= MAX_CELLS, f"Part I has {cells} cells (at most {MAX_CELLS}): {report}"
    assert words <= MAX_WORDS, f"Part I has {words} words (at most {MAX_WORDS}): {report}"
