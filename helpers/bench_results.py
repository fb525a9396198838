"""The benchmark's results file, ``bench/results.json``, as the chapters and the README read it.

Defined for chapters 8 and 10 ("Building and training a GPT", "From GPT-2 to a modern transformer"),
which quote the benchmark's numbers from this file instead of typing them; ``bench/report.py``
writes the README's tables from it with the same functions. The file's layout is checked by
``bench/train_gpt.py``'s ``validate_results``.

A comparison of two recipes is made seed by seed (the same seed gives both the same batches), and
a difference counts as a result only where it exceeds the spread (:func:`verdict`). A run with a
wall-clock budget (``bench/wallclock.py``'s) holds each contender's measured training seconds;
:func:`budget_misses` lists the runs that missed the budget by more than its tolerance.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from pathlib import Path

from helpers import raw_file_url

RESULTS_URL = raw_file_url("bench/results.json")


def find_results(start: str | Path | None = None) -> Path | None:
    """``bench/results.json`` of the repository that holds ``start`` (default: the working
    directory) or this package; ``None`` if neither is inside a checkout."""
    places = [Path(start) if start is not None else Path.cwd(), Path(__file__).resolve().parent]
    for place in places:
        for folder in [place.resolve(), *place.resolve().parents]:
            candidate = folder / "bench" / "results.json"
            if candidate.is_file():
                return candidate
    return None


def load_results(path: str | Path | None = None) -> dict:
    """The results file as a dict (``{"schema": 1, "runs": {label: ...}}``).

    With no ``path``, the checkout's file (:func:`find_results`); outside a checkout (the
    helpers installed from PyPI or git, as on Colab), the copy on the repository's main branch.

    Raises:
        FileNotFoundError: if ``path`` does not exist, or there is no checkout and no network.
        ValueError: if the file is not a results file.
    """
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
    elif (found := find_results()) is not None:
        text = found.read_text(encoding="utf-8")
    else:
        try:
            with urllib.request.urlopen(RESULTS_URL, timeout=20) as response:
                text = response.read().decode("utf-8")
        except OSError as err:
            raise FileNotFoundError(
                f"no bench/results.json in a checkout here, and {RESULTS_URL} is unreachable "
                f"({err}); clone the repository or pass path="
            ) from err
    results = json.loads(text)
    if not isinstance(results, dict) or not isinstance(results.get("runs"), dict):
        raise ValueError("not a benchmark results file: expected {'schema': ..., 'runs': {...}}")
    return results


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value).

    Raises:
        ValueError: for no values.
    """
    if not values:
        raise ValueError("mean_sd needs at least one value")
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def paired_differences(a: dict, b: dict, field: str = "test_loss") -> list[float]:
    """``a[field] - b[field]`` seed by seed, for the seeds both recipe records ran.

    Raises:
        ValueError: if the records share no seed.
    """
    by_seed = dict(zip(b["seeds"], b[field], strict=True))
    diffs = [x - by_seed[s] for s, x in zip(a["seeds"], a[field], strict=True) if s in by_seed]
    if not diffs:
        raise ValueError("the two recipes share no seed")
    return diffs


def verdict(diffs: list[float]) -> str:
    """``"lower"`` or ``"higher"`` where a paired difference is a result, else ``"within the
    spread"`` (or ``"too few seeds"`` below three): every seed on the same side, and the mean
    more than twice the standard deviation of the differences."""
    if len(diffs) < 3:
        return "too few seeds"
    m, sd = mean_sd(diffs)
    if abs(m) > 2 * sd and (max(diffs) < 0 or min(diffs) > 0):
        return "lower" if m < 0 else "higher"
    return "within the spread"


def budget_misses(run: dict) -> list[str]:
    """The runs of a wall-clock comparison whose training seconds miss its budget by more than its
    tolerance, as ``"name seed S: T s"`` lines (none: every run within the budget).

    ``run`` is one labelled run of the results file with ``"budget_seconds"`` (the budget) and
    ``"tolerance"`` (the largest allowed miss, a fraction of the budget, e.g. 0.05).

    Raises:
        ValueError: if ``run`` has no positive budget or no tolerance between 0 and 1.
    """
    budget, tolerance = run.get("budget_seconds"), run.get("tolerance")
    if not isinstance(budget, (int, float)) or budget <= 0:
        raise ValueError(f"a budgeted run needs a positive 'budget_seconds', got {budget!r}")
    if not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"a budgeted run needs a 'tolerance' in [0, 1), got {tolerance!r}")
    return [
        f"{name} seed {seed}: {seconds:.1f} s"
        for name, rec in run["recipes"].items()
        for seed, seconds in zip(rec["seeds"], rec["seconds"], strict=True)
        if abs(seconds - budget) > tolerance * budget
    ]
