"""The headline comparison: nanoGPT's own code against the book's recipes, same wall clock.

What a reader gets on their own machine: every contender trains for the same wall-clock budget
(``--seconds``, 180 by default) in a fresh process on the same training text, and is then scored
on the same held-out test text with the same batches. Run it on a core nothing else uses (e.g.
``taskset -c 1`` with ``--threads 1``), or on an otherwise idle machine.

The budget is equal in fact: nanoGPT runs first in every seed, and the book's recipes are then
given exactly the training seconds nanoGPT measured in that seed (``target_seconds`` in the
results). A nanoGPT run more than ``TOLERANCE`` (5%) away from ``--seconds`` is run again (at
most ``--retries`` times) with its corrected time per iteration; the results file's check
(``train_gpt.validate_results``) refuses a comparison with a run outside the tolerance.

* ``nanoGPT``: Andrej Karpathy's ``train.py`` (https://github.com/karpathy/nanoGPT; clone it
  anywhere outside this repository and pass ``--nanogpt``; none of its code is copied here)
  with its CPU recipe for Shakespeare characters, the command of its README: 4 layers, 4 heads,
  ``n_embd`` 128, ``block_size`` 64, batch 12, no dropout, no ``torch.compile``, lr 1e-3 -> 1e-4.
  Its schedule is counted in iterations, so ``max_iters`` (= ``lr_decay_iters``) is the budget
  divided by its time per iteration, measured in a short run first and then re-measured from
  every full run for the next one. Its seed is 1337 + (seed - 1337): a config file passed after
  its own shifts the argument of ``torch.manual_seed`` (seed 1337 leaves nanoGPT untouched). It
  saves its model after exactly ``max_iters`` steps (``eval_interval = max_iters``,
  ``always_save_checkpoint``); this script loads that checkpoint with nanoGPT's own
  ``model.py`` and scores it like the book's models. Its training time is the sum of the
  per-iteration times it logs, up to that checkpoint.
* the book's recipes (``bench/train_gpt.py``'s, e.g. ``book`` and ``tuned``), each trained by
  :func:`train_gpt.train_for_seconds` for nanoGPT's seconds: the recipe's warm-up and cosine
  schedule, with the run's length in steps re-estimated from the speed so far, until the time
  is spent. The clock is paused while a point of the validation curve is estimated (every
  ``--curve-every`` seconds). They take turns behind nanoGPT (the order rotates by seed).

Scores: the loss on the test text (the last 5% of Tiny Shakespeare; the final choice among
recipes used the 5% before it, earlier choices looked at both, see bench/README.md) and on the
validation text, 50 batches of 32 windows each with a fixed seed (``train_gpt.EVAL_*``).
``--results bench/results.json`` stores everything under ``--label``.

Example (about 3 x 3 x 3.2 minutes; the chapters read the label ``wallclock``, 180 s)::

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    taskset -c 1 .venv/bin/python bench/wallclock.py --nanogpt /tmp/nanoGPT \\
        --recipes book,tuned --seeds 1337,1,2 --threads 1 --seconds 180 \\
        --results bench/results.json --label wallclock
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import train_gpt as tg  # noqa: E402
from nanogpt_compare import NANOGPT_CPU_RECIPE, prepare_data  # noqa: E402

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
CALIBRATION_ITERS = 60
TOLERANCE = 0.05  # the most a run's training seconds may miss the budget by


def thread_env(threads: int | None = None) -> dict[str, str]:
    """The environment for a contender's process: without thread-count settings (PyTorch picks
    its default) or, with ``threads``, that many threads."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if threads is not None:
        env.update({k: str(threads) for k in THREAD_VARIABLES})
    return env


def within_budget(seconds: float, budget: float, tolerance: float = TOLERANCE) -> bool:
    """Whether ``seconds`` of training is within ``tolerance`` (a fraction) of ``budget``."""
    if budget <= 0 or tolerance < 0:
        raise ValueError(f"budget must be positive and tolerance >= 0, got {budget}, {tolerance}")
    return abs(seconds - budget) <= tolerance * budget


def nanogpt_iteration_times(log: str) -> dict[int, float]:
    """Seconds of every iteration nanoGPT logged (``iter N: loss L, time T ms, ...``)."""
    return {
        int(m[1]): float(m[2]) / 1e3
        for m in re.finditer(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", log, re.M)
    }


def run_nanogpt(
    nanogpt: Path, iters: int, seed: int, threads: int | None = None
) -> tuple[str, Path, tempfile.TemporaryDirectory]:
    """nanoGPT's train.py for ``iters`` iterations with its seed shifted to ``seed``; returns its
    log, its checkpoint and the temporary folder that holds it (delete when done)."""
    folder = tempfile.TemporaryDirectory()
    shift = Path(folder.name) / "seed.py"
    shift.write_text(
        "import torch as _torch\n"
        "_manual_seed = _torch.manual_seed\n"
        f"_torch.manual_seed = lambda s: _manual_seed(s + {seed - 1337})\n"
    )
    cmd = [
        sys.executable,
        "train.py",
        "config/train_shakespeare_char.py",
        str(shift),
        *[a for a in NANOGPT_CPU_RECIPE if not a.startswith(("--eval_", "--always_save"))],
        f"--max_iters={iters}",
        f"--lr_decay_iters={iters}",
        f"--eval_interval={iters}",
        "--eval_iters=1",
        "--always_save_checkpoint=True",
        f"--out_dir={folder.name}",
    ]
    env = thread_env(threads)
    proc = subprocess.run(cmd, cwd=nanogpt, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"nanoGPT failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout, Path(folder.name) / "ckpt.pt", folder


def nanogpt_scores(nanogpt: Path, ckpt: Path, held_out: dict[str, torch.Tensor]) -> dict:
    """Load nanoGPT's checkpoint with its own ``model.py`` and score it as the book's models
    are scored (same splits, batches and seed)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt / "model.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=False)
    model = module.GPT(module.GPTConfig(**checkpoint["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}
    model.load_state_dict(state)
    losses = tg.estimate_loss(
        model, held_out, 64, tg.EVAL_BATCH_SIZE, tg.EVAL_BATCHES, seed=tg.EVAL_SEED
    )
    params = model.get_num_params()  # without position embeddings, as GPT.num_params()
    return {
        **{f"{k}_loss": v for k, v in losses.items()},
        "iter": checkpoint["iter_num"],
        "params": params,
    }


def book_worker(recipe: str, seed: int, seconds: float, curve_every: float) -> None:
    """One book recipe for ``seconds``, in this (fresh) process; prints the result as JSON."""
    train_data, held_out = tg.load_splits()
    out = tg.train_for_seconds(
        tg.RECIPES[recipe],
        train_data,
        held_out,
        seconds=seconds,
        seed=seed,
        device="cpu",
        curve_every=curve_every,
    )
    out["threads"] = torch.get_num_threads()
    print(json.dumps(out))


def run_book(
    recipe: str, seed: int, seconds: float, curve_every: float, threads: int | None = None
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        recipe,
        f"--seeds={seed}",
        f"--seconds={seconds}",
        f"--curve-every={curve_every}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=thread_env(threads), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"book worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``"unknown CPU"`` where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def nanogpt_run(
    nanogpt: Path, iters: int, seed: int, threads: int | None, held_out: dict[str, torch.Tensor]
) -> dict:
    """One full nanoGPT run of ``iters`` iterations, scored; its training seconds are the sum of
    the per-iteration times it logs up to its checkpoint."""
    usage = os.times()
    log, ckpt, folder = run_nanogpt(nanogpt, iters, seed, threads)
    after = os.times()
    cpu_used = (
        after.children_user + after.children_system - usage.children_user - usage.children_system
    )
    times = nanogpt_iteration_times(log)
    if not set(range(iters)) <= times.keys():
        raise RuntimeError("nanoGPT's log lacks some iterations' times")
    scores = nanogpt_scores(nanogpt, ckpt, held_out)
    folder.cleanup()
    if scores["iter"] != iters:
        raise RuntimeError(f"nanoGPT saved iteration {scores['iter']}, not {iters}")
    trained = sum(t for it, t in times.items() if it < iters)
    return {"steps": iters, "seconds": trained, "cpu_seconds": cpu_used, "curve": [], **scores}


PER_SEED = (
    "seeds",
    "steps",
    "val_loss",
    "test_loss",
    "seconds",
    "cpu_seconds",
    "target_seconds",
    "curves",
    "train_flops",
)


def summarise(rec: dict, peak: float) -> None:
    """Set a contender's ``tokens_per_s`` (all steps over all training seconds) and ``mfu``
    (its model FLOPs per second over the matrix-product ``peak`` in GFLOP/s)."""
    tokens = 768 * sum(rec["steps"])  # every contender: batch 12 x 64 characters
    rec["tokens_per_s"] = tokens / sum(rec["seconds"])
    rec["mfu"] = sum(rec["train_flops"]) / sum(rec["seconds"]) / (peak * 1e9)


def merge_seeds(stored: dict, new: dict) -> dict:
    """``stored`` (a run of this script) with the seeds that ``new`` ran replaced by ``new``'s
    runs of them, in ``stored``'s order of seeds; ``new``'s command, seeds and machine are
    listed under ``"reruns"``.

    Raises:
        ValueError: if the two runs differ in budget or contenders, or ``new`` has a seed that
            ``stored`` lacks.
    """
    if stored["budget_seconds"] != new["budget_seconds"] or set(stored["recipes"]) != set(
        new["recipes"]
    ):
        raise ValueError("a re-run must have the stored run's budget and contenders")
    seeds = stored["recipes"]["nanoGPT"]["seeds"]
    redone = new["recipes"]["nanoGPT"]["seeds"]
    if not set(redone) <= set(seeds):
        raise ValueError(f"seeds {redone} are not all in the stored run's {seeds}")
    merged = json.loads(json.dumps(stored))
    for name, rec in merged["recipes"].items():
        fresh = new["recipes"][name]
        for field in PER_SEED:
            by_seed = dict(zip(rec["seeds"], rec[field], strict=True))
            by_seed.update(zip(fresh["seeds"], fresh[field], strict=True))
            rec[field] = [by_seed[seed] for seed in seeds]
        if "missed_seconds" in fresh:
            rec["missed_seconds"] = rec.get("missed_seconds", []) + fresh["missed_seconds"]
        summarise(rec, stored["machine"]["matmul_peak_gflops"])
    orders = dict(zip(seeds, stored["orders"], strict=True))
    orders.update(zip(redone, new["orders"], strict=True))
    merged["orders"] = [orders[seed] for seed in seeds]
    rerun = {k: new[k] for k in ("command", "machine")}
    merged["reruns"] = [*stored.get("reruns", []), {**rerun, "seeds": redone}]
    return merged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (outside this repository)")
    p.add_argument("--recipes", default="book,tuned", help="the book's recipes to run")
    p.add_argument("--seconds", type=float, default=180.0, help="wall-clock budget per run")
    p.add_argument("--seeds", default="1337,1,2")
    p.add_argument("--threads", type=int, help="threads per run (default: PyTorch's default)")
    p.add_argument("--retries", type=int, default=2, help="nanoGPT re-runs that miss the budget")
    p.add_argument(
        "--ms-per-iter",
        type=float,
        help="nanoGPT's time per iteration from an earlier run (default: a short run measures it)",
    )
    p.add_argument("--curve-every", type=float, default=15.0, help="seconds between curve points")
    p.add_argument("--results", help="JSON file to store the results in")
    p.add_argument("--label", default="wallclock")
    p.add_argument(
        "--merge",
        action="store_true",
        help="replace these seeds in the run already stored under --label (a seed re-run)",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.worker:
        book_worker(args.worker, seeds[0], args.seconds, args.curve_every)
        return 0
    if args.nanogpt is None or not (args.nanogpt / "train.py").exists():
        p.error("--nanogpt must be a nanoGPT checkout (a folder with train.py)")
    if args.nanogpt.resolve().is_relative_to(ROOT):
        p.error("put the nanoGPT checkout outside this repository")
    if args.ms_per_iter is not None and args.ms_per_iter <= 0:
        p.error("--ms-per-iter must be positive")
    recipes = tg.parse_recipes(args.recipes)
    prepare_data(args.nanogpt)
    _, held_out = tg.load_splits()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=args.nanogpt, capture_output=True, text=True
    ).stdout.strip()
    cpu = cpu_model()
    peak = tg.matmul_peak_gflops()
    print(
        f"# torch {torch.__version__}, {cpu}, {os.cpu_count()} CPUs, {torch.get_num_threads()} "
        f"threads, float32 matmul peak {peak:.0f} GFLOP/s",
        flush=True,
    )

    if args.ms_per_iter is not None:
        per_iter = args.ms_per_iter / 1e3
    else:
        log, _, folder = run_nanogpt(args.nanogpt, CALIBRATION_ITERS, 1337, args.threads)
        folder.cleanup()
        times = nanogpt_iteration_times(log)
        per_iter = statistics.median(t for i, t in times.items() if 10 <= i < CALIBRATION_ITERS)
    print(f"# nanoGPT calibration: {1e3 * per_iter:.1f} ms per iteration", flush=True)

    log_path = Path(tempfile.gettempdir()) / "wallclock_runs.jsonl"
    print(f"# every finished run is also appended to {log_path}", flush=True)
    contenders = ["nanoGPT", *recipes]
    fields = ("steps", "val_loss", "test_loss", "seconds", "cpu_seconds")
    runs: dict[str, dict] = {
        name: {"seeds": [], **{f: [] for f in fields}, "target_seconds": [], "curves": []}
        for name in contenders
    }
    runs["nanoGPT"]["missed_seconds"] = []  # training seconds of the runs that were re-run
    extra: dict[str, dict] = {}
    orders: list[list[str]] = []
    for i, seed in enumerate(seeds):
        # nanoGPT first: its training seconds are the budget the book's recipes get in this seed;
        # the book's recipes take turns behind it.
        order = ["nanoGPT", *recipes[i % len(recipes) :], *recipes[: i % len(recipes)]]
        orders.append(order)
        matched = args.seconds
        for name in order:
            rec = runs[name]
            if name == "nanoGPT":
                for attempt in range(args.retries + 1):
                    iters = max(1, round(args.seconds / per_iter))
                    out = nanogpt_run(args.nanogpt, iters, seed, args.threads, held_out)
                    per_iter = out["seconds"] / iters  # the next run's calibration
                    if within_budget(out["seconds"], args.seconds):
                        break
                    if attempt < args.retries:
                        print(f"# nanoGPT trained {out['seconds']:.1f} s: re-run", flush=True)
                        rec["missed_seconds"].append(out["seconds"])
                matched = out["seconds"]
                extra[name] = {
                    "params": out["params"],
                    "describe": (
                        f"nanoGPT train.py ({commit}), its CPU recipe: L4 H4 C128 T64 B12 "
                        "learned/layernorm/gelu lr 0.001->0.0001"
                    ),
                }
            else:
                out = run_book(name, seed, matched, args.curve_every, args.threads)
                extra[name] = {"params": out["params"], "describe": tg.RECIPES[name].describe()}
            rec["seeds"].append(seed)
            rec["target_seconds"].append(round(args.seconds if name == "nanoGPT" else matched, 3))
            for field in fields:
                rec[field].append(out[field])
            rec["curves"].append(out["curve"])
            with open(log_path, "a", encoding="utf-8") as log_file:  # nothing lost on a crash
                log_file.write(
                    json.dumps({"seed": seed, "contender": name, "budget": args.seconds, **out})
                    + "\n"
                )
            print(
                f"{name:8s} seed {seed:5d}: test {out['test_loss']:.4f}  val "
                f"{out['val_loss']:.4f}  steps {out['steps']:6d}  trained "
                f"{out['seconds']:.1f} s wall, {out['cpu_seconds']:.1f} s CPU",
                flush=True,
            )
    peak_after = tg.matmul_peak_gflops()
    print(f"# float32 matmul peak after the runs: {peak_after:.0f} GFLOP/s", flush=True)

    results = {}
    for name, rec in runs.items():
        model = tg.REFERENCE.model if name == "nanoGPT" else tg.RECIPES[name].model
        rec["train_flops"] = [tg.flops_per_token(model) * 768 * n for n in rec["steps"]]
        summarise(rec, peak)
        rec.update(extra[name])
        results[name] = rec
        print(
            f"{name:8s} test {tg.mean_sd(rec['test_loss'])}  val {tg.mean_sd(rec['val_loss'])}"
            f"  tokens/s {rec['tokens_per_s']:,.0f}  MFU {100 * rec['mfu']:.1f}%",
            flush=True,
        )
    for name in recipes:
        diffs = [
            a - b
            for a, b in zip(
                results[name]["test_loss"], results["nanoGPT"]["test_loss"], strict=True
            )
        ]
        print(f"{name} - nanoGPT: test loss {tg.mean_sd(diffs)} (paired by seed)")
    if args.results:
        run = {
            "command": " ".join(["bench/wallclock.py", *sys.argv[1:]]),
            "budget_seconds": args.seconds,
            "tolerance": TOLERANCE,
            "orders": orders,
            "machine": {
                "torch": torch.__version__,
                "cpu": cpu,
                "cpus": os.cpu_count(),
                "threads": torch.get_num_threads(),
                "device": "cpu",
                "clock": "wall",
                "matmul_peak_gflops": round(peak, 1),
                "matmul_peak_gflops_after": round(peak_after, 1),
                "nanogpt_commit": commit,
            },
            "recipes": results,
        }
        if args.merge:
            stored = json.loads(Path(args.results).read_text(encoding="utf-8"))["runs"]
            run = merge_seeds(stored[args.label], run)
        tg.write_results(args.results, args.label, run)
        print(f"# results stored in {args.results} under {args.label!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
