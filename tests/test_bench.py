"""bench/train_gpt.py: the results file's layout, the held-out splits, and one tiny run."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("train_gpt", ROOT / "bench" / "train_gpt.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["train_gpt"] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)

RECIPE = {
    "describe": "L4 H4 C64 T64 B12 learned/layernorm/gelu lr 0.005->5e-05",
    "params": 201344,
    "tokens_per_s": 28000.0,
    "mfu": 0.44,
    "seeds": [1337, 1, 2],
    "steps": [10, 10, 10],
    "val_loss": [1.6, 1.61, 1.62],
    "test_loss": [1.63, 1.64, 1.65],
    "seconds": [1.0, 1.1, 1.2],
    "cpu_seconds": [1.0, 1.0, 1.0],
}
GOOD = {
    "schema": 1,
    "runs": {"all": {"command": "bench/train_gpt.py", "machine": {}, "recipes": {"book": RECIPE}}},
}


def test_a_well_formed_file_passes() -> None:
    bench.validate_results(GOOD)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.update(schema=2), "schema 1"),
        (lambda r: r["runs"].clear(), "non-empty dict of labelled runs"),
        (lambda r: r["runs"]["all"].pop("command"), "needs a 'command' string"),
        (lambda r: r["runs"]["all"]["recipes"]["book"]["test_loss"].pop(), "one per seed"),
        (lambda r: r["runs"]["all"]["recipes"]["book"].update(seeds=[]), "at least one seed"),
        (
            lambda r: r["runs"]["all"]["recipes"]["book"]["val_loss"].__setitem__(0, float("nan")),
            "finite numbers",
        ),
        (lambda r: r["runs"]["all"]["recipes"]["book"].update(mfu=0), "positive number"),
        (lambda r: r["runs"]["all"]["recipes"]["book"].update(params="201k"), "must be a int"),
        (lambda r: r["runs"]["all"]["recipes"]["book"].update(seeds=[1, 1, 2]), "distinct"),
        (lambda r: r["runs"]["all"]["recipes"]["book"].update(steps=[10, 10.5, 10]), "steps"),
    ],
)
def test_a_malformed_file_is_refused(edit, message: str) -> None:  # noqa: ANN001
    results = copy.deepcopy(GOOD)
    edit(results)
    with pytest.raises(ValueError, match=message):
        bench.validate_results(results)


def test_write_results_keeps_other_labels(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    bench.write_results(str(path), "all", GOOD["runs"]["all"])
    bench.write_results(str(path), "ablation", GOOD["runs"]["all"])
    stored = json.loads(path.read_text())
    assert sorted(stored["runs"]) == ["ablation", "all"]
    bench.validate_results(stored)


def test_test_split_is_held_out_from_training_and_validation() -> None:
    data = torch.arange(1000)
    train, val, test = bench.split_text(data)
    assert torch.equal(torch.cat([train, val, test]), data)  # contiguous, in order, all of it
    assert len(train) == 900 and len(val) == len(test) == 50
    assert test.min() > val.max() > train.max()  # the test text comes last, after validation


def test_committed_results_file_is_well_formed() -> None:
    path = ROOT / "bench" / "results.json"
    if not path.exists():
        pytest.skip("no benchmark results committed yet")
    bench.validate_results(json.loads(path.read_text()))


def test_curves_and_calibration_are_checked_where_present() -> None:
    results = copy.deepcopy(GOOD)
    run = results["runs"]["all"]
    run["recipes"]["book"]["curves"] = [[[10, 1.0, 2.5], [20, 2.0, 2.2]]] * 3
    run["calibration"] = {"command": "c", "machine": {}, "ms_per_step": {"book": 21.4}}
    bench.validate_results(results)  # well formed
    run["recipes"]["book"]["curves"][1] = [[20, 2.0, 2.2], [10, 1.0, 2.5]]  # time runs backwards
    with pytest.raises(ValueError, match="must increase"):
        bench.validate_results(results)
    run["recipes"]["book"]["curves"] = [[[10, 1.0, 2.5]]] * 2  # two curves for three seeds
    with pytest.raises(ValueError, match="one per seed"):
        bench.validate_results(results)
    run["recipes"]["book"].pop("curves")
    run["calibration"]["ms_per_step"] = {"modern": 30.0}  # not the run's recipes
    with pytest.raises(ValueError, match="ms_per_step per recipe"):
        bench.validate_results(results)


def test_train_for_seconds_stops_at_the_budget_and_decays_the_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake clock, 10 ms later at every reading: the test does not depend on the machine's speed.
    clock = itertools.count(0.0, 0.01)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    g = torch.Generator().manual_seed(0)
    data = torch.randint(65, (5_000,), generator=g)
    tiny = bench.replace(
        bench.BOOK,
        model=bench.replace(bench.BOOK.model, n_layer=1, n_embd=16, n_head=2),
        warmup_steps=5,
    )
    held = {"val": data[:1000], "test": data[1000:2000]}
    out = bench.train_for_seconds(
        tiny, data, held, seconds=1.5, seed=0, device="cpu", curve_every=0.5, eval_batches=2
    )
    assert out["seconds"] >= 1.5  # trains until the budget is spent
    steps = [p[0] for p in out["curve"]]
    assert steps == sorted(steps) and steps[-1] == out["steps"]  # the last point is the end
    assert len(out["curve"]) >= 3  # points at 0.5 s and 1.0 s, and the end
    # The cosine was stretched over the steps that fit: the last step ran near the final rate.
    assert out["last_lr"] < tiny.min_lr + 0.1 * (tiny.max_lr - tiny.min_lr)
    with pytest.raises(ValueError, match="positive"):
        bench.train_for_seconds(tiny, data, held, seconds=0, seed=0, device="cpu")


def _budgeted(seconds: dict[str, list[float]], budget: float = 180.0) -> dict:
    """A results file with one wall-clock run: nanoGPT and `book`, three seeds each."""
    results = copy.deepcopy(GOOD)
    run = results["runs"]["all"]
    run.update(budget_seconds=budget, tolerance=0.05)
    run["recipes"]["nanoGPT"] = copy.deepcopy(RECIPE)
    for name, values in seconds.items():
        run["recipes"][name]["seconds"] = values
    nano = run["recipes"]["nanoGPT"]["seconds"]
    run["recipes"]["book"]["target_seconds"] = [round(s, 3) for s in nano]
    return results


def test_a_wall_clock_run_within_five_percent_of_its_budget_passes() -> None:
    bench.validate_results(
        _budgeted({"nanoGPT": [171.5, 188.9, 180.0], "book": [171.52, 188.93, 180.02]})
    )


@pytest.mark.parametrize(
    "seconds",
    [
        {"nanoGPT": [241.4, 154.9, 182.3], "book": [180.0, 180.0, 180.0]},  # the old headline
        {"nanoGPT": [180.0, 180.0, 189.1], "book": [180.0, 180.0, 189.1]},  # 5.06% over
        {"nanoGPT": [180.0, 180.0, 180.0], "book": [180.0, 170.9, 180.0]},  # 5.06% under
    ],
)
def test_a_run_that_misses_the_budget_by_more_than_five_percent_fails(
    seconds: dict[str, list[float]],
) -> None:
    results = _budgeted(seconds)
    results["runs"]["all"]["recipes"]["book"]["target_seconds"] = seconds["nanoGPT"]
    with pytest.raises(ValueError, match="misses its budget"):
        bench.validate_results(results)


def test_a_book_recipe_is_given_nanogpts_seconds_of_the_same_seed() -> None:
    results = _budgeted({"nanoGPT": [175.0, 185.0, 180.0], "book": [175.0, 185.0, 180.0]})
    results["runs"]["all"]["recipes"]["book"]["target_seconds"] = [185.0, 175.0, 180.0]  # swapped
    with pytest.raises(ValueError, match="not nanoGPT's training seconds"):
        bench.validate_results(results)


def _wallclock():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("wallclock", ROOT / "bench" / "wallclock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_within_budget_and_nanogpt_log_parsing() -> None:
    wallclock = _wallclock()
    assert wallclock.within_budget(189.0, 180.0) and wallclock.within_budget(171.0, 180.0)
    assert not wallclock.within_budget(189.1, 180.0)
    assert not wallclock.within_budget(170.9, 180.0)
    with pytest.raises(ValueError, match="positive"):
        wallclock.within_budget(1.0, 0.0)
    log = (
        "step 0: train loss 4.2, val loss 4.2\n"
        "iter 0: loss 4.2000, time 812.50ms, mfu -100.00%\n"
        "iter 1: loss 3.9000, time 61.25ms, mfu -100.00%\n"
        "saving checkpoint to /tmp/x\n"
        "iter 2: loss 3.7000, time 60.00ms, mfu 1.20%\n"
    )
    assert wallclock.nanogpt_iteration_times(log) == {0: 0.8125, 1: 0.06125, 2: 0.06}


def test_a_seed_re_run_replaces_that_seed_only() -> None:
    wallclock = _wallclock()

    def run(seeds: list[int], seconds: float, steps: int) -> dict:
        rec = {
            "seeds": seeds,
            "steps": [steps] * len(seeds),
            "val_loss": [1.5] * len(seeds),
            "test_loss": [1.6] * len(seeds),
            "seconds": [seconds] * len(seeds),
            "cpu_seconds": [seconds] * len(seeds),
            "target_seconds": [60.0] * len(seeds),
            "curves": [[]] * len(seeds),
            "train_flops": [1e12 * steps] * len(seeds),
        }
        return {
            "budget_seconds": 60.0,
            "command": "c",
            "machine": {"matmul_peak_gflops": 100.0},
            "orders": [["nanoGPT"]] * len(seeds),
            "recipes": {"nanoGPT": rec},
        }

    stored, fresh = run([1337, 1, 2], 70.0, 10), run([1], 60.5, 20)
    merged = wallclock.merge_seeds(stored, fresh)
    rec = merged["recipes"]["nanoGPT"]
    assert rec["seeds"] == [1337, 1, 2] and rec["seconds"] == [70.0, 60.5, 70.0]
    assert rec["steps"] == [10, 20, 10] and rec["train_flops"] == [1e13, 2e13, 1e13]
    assert rec["tokens_per_s"] == pytest.approx(768 * 40 / 200.5)
    assert rec["mfu"] == pytest.approx(4e13 / 200.5 / 1e11)
    assert merged["reruns"][0]["seeds"] == [1] and stored["recipes"]["nanoGPT"]["steps"][1] == 10
    with pytest.raises(ValueError, match="not all in"):
        wallclock.merge_seeds(stored, run([7], 60.0, 20))
