"""The book builds with warnings as errors, and only from the files in the table of contents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import helpers
from helpers.bench_results import RESULTS_URL
from helpers.export import SHIPPED_URL

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part["chapters"]:
            files += [chapter["file"]] + [s["file"] for s in chapter.get("sections", [])]
    return files


def test_strict_build_has_no_warnings(book_build) -> None:
    assert book_build.returncode == 0, book_build.log[-5000:]
    warnings = [line for line in book_build.log.splitlines() if re.search(r"WARNING|ERROR", line)]
    assert warnings == [], "\n".join(warnings)


def test_every_toc_page_is_built(book_build) -> None:
    for file in toc_files():
        assert (book_build.html_dir / f"{file}.html").is_file(), file


def test_every_notebook_is_in_the_toc() -> None:
    listed = set(toc_files())
    notebooks = {
        str(p.relative_to(ROOT).with_suffix(""))
        for p in (ROOT / "book").rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts  # Jupyter's saved copies of opened notebooks
    }
    assert notebooks - listed == set(), "notebooks missing from _toc.yml"


def test_readme_lists_every_chapter_in_the_toc_order() -> None:
    """The README's chapter table is kept by hand: it names every page of _toc.yml (but the
    introduction and the references), in the same order."""
    table = re.findall(
        r"^\|.*\| `(book/[\w/]+)\.(?:ipynb|md)` \|$", (ROOT / "README.md").read_text(), re.M
    )
    pages = [f for f in toc_files() if f not in ("book/intro", "book/references")]
    assert table == pages, "README.md's chapter table and _toc.yml differ"


def test_offline_mathjax_is_bundled(book_build) -> None:
    assert (book_build.html_dir / "_static" / "mathjax" / "tex-chtml.js").is_file()
    page = (book_build.html_dir / "book" / "intro.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in page
    assert "cdn.jsdelivr.net/npm/mathjax" not in page


def test_citation_names_the_configured_repository() -> None:
    """The repository URL is written once, in _config.yml; CITATION.cff must agree with it."""
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["repository-code"] == REPOSITORY_URL, (
        "CITATION.cff and _config.yml name different URLs"
    )


def test_helpers_download_from_the_configured_repository() -> None:
    """Outside a checkout (Colab), helpers download the shipped model and the benchmark results
    from the repository that _config.yml names."""
    assert helpers.REPOSITORY_URL == REPOSITORY_URL, (
        "helpers/__init__.py and _config.yml name different URLs"
    )
    owner_and_name = REPOSITORY_URL.removeprefix("https://github.com/")
    raw = f"https://raw.githubusercontent.com/{owner_and_name}/main/"
    assert SHIPPED_URL == raw + "book/explorer/gpt_shakespeare.js"
    assert RESULTS_URL == raw + "bench/results.json"
    for bad in ("", "/bench/results.json"):
        with pytest.raises(ValueError):
            helpers.raw_file_url(bad)
