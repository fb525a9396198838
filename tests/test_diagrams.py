"""Every diagram in book/figures/ is exactly what the code in diagrams/ draws."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagrams import DIAGRAMS, write_all

FIGURES = Path(__file__).resolve().parents[1] / "book" / "figures"


@pytest.fixture(scope="module")
def redrawn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("figures")
    write_all(out)
    return out


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_committed_diagram_matches_its_source(name: str, redrawn: Path) -> None:
    committed = FIGURES / f"{name}.svg"
    assert committed.is_file(), f"{committed} is missing: run make diagrams and commit it"
    assert committed.read_bytes() == (redrawn / f"{name}.svg").read_bytes(), (
        f"{committed.name} differs from what diagrams/ draws: run make diagrams and commit it"
    )


def test_every_svg_in_figures_has_a_source() -> None:
    orphans = {p.stem for p in FIGURES.glob("*.svg")} - set(DIAGRAMS)
    assert orphans == set(), f"SVG files with no source in diagrams/: {sorted(orphans)}"
