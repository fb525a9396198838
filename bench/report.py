"""Write the result tables of ``bench/README.md`` from ``bench/results.json``.

The README's numbers are not typed: each table sits between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->`` and is generated here from the results file, the same file the book's
chapters read. ``--check`` only compares (``tests/test_bench.py`` runs it), so a table that
disagrees with the results file fails the tests.

    .venv/bin/python bench/report.py          # rewrite the tables in bench/README.md
    .venv/bin/python bench/report.py --check  # exit 1 if a table differs from the file
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.bench_results import (  # noqa: E402
    budget_misses,
    mean_sd,
    paired_differences,
    verdict,
)

RESULTS = ROOT / "bench" / "results.json"
README = ROOT / "bench" / "README.md"


def mean(values: list[float]) -> float:
    return mean_sd(values)[0]


def span(values: list[float], spec: str) -> str:
    """``"low–high"`` over the seeds (one value alone)."""
    low, high = format(min(values), spec), format(max(values), spec)
    return low if low == high else f"{low}–{high}"


def pm(values: list[float], digits: int = 3, sign: str = "") -> str:
    """``"m ± s"`` (sample standard deviation); the value alone for one seed. ``sign="+"``
    prints the sign of a difference."""
    m, sd = mean_sd(values)
    mean_text = f"{m:{sign}.{digits}f}"
    return mean_text if len(values) == 1 else f"{mean_text} ± {sd:.{digits}f}"


def machine_line(run: dict) -> str:
    """The CPU, threads, torch, nanoGPT commit and matrix-product peak of a wall-clock run."""
    m = run["machine"]
    peak = f"{m['matmul_peak_gflops']:.0f}"
    if "matmul_peak_gflops_after" in m:
        peak += f" GFLOP/s before the runs and {m['matmul_peak_gflops_after']:.0f} after"
    else:
        peak += " GFLOP/s"
    return (
        f"{m['cpu']}, {m['cpus']} cores, {m['threads']} thread{'s' * (m['threads'] != 1)} per "
        f"run, torch {m['torch']}, "
        f"nanoGPT at commit `{m['nanogpt_commit']}`; float32 matrix-product peak {peak}"
    )


def wallclock_runs(runs: dict) -> list[dict]:
    """The wall-clock runs of nanoGPT against the book's recipes, shortest budget first."""
    found = [
        run
        for run in runs.values()
        if "budget_seconds" in run and "nanoGPT" in run["recipes"] and "tolerance" in run
    ]
    return sorted(found, key=lambda run: run["budget_seconds"])


def wallclock_table(runs: dict) -> str:
    run = runs["wallclock"]
    recs = run["recipes"]
    rows = [
        "| contender | steps | trained (s) | tokens/s | MFU | test loss | vs nanoGPT, per seed "
        "| val loss |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, rec in recs.items():
        vs = "" if name == "nanoGPT" else pm(paired_differences(rec, recs["nanoGPT"]), sign="+")
        rows.append(
            f"| `{name}` | {span(rec['steps'], ',.0f')} | {span(rec['seconds'], '.1f')} | "
            f"{rec['tokens_per_s']:,.0f} | {100 * rec['mfu']:.0f}% | "
            f"{pm(rec['test_loss'])} | {vs} | {pm(rec['val_loss'])} |"
        )
    if budget_misses(run):
        raise ValueError(f"the headline misses its budget: {budget_misses(run)}")
    rows += [
        "",
        f"Budget {run['budget_seconds']:.0f} s; seeds "
        f"{', '.join(map(str, recs['nanoGPT']['seeds']))}; mean ± sd over seeds; "
        f"{machine_line(run)}. Steps and training seconds: lowest to highest over the seeds "
        f"(every run within {100 * run['tolerance']:.0f}% of the budget); tokens/s: all steps "
        "over all training seconds.",
    ]
    return "\n".join(rows)


def budgets_table(runs: dict) -> str:
    """Every wall-clock budget: steps, model FLOPs, seconds and test loss of each contender.

    Raises:
        ValueError: if the results hold no wall-clock run with a budget.
    """
    if not wallclock_runs(runs):
        raise ValueError("results.json has no wall-clock run with a budget and a tolerance")
    rows = [
        "| budget | contender | steps | model FLOPs (T) | trained (s) | of which on the CPU "
        "| test loss | vs nanoGPT, per seed | verdict | vs `book`, paired | verdict |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    notes = []
    for run in wallclock_runs(runs):
        budget = f"{run['budget_seconds']:.0f} s"
        recs = run["recipes"]
        for name, rec in recs.items():
            vs = say = vs_book = say_book = ""
            if name != "nanoGPT":
                diffs = paired_differences(rec, recs["nanoGPT"])
                vs, say = pm(diffs, sign="+"), verdict(diffs)
            if name not in ("nanoGPT", "book") and "book" in recs:
                diffs = paired_differences(rec, recs["book"])
                vs_book, say_book = pm(diffs, sign="+"), verdict(diffs)
            flops = [f / 1e12 for f in rec["train_flops"]]
            cpu_share = [c / w for c, w in zip(rec["cpu_seconds"], rec["seconds"], strict=True)]
            rows.append(
                f"| {budget} | `{name}` | {span(rec['steps'], ',.0f')} | {span(flops, '.1f')} | "
                f"{span(rec['seconds'], '.1f')} | {span(cpu_share, '.0%')} | "
                f"{pm(rec['test_loss'])} | {vs} | {say} | {vs_book} | {say_book} |"
            )
        peak = run["machine"]["matmul_peak_gflops"]
        seeds = ", ".join(map(str, recs["nanoGPT"]["seeds"]))
        redone = sorted({seed for rerun in run.get("reruns", []) for seed in rerun["seeds"]})
        again = f" (seed {', '.join(map(str, redone))} run again)" if redone else ""
        notes.append(
            f"{budget}: seeds {seeds}{again}; {machine_line(run)}; the budget times that peak: "
            f"{run['budget_seconds'] * peak / 1e3:,.1f} TFLOP."
        )
    rows += [
        "",
        "Mean ± sd over seeds; ranges lowest to highest. Of which on the CPU: CPU seconds over "
        "training seconds (nanoGPT's CPU seconds are its whole process's, start-up and "
        "evaluation included). " + " ".join(notes),
    ]
    return "\n".join(rows)


def ablation_table(runs: dict) -> str:
    run = runs["ablation"]
    recs = run["recipes"]
    ms = run["calibration"]["ms_per_step"]
    rows = [
        "| variant | CPU ms per step | steps | test loss | vs `book` (paired) | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in ("book", "rope", "rmsnorm", "qknorm", "relu2", "swiglu", "muon", "modern"):
        rec = recs[name]
        diffs = paired_differences(rec, recs["book"])
        vs, say = ("", "") if name == "book" else (pm(diffs, sign="+"), verdict(diffs))
        rows.append(
            f"| `{name}` | {ms[name]:.1f} | {rec['steps'][0]:,} | {pm(rec['test_loss'])} | "
            f"{vs} | {say} |"
        )
    m, c = run["machine"], run["calibration"]["machine"]
    rows += [
        "",
        f"Seeds {', '.join(map(str, recs['book']['seeds']))}. CPU ms per step: "
        f"`{c['cpu']}`, one thread, CPU clock, torch {c['torch']}. Training: {m['cpu']}, "
        f"{m['jobs']} runs at a time with one thread each, torch {m['torch']}.",
    ]
    return "\n".join(rows)


def search_table(runs: dict) -> str:
    recs = runs["search"]["recipes"]
    rows = [
        "| variant | seeds | steps | val loss (tuning) | test loss |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    order = sorted(recs, key=lambda n: (-len(recs[n]["seeds"]), mean(recs[n]["val_loss"])))
    for name in order:
        rec = recs[name]
        rows.append(
            f"| {rec['describe']} | {len(rec['seeds'])} | {rec['steps'][0]:,} | "
            f"{pm(rec['val_loss'])} | {pm(rec['test_loss'])} |"
        )
    m = runs["search"]["machine"]
    rows += [
        "",
        f"Sorted by the number of seeds, then by validation loss. Training: {m['cpu']}, one "
        f"thread per run, torch {m['torch']}.",
    ]
    return "\n".join(rows)


def lr_vs_width_table(runs: dict) -> str:
    run = runs["lr_vs_width"]
    recs = run["recipes"]
    diffs = paired_differences(recs["book_c128"], recs["reference"])
    rows = [
        "| recipe | width | learning rate | steps | test loss | vs `reference` (paired) |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
        f"| `reference` | 128 | 1e-3 → 1e-4 | {recs['reference']['steps'][0]:,} | "
        f"{pm(recs['reference']['test_loss'])} | |",
        f"| `book_c128` | 128 | 5e-3 → 5e-5 | {recs['book_c128']['steps'][0]:,} | "
        f"{pm(recs['book_c128']['test_loss'])} | {pm(diffs, sign='+')} ({verdict(diffs)}) |",
    ]
    m = run["machine"]
    rows += [
        "",
        f"Seeds {', '.join(map(str, recs['reference']['seeds']))}; {m['cpu']}, "
        f"{m['jobs']} runs at a time with {m['threads']} threads each, torch {m['torch']}.",
    ]
    return "\n".join(rows)


def gpu_table(runs: dict) -> str:
    run = runs["gpu"]
    rec = run["recipes"]["gpu"]
    m = run["machine"]
    return "\n".join(
        [
            "| steps | trained (s) | tokens/s | MFU (bf16) | val loss | test loss |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {rec['steps'][0]:,} | {rec['seconds'][0]:.0f} | {rec['tokens_per_s']:,.0f} | "
            f"{100 * rec['mfu']:.1f}% | {rec['val_loss'][0]:.3f} | {rec['test_loss'][0]:.3f} |",
            "",
            f"One seed; {m['gpu']}, torch {m['torch']}, bf16 autocast, no `torch.compile`; "
            f"MFU against a measured bf16 matrix-product peak of "
            f"{m['matmul_peak_gflops'] / 1e3:.0f} TFLOP/s.",
        ]
    )


TABLES: dict[str, Callable[[dict], str]] = {
    "wallclock": wallclock_table,
    "budgets": budgets_table,
    "ablation": ablation_table,
    "lr_vs_width": lr_vs_width_table,
    "search": search_table,
    "gpu": gpu_table,
}


COMBINED = {"budgets"}  # tables drawn from several labelled runs, not one


def render(readme: str, runs: dict) -> str:
    """``readme`` with every ``<!-- results:NAME -->`` block regenerated from ``runs``.

    Raises:
        ValueError: if the README lacks a block or the results lack a label.
    """
    for name, table in TABLES.items():
        pattern = re.compile(
            rf"(<!-- results:{name} -->\n).*?(<!-- /results:{name} -->)", re.DOTALL
        )
        if not pattern.search(readme):
            raise ValueError(f"README has no <!-- results:{name} --> block")
        if name not in runs and name not in COMBINED:
            raise ValueError(f"results.json has no run labelled {name!r}")
        text = table(runs) + "\n"
        readme = pattern.sub(lambda m, text=text: m[1] + text + m[2], readme)
    return readme


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = p.parse_args(argv)
    runs = json.loads(RESULTS.read_text(encoding="utf-8"))["runs"]
    old = README.read_text(encoding="utf-8")
    new = render(old, runs)
    if args.check:
        if new != old:
            print("bench/README.md's tables differ from bench/results.json: run bench/report.py")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
