"""The headline comparison: nanoGPT's own code against the book's recipes, same wall clock.

What a reader gets on their own machine: every contender trains for the same wall-clock budget
(``--seconds``, 180 by default) in a fresh process with PyTorch's default number of threads, on
the same training text, and is then scored on the same held-out test text with the same batches.
Run it on an otherwise idle machine; the contenders take turns (the order rotates from seed to
seed) so that a slow patch of the machine does not fall on one of them only.

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
* the book's recipes (``bench/train_gpt.py``'s, e.g. ``book`` and ``modern``), each trained by
  :func:`train_gpt.train_for_seconds`: the recipe's warm-up and cosine schedule, with the run's
  length in steps re-estimated from the speed so far, until the budget is spent. The clock is
  paused while a point of the validation curve is estimated (every ``--curve-every`` seconds).

Scores: the loss on the test text (the last 5% of Tiny Shakespeare; the final choice among
recipes used the 5% before it, earlier choices looked at both, see bench/README.md) and on the
validation text, 50 batches of 32 windows each with a fixed seed (``train_gpt.EVAL_*``).
``--results bench/results.json`` stores everything under ``--label``.

Example (about 3 x 3 x 3.2 minutes)::

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    .venv/bin/python bench/wallclock.py --nanogpt /tmp/nanoGPT --recipes book,modern \\
        --seeds 1337,1,2 --results bench/results.json --label wallclock
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


def default_thread_env() -> dict[str, str]:
    """The environment without thread-count settings: PyTorch picks its default."""
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}


def nanogpt_iteration_times(log: str) -> dict[int, float]:
    """Seconds of every iteration nanoGPT logged (``iter N: loss L, time T ms, ...``)."""
    return {
        int(m[1]): float(m[2]) / 1e3
        for m in re.finditer(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", log, re.M)
    }


def run_nanogpt(
    nanogpt: Path, iters: int, seed: int
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
    env = default_thread_env()
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


def run_book(recipe: str, seed: int, seconds: float, curve_every: float) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        recipe,
        f"--seeds={seed}",
        f"--seconds={seconds}",
        f"--curve-every={curve_every}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=default_thread_env(), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"book worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (outside this repository)")
    p.add_argument("--recipes", default="book,modern", help="the book's recipes to run")
    p.add_argument("--seconds", type=float, default=180.0, help="wall-clock budget per run")
    p.add_argument("--seeds", default="1337,1,2")
    p.add_argument("--curve-every", type=float, default=15.0, help="seconds between curve points")
    p.add_argument("--results", help="JSON file to store the results in")
    p.add_argument("--label", default="wallclock")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.worker:
        book_worker(args.worker, seeds[0], args.seconds, args.curve_every)
        return 0
    if args.nanogpt is None or not (args.nanogpt / "train.py").exists():
        p.error("--nanogpt must be a nanoGPT checkout (a folder with train.py)")
    if args.nanogpt.resolve().is_relative_to(ROOT):
        p.error("put the nanoGPT checkout outside this repository")
    recipes = tg.parse_recipes(args.recipes)
    prepare_data(args.nanogpt)
    _, held_out = tg.load_splits()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=args.nanogpt, capture_output=True, text=True
    ).stdout.strip()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        "unknown CPU",
    )
    peak = tg.matmul_peak_gflops()
    print(
        f"# torch {torch.__version__}, {cpu}, {os.cpu_count()} CPUs, default threads "
        f"({torch.get_num_threads()}), float32 matmul peak {peak:.0f} GFLOP/s",
        flush=True,
    )

    log, _, folder = run_nanogpt(args.nanogpt, CALIBRATION_ITERS, 1337)
    folder.cleanup()
    times = nanogpt_iteration_times(log)
    per_iter = statistics.median(t for i, t in times.items() if 10 <= i < CALIBRATION_ITERS)
    print(f"# nanoGPT calibration: {1e3 * per_iter:.1f} ms per iteration (median)", flush=True)

    log_path = Path(tempfile.gettempdir()) / "wallclock_runs.jsonl"
    print(f"# every finished run is also appended to {log_path}", flush=True)
    contenders = ["nanoGPT", *recipes]
    runs: dict[str, dict] = {
        name: {
            "seeds": [],
            "steps": [],
            "val_loss": [],
            "test_loss": [],
            "seconds": [],
            "cpu_seconds": [],
            "curves": [],
        }
        for name in contenders
    }
    extra: dict[str, dict] = {}
    for i, seed in enumerate(seeds):
        order = contenders[i % len(contenders) :] + contenders[: i % len(contenders)]
        for name in order:
            rec = runs[name]
            if name == "nanoGPT":
                iters = max(1, round(args.seconds / per_iter))
                usage = os.times()
                log, ckpt, folder = run_nanogpt(args.nanogpt, iters, seed)
                cpu_used = (
                    os.times().children_user
                    + os.times().children_system
                    - usage.children_user
                    - usage.children_system
                )
                times = nanogpt_iteration_times(log)
                if not set(range(iters)) <= times.keys():
                    raise RuntimeError("nanoGPT's log lacks some iterations' times")
                trained = sum(t for it, t in times.items() if it < iters)
                scores = nanogpt_scores(args.nanogpt, ckpt, held_out)
                folder.cleanup()
                if scores["iter"] != iters:
                    raise RuntimeError(f"nanoGPT saved iteration {scores['iter']}, not {iters}")
                per_iter = trained / iters  # the next run's calibration
                out = {
                    "steps": iters,
                    "seconds": trained,
                    "cpu_seconds": cpu_used,
                    "curve": [],
                    **scores,
                }
                extra[name] = {
                    "params": scores["params"],
                    "describe": (
                        f"nanoGPT train.py ({commit}), its CPU recipe: L4 H4 C128 T64 B12 "
                        "learned/layernorm/gelu lr 0.001->0.0001"
                    ),
                }
            else:
                out = run_book(name, seed, args.seconds, args.curve_every)
                extra[name] = {"params": out["params"], "describe": tg.RECIPES[name].describe()}
            rec["seeds"].append(seed)
            for field in ("steps", "val_loss", "test_loss", "seconds", "cpu_seconds"):
                rec[field].append(out[field])
            rec["curves"].append(out["curve"])
            with open(log_path, "a", encoding="utf-8") as log_file:  # nothing lost on a crash
                log_file.write(json.dumps({"seed": seed, "contender": name, **out}) + "\n")
            print(
                f"{name:8s} seed {seed:5d}: test {out['test_loss']:.4f}  val "
                f"{out['val_loss']:.4f}  steps {out['steps']:6d}  trained "
                f"{out['seconds']:.1f} s wall, {out['cpu_seconds']:.1f} s CPU",
                flush=True,
            )

    results = {}
    for name, rec in runs.items():
        tokens = 768 * sum(rec["steps"])  # every contender: batch 12 x 64 characters
        model = tg.REFERENCE.model if name == "nanoGPT" else tg.RECIPES[name].model
        rec["tokens_per_s"] = tokens / sum(rec["seconds"])
        rec["mfu"] = tg.flops_per_token(model) * rec["tokens_per_s"] / (peak * 1e9)
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
            "machine": {
                "torch": torch.__version__,
                "cpu": cpu,
                "cpus": os.cpu_count(),
                "threads": torch.get_num_threads(),
                "device": "cpu",
                "clock": "wall",
                "matmul_peak_gflops": round(peak, 1),
                "nanogpt_commit": commit,
            },
            "recipes": results,
        }
        tg.write_results(args.results, args.label, run)
        print(f"# results stored in {args.results} under {args.label!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
