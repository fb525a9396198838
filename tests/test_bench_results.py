"""helpers.bench_results, bench/report.py, and the rule that benchmark numbers are not typed."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from helpers.bench_results import (
    budget_misses,
    find_results,
    load_results,
    mean_sd,
    paired_differences,
    verdict,
)
from tools.prose_numbers import bindings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.json"


def _report():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["report"] = module
    spec.loader.exec_module(module)
    return module


def test_paired_differences_match_seeds_not_positions() -> None:
    a = {"seeds": [1, 2, 3], "test_loss": [1.0, 2.0, 3.0]}
    b = {"seeds": [3, 1], "test_loss": [2.5, 0.5]}  # another order, one seed missing
    assert paired_differences(a, b) == [0.5, 0.5]
    with pytest.raises(ValueError, match="share no seed"):
        paired_differences(a, {"seeds": [9], "test_loss": [1.0]})


def test_mean_sd_uses_the_sample_standard_deviation() -> None:
    m, sd = mean_sd([1.0, 2.0, 3.0])
    assert m == 2.0 and sd == 1.0  # n - 1 in the denominator; the population sd is 0.816
    assert mean_sd([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        mean_sd([])


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([-0.11, -0.10, -0.12], "lower"),
        ([0.03, 0.04, 0.035], "higher"),
        ([-0.05, -0.01, -0.09], "within the spread"),  # same sign, but mean < 2 sd
        ([-0.06, -0.05, 0.001], "within the spread"),  # mean > 2 sd would need every seed
        ([-0.2, -0.2], "too few seeds"),
    ],
)
def test_verdict_needs_every_seed_and_twice_the_spread(diffs: list[float], expected: str) -> None:
    assert verdict(diffs) == expected


def test_the_results_file_is_found_from_a_subfolder(tmp_path: Path) -> None:
    assert find_results(ROOT / "book" / "part3") == RESULTS
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "results.json").write_text('{"schema": 1, "runs": {}}')
    assert find_results(tmp_path / "deeper" / "still") == tmp_path / "bench" / "results.json"
    assert load_results(tmp_path / "bench" / "results.json") == {"schema": 1, "runs": {}}
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a benchmark results file"):
        load_results(tmp_path / "bad.json")


def test_readme_tables_are_generated_from_the_results_file() -> None:
    report = _report()
    assert report.main(["--check"]) == 0


def test_a_changed_number_makes_the_readme_check_fail(tmp_path: Path) -> None:
    report = _report()
    runs = json.loads(RESULTS.read_text())["runs"]
    readme = (ROOT / "bench" / "README.md").read_text()
    assert report.render(readme, runs) == readme
    runs["ablation"]["recipes"]["rope"]["test_loss"][0] += 0.01
    assert report.render(readme, runs) != readme


def _typed_numbers(text: str) -> set[str]:
    return set(re.findall(r"(?<![\d.])\d+\.\d{3,4}(?!\d)", text))


def _result_numbers(runs: dict) -> set[str]:
    """Every loss the results file holds, and every mean, as 3- and 4-decimal strings."""
    numbers: set[str] = set()
    for run in runs.values():
        for rec in run["recipes"].values():
            for field in ("val_loss", "test_loss"):
                values = rec[field]
                for v in [*values, mean_sd(values)[0]]:
                    numbers |= {f"{v:.3f}", f"{v:.4f}"}
    return numbers


def _prose(path: Path) -> str:
    """The prose of a chapter or README, less the numbers bound to a cell that computes them
    (tools/prose_numbers.py: a test checks those against the cell's value)."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        texts = []
        for cell in cells:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                for binding in bindings(cell):
                    text = text.replace(binding.text, " ")
                texts.append(text)
        return "\n".join(texts)
    # The README's generated tables are the file's own; its earlier measurements (at the end,
    # one seed, kept in the README only) are other runs, whose numbers may coincide.
    text = path.read_text().split("## Earlier measurements")[0]
    return re.sub(r"<!-- results:(\w+) -->.*?<!-- /results:\1 -->", "", text, flags=re.DOTALL)


@pytest.mark.parametrize(
    "path",
    ["book/part2/gpt.ipynb", "book/part3/modern.ipynb", "bench/README.md"],
)
def test_no_prose_copy_of_a_benchmark_number(path: str) -> None:
    runs = json.loads(RESULTS.read_text())["runs"]
    copies = _typed_numbers(_prose(ROOT / path)) & _result_numbers(runs)
    assert not copies, f"{path} types numbers that bench/results.json holds: {sorted(copies)}"


def _run(seconds: dict[str, list[float]], budget: float = 60.0, tolerance: float = 0.05) -> dict:
    recipes = {name: {"seeds": [1337, 1, 2], "seconds": s} for name, s in seconds.items()}
    return {"budget_seconds": budget, "tolerance": tolerance, "recipes": recipes}


def test_budget_misses_names_every_run_beyond_the_tolerance() -> None:
    run = _run({"nanoGPT": [60.0, 63.0, 57.0], "book": [63.1, 60.0, 56.9]})
    assert budget_misses(run) == ["book seed 1337: 63.1 s", "book seed 2: 56.9 s"]
    assert budget_misses(_run({"nanoGPT": [80.5, 60.0, 60.0]})) == ["nanoGPT seed 1337: 80.5 s"]
    assert budget_misses(_run({"book": [80.5, 60.0, 60.0]}, tolerance=0.5)) == []
    with pytest.raises(ValueError, match="positive 'budget_seconds'"):
        budget_misses(_run({"book": [60.0] * 3}, budget=0.0))
    with pytest.raises(ValueError, match="'tolerance'"):
        budget_misses({"budget_seconds": 60.0, "recipes": {}})


def test_every_committed_wall_clock_run_is_within_its_budget() -> None:
    runs = json.loads(RESULTS.read_text())["runs"]
    budgeted = {label: run for label, run in runs.items() if "budget_seconds" in run}
    assert {"wallclock", "wallclock_60s"} <= set(budgeted)
    assert budgeted["wallclock"]["budget_seconds"] == 180.0  # the chapters' headline
    assert budgeted["wallclock_60s"]["budget_seconds"] == 60.0
    for label, run in budgeted.items():
        assert run["tolerance"] <= 0.05, label
        assert budget_misses(run) == [], label
        # the machine's speed is part of the result: its CPU and matrix-product peak are stored
        assert run["machine"]["cpu"] and run["machine"]["matmul_peak_gflops"] > 0, label
        for name, rec in run["recipes"].items():
            assert len(rec["train_flops"]) == len(rec["seeds"]), f"{label}/{name}"


def test_the_books_recipes_trained_as_long_as_nanogpt_in_each_seed() -> None:
    """Chapters 8 and 10 say the budgets were equal: in every seed each of the book's recipes
    trained for the seconds nanoGPT's code trained in that seed, within 1%."""
    runs = json.loads(RESULTS.read_text())["runs"]
    for label in ("wallclock", "wallclock_60s"):
        recipes = runs[label]["recipes"]
        nano = recipes["nanoGPT"]
        assert len(recipes) > 1, label
        for name, rec in recipes.items():
            assert rec["seeds"] == nano["seeds"], f"{label}/{name}"
            for seconds, nano_seconds in zip(rec["seconds"], nano["seconds"], strict=True):
                assert abs(seconds - nano_seconds) < 0.01 * nano_seconds, f"{label}/{name}"
