"""Train the book's GPTs on Tiny Shakespeare (characters) for a fixed budget and report the
validation loss, the training throughput and the model FLOPs utilisation (MFU).

Not a test: a benchmark (it takes minutes). ``bench/README.md`` describes the method and records
the results.

Recipes (a model plus how it is optimised):

* ``reference``: Andrej Karpathy's nanoGPT CPU recipe for Shakespeare characters (4 layers,
  4 heads, ``n_embd`` 128, ``block_size`` 64, batch 12, lr 1e-3 -> 1e-4, 100 warm-up steps),
  run on the book's model code (``helpers.model.GPT``).
* ``book``: the recipe of chapter 8, ``helpers.model.GPTConfig()`` and
  ``helpers.training.TrainConfig()``'s defaults (the same model at ``n_embd`` 64, lr 5e-3 -> 5e-5).
* ``modern``: chapter 10's model (``helpers.model.GPT`` with rotary positions, RMSNorm,
  QK-norm, squared-ReLU MLP) trained with Muon for the blocks' matrices and AdamW for the rest.
* the ablation of chapter 10, one upgrade at a time on the book's recipe: ``rope``, ``rmsnorm``,
  ``qknorm``, ``relu2``, ``swiglu``, ``muon``.
* ``tuned``: the best recipe of a search at the full budget (``bench/README.md``): rotary
  positions, Muon at twice AdamW's rate.
* ``book_c128``: the book's learning rate at the reference's width (separates the two).
* ``gpu``: nanoGPT's GPU configuration (6 layers, 6 heads, ``n_embd`` 384, ``block_size`` 256,
  batch 64, dropout 0.2, lr 1e-3 -> 1e-4), for ``--device cuda`` (bf16 autocast).

Method (the default): the budget is turned into a fixed number of steps per recipe. Every
recipe's time per step is measured first, the recipes taking turns (interleaved chunks of steps,
so a change of machine load affects all of them alike; the fastest chunk of each recipe is
kept). Each recipe then trains for ``budget / time per step`` steps with its cosine schedule
ending exactly there; the loss after a fixed number of steps does not depend on how busy the
machine is while it trains. ``--book-steps N`` instead gives the book's recipe ``N`` steps and
the others the number of steps that take the same time at the measured speed ratios.

Splits: training on the first 90% of the text (chapter 8's training text), validation on the
next 5% (what a recipe may be tuned on), test on the last 5% (reported; earlier choices of the
book's recipe and of the search's shortlist looked at it too, as bench/README.md says).
``--seeds 1337,1,2`` trains every recipe once per seed (the same seed gives every recipe the
same batches, and the same initial values to every weight two architectures share) and prints
mean ± sd, and each recipe's difference from ``book`` and ``reference`` paired by seed.
``--results bench/results.json --label NAME`` stores everything in a JSON file (layout:
:func:`validate_results`) for the book and ``bench/README.md`` to read.
``--jobs N`` trains N runs at once in separate processes: with fixed step counts the results do
not depend on how busy the machine is. ``train_for_seconds`` trains for a wall-clock budget
instead (``bench/wallclock.py``'s headline comparison).

Examples::

    .venv/bin/python bench/train_gpt.py --recipe all           # reference, book, modern at 180 s
    .venv/bin/python bench/train_gpt.py --recipe book,modern --calibrate-only
    .venv/bin/python bench/train_gpt.py --recipe modern --steps 7000 --threads 1
    .venv/bin/python bench/train_gpt.py --recipe gpu --smoke   # the GPU path, a few steps on CPU
    .venv/bin/python bench/train_gpt.py --recipe all --seeds 1337,1,2 \\
        --results bench/results.json --label all
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import json
import math
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from helpers.bench_results import budget_misses
from helpers.cost import forward_flops
from helpers.data import load_tinyshakespeare
from helpers.model import GPT, SIZE_FIELDS, GPTConfig
from helpers.muon import make_muon
from helpers.tokenizer import CharTokenizer
from helpers.training import (
    TrainConfig,
    cosine_lr,
    estimate_loss,
    get_batch,
    make_adamw,
    train_step,
    train_val_split,
)


@dataclass(frozen=True)
class Recipe:
    """A model configuration plus how to optimise it (``muon_lr_scale``: Muon for the blocks'
    matrices at that multiple of the learning rate; ``None``: AdamW for everything)."""

    name: str
    model: GPTConfig
    batch_size: int
    max_lr: float
    min_lr: float
    warmup_steps: int
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    muon_lr_scale: float | None = None
    muon_weight_decay: float = 0.0  # decoupled weight decay on Muon's matrices

    def describe(self) -> str:
        c = self.model
        arch = f" {c.pos}/{c.norm}{'/qk' if c.qk_norm else ''}/{c.mlp}"
        opt = f" muon x{self.muon_lr_scale:g}" if self.muon_lr_scale else ""
        if self.muon_weight_decay:
            opt += f" muon_wd {self.muon_weight_decay:g}"
        if self.weight_decay != 0.1:
            opt += f" wd {self.weight_decay:g}"
        return (
            f"L{c.n_layer} H{c.n_head} C{c.n_embd} T{c.block_size} B{self.batch_size}{arch} "
            f"lr {self.max_lr:g}->{self.min_lr:g}{opt}"
        )


# nanoGPT's config/train_shakespeare_char.py with the CPU overrides of its README.
REFERENCE = Recipe(
    "reference",
    GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128),
    batch_size=12,
    max_lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
)

# The book's recipe: GPTConfig's and TrainConfig's defaults (chapter 8 trains exactly this).
_BOOK_TRAIN = TrainConfig()
BOOK = Recipe(
    "book",
    GPTConfig(),
    batch_size=_BOOK_TRAIN.batch_size,
    max_lr=_BOOK_TRAIN.max_lr,
    min_lr=_BOOK_TRAIN.min_lr,
    warmup_steps=_BOOK_TRAIN.warmup_steps,
    weight_decay=_BOOK_TRAIN.weight_decay,
    grad_clip=_BOOK_TRAIN.grad_clip,
)

MUON_LR_SCALE = 4.0  # Muon's learning rate / AdamW's (chosen in bench/README.md)


def _book_with(name: str, muon: bool = False, **switches: object) -> Recipe:
    """The book's recipe (same model class, same initialisation code) with some of
    ``GPTConfig``'s architecture switches changed from their defaults."""
    model = replace(BOOK.model, **switches)
    return replace(BOOK, name=name, model=model, muon_lr_scale=MUON_LR_SCALE if muon else None)


MODERN = _book_with("modern", muon=True, pos="rope", norm="rmsnorm", qk_norm=True, mlp="relu2")

# The best recipe of a search at the full 180 s budget, chosen on the validation split (three
# seeds each; bench/README.md): the book's model with rotary positions, Muon at 2x AdamW's rate.
TUNED = replace(_book_with("tuned", muon=True, pos="rope"), muon_lr_scale=2.0)

# The book's recipe (learning rate 5e-3 -> 5e-5) at the reference's width: against
# `reference`, it separates the learning rate from the width.
BOOK_C128 = replace(BOOK, name="book_c128", model=replace(BOOK.model, n_embd=128))

# nanoGPT's GPU configuration for Shakespeare characters (config/train_shakespeare_char.py).
GPU = Recipe(
    "gpu",
    GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2),
    batch_size=64,
    max_lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
)


def _search_variants() -> list[Recipe]:
    """The variants of the search for ``tuned`` (``bench/README.md``), by the names
    ``results.json`` stores them under: rotary positions with Muon, one change at a time."""
    rm4 = _book_with("rope_muon", muon=True, pos="rope")
    rm2 = replace(rm4, muon_lr_scale=2.0)

    def arch(base: Recipe, name: str, **switches: object) -> Recipe:
        return replace(base, name=name, model=replace(base.model, **switches))

    return [
        rm4,
        arch(rm4, "rope_muon_relu2", mlp="relu2"),
        arch(rm4, "rope_muon_swiglu", mlp="swiglu"),
        replace(rm4, name="rope_muon_b24", batch_size=24),
        arch(rm4, "rope_muon_l3", n_layer=3),
        replace(rm4, name="rope_muon_m8", muon_lr_scale=8.0),
        replace(rm4, name="rope_muon_lr1e2", max_lr=1e-2, min_lr=1e-4, muon_lr_scale=2.0),
        arch(rm4, "rope_muon_qk", qk_norm=True, qk_scale=0.5),
        arch(rm4, "rope_muon_c80", n_embd=80),
        replace(rm4, name="rope_muon_wu0", warmup_steps=20),
        replace(rm4, name="rope_muon_minlr", min_lr=5e-4),
        replace(rm4, name="modern_m2", model=MODERN.model, muon_lr_scale=2.0),
        replace(rm4, name="rope_m1", muon_lr_scale=1.0),
        replace(rm2, name="rope_m2"),
        replace(rm2, name="rope_m2_mwd", muon_weight_decay=0.1),
        replace(rm2, name="rope_m2_mwd02", muon_weight_decay=0.2),
        replace(rm2, name="rope_m2_mwd05", muon_weight_decay=0.5),
        arch(rm2, "rope_m2_l3", n_layer=3),
        replace(rm2, name="rope_m2_b24", batch_size=24),
        replace(rm2, name="rope_m2_wu20", warmup_steps=20),
        arch(rm2, "rope_m2_qk05", qk_norm=True, qk_scale=0.5),
        replace(rm2, name="rope_m2_wd02", weight_decay=0.2),
        replace(rm2, name="rope_m2_lr3e3", max_lr=3e-3, min_lr=3e-5),
        replace(rm2, name="rope_m2_wd02_mwd", weight_decay=0.2, muon_weight_decay=0.1),
        replace(rm2, name="rope_m2_wd02_mwd02", weight_decay=0.2, muon_weight_decay=0.2),
    ]


SEARCH = _search_variants()

RECIPES = {
    r.name: r
    for r in (
        REFERENCE,
        BOOK,
        MODERN,
        TUNED,
        BOOK_C128,
        _book_with("rope", pos="rope"),
        _book_with("rmsnorm", norm="rmsnorm"),
        _book_with("qknorm", qk_norm=True),
        _book_with("relu2", mlp="relu2"),
        _book_with("swiglu", mlp="swiglu"),
        _book_with("muon", muon=True),
        GPU,
        *SEARCH,
    )
}
GROUPS = {
    "all": ["reference", "book", "modern"],
    "ablation": ["book", "rope", "rmsnorm", "qknorm", "relu2", "swiglu", "muon", "modern"],
    "search": ["book", "modern", *(r.name for r in SEARCH)],
}

EVAL_BATCHES = 50  # held-out batches for each final loss
EVAL_BATCH_SIZE = 32
EVAL_SEED = 1234
RESULTS_SCHEMA = 1
RUN_FIELDS = ("seeds", "steps", "val_loss", "test_loss", "seconds", "cpu_seconds")


def split_text(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train, validation and test tokens: the first 90% (chapter 8's training text), then the
    next 5% (validation: what recipes may be tuned on) and the last 5% (test: reported; not
    untouched, see bench/README.md)."""
    train_data, held_out = train_val_split(data, 0.9)
    half = len(held_out) // 2
    return train_data, held_out[:half], held_out[half:]


def validate_results(results: object) -> None:
    """Raise ``ValueError`` unless ``results`` has the layout :func:`write_results` writes:
    ``{"schema": 1, "runs": {label: {"machine": {...}, "command": str, "recipes": {name:
    {"describe": str, "params": int, "tokens_per_s": float, "mfu": float, "seeds": [int],
    "steps": [int], "val_loss": [float], "test_loss": [float], "seconds": [float],
    "cpu_seconds": [float]}}}}}``, one list entry per seed.

    Optional: a recipe's ``"curves"`` (one list per seed of ``[step, seconds, val_loss]``
    points, steps and seconds increasing) and ``tokens_per_s`` / ``mfu`` (positive where
    given); a run's ``"calibration"`` (``{"command": str, "machine": {...}, "ms_per_step":
    {name: float}}``, the measurement its step counts come from, one entry per recipe).

    A wall-clock run (``bench/wallclock.py``'s) has ``"budget_seconds"`` and ``"tolerance"``:
    every run's training seconds must be within the tolerance of the budget
    (:func:`helpers.bench_results.budget_misses`), and where recipes have ``"target_seconds"``
    (the seconds each was given), a book recipe's target in a seed is nanoGPT's measured
    training seconds in that seed."""
    if not isinstance(results, dict) or results.get("schema") != RESULTS_SCHEMA:
        raise ValueError(f"results must be a dict with schema {RESULTS_SCHEMA}")
    runs = results.get("runs")
    if not isinstance(runs, dict) or not runs:
        raise ValueError("results['runs'] must be a non-empty dict of labelled runs")
    for label, run in runs.items():
        if not isinstance(run, dict) or not isinstance(run.get("command"), str):
            raise ValueError(f"run {label!r} needs a 'command' string")
        if not isinstance(run.get("machine"), dict):
            raise ValueError(f"run {label!r} needs a 'machine' dict")
        recipes = run.get("recipes")
        if not isinstance(recipes, dict) or not recipes:
            raise ValueError(f"run {label!r} needs a non-empty 'recipes' dict")
        for name, rec in recipes.items():
            where = f"{label}/{name}"
            if not isinstance(rec, dict):
                raise ValueError(f"{where} must be a dict")
            n = len(rec.get("seeds", []))
            if n == 0:
                raise ValueError(f"{where} needs at least one seed")
            for field in RUN_FIELDS:
                values = rec.get(field)
                if not isinstance(values, list) or len(values) != n:
                    raise ValueError(
                        f"{where}: {field} must be a list of {n} values (one per seed)"
                    )
                if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                    raise ValueError(f"{where}: {field} must hold finite numbers")
            seeds, steps = rec["seeds"], rec["steps"]
            if len(set(seeds)) != n or not all(type(x) is int for x in seeds):
                raise ValueError(f"{where}: seeds must be distinct integers")
            if not all(type(x) is int and x > 0 for x in steps):
                raise ValueError(f"{where}: steps must be positive integers")
            for field, kind in (("describe", str), ("params", int)):
                if not isinstance(rec.get(field), kind):
                    raise ValueError(f"{where}: {field} must be a {kind.__name__}")
            for field in ("tokens_per_s", "mfu"):
                if field in rec and not (isinstance(rec[field], (int, float)) and rec[field] > 0):
                    raise ValueError(f"{where}: {field} must be a positive number")
            if "curves" in rec:
                _validate_curves(where, rec["curves"], n)
        if "calibration" in run:
            _validate_calibration(label, run["calibration"], set(recipes))
        if "budget_seconds" in run:
            _validate_budget(label, run)


def _validate_budget(label: str, run: dict) -> None:
    misses = budget_misses(run)
    if misses:
        raise ValueError(
            f"run {label!r} misses its budget of {run['budget_seconds']} s by more than "
            f"{100 * run['tolerance']:.0f}%: {'; '.join(misses)}"
        )
    recipes = run["recipes"]
    if "nanoGPT" not in recipes:
        return
    nano = dict(zip(recipes["nanoGPT"]["seeds"], recipes["nanoGPT"]["seconds"], strict=True))
    for name, rec in recipes.items():
        if name == "nanoGPT" or "target_seconds" not in rec:
            continue
        for seed, target in zip(rec["seeds"], rec["target_seconds"], strict=True):
            if seed not in nano or abs(target - nano[seed]) > 1e-3:
                raise ValueError(
                    f"{label}/{name} seed {seed}: given {target} s, not nanoGPT's training "
                    "seconds in that seed"
                )


def _validate_curves(where: str, curves: object, n: int) -> None:
    if not isinstance(curves, list) or len(curves) != n:
        raise ValueError(f"{where}: curves must be a list of {n} curves (one per seed)")
    for curve in curves:
        if not isinstance(curve, list) or not all(
            isinstance(pt, list)
            and len(pt) == 3
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in pt)
            for pt in curve
        ):
            raise ValueError(f"{where}: a curve is a list of [step, seconds, val_loss] points")
        for a, b in itertools.pairwise(curve):
            if not (b[0] > a[0] and b[1] > a[1]):
                raise ValueError(f"{where}: a curve's steps and seconds must increase")


def _validate_calibration(label: str, calibration: object, names: set[str]) -> None:
    if not (
        isinstance(calibration, dict)
        and isinstance(calibration.get("command"), str)
        and isinstance(calibration.get("machine"), dict)
        and isinstance(calibration.get("ms_per_step"), dict)
    ):
        raise ValueError(f"run {label!r}: calibration needs 'command', 'machine', 'ms_per_step'")
    ms = calibration["ms_per_step"]
    if set(ms) != names or not all(isinstance(v, (int, float)) and v > 0 for v in ms.values()):
        raise ValueError(f"run {label!r}: calibration needs a positive ms_per_step per recipe")


def write_results(path: str, label: str, run: dict) -> dict:
    """Store ``run`` under ``label`` in the JSON file ``path`` (other labels are kept), after
    checking the whole file with :func:`validate_results`. Returns the file's content."""
    file = Path(path)
    results = {"schema": RESULTS_SCHEMA, "runs": {}}
    if file.exists():
        results = json.loads(file.read_text(encoding="utf-8"))
    results["runs"][label] = run
    validate_results(results)
    file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return results


def mean_sd(values: list[float]) -> str:
    """``"mean ± sd"`` (sample standard deviation), or the value alone for one seed."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def peak_dtype(device: str) -> torch.dtype:
    """The dtype training computes its matrix products in: float32 on the CPU, bfloat16
    (autocast) on a GPU. MFU is measured against the peak of that dtype."""
    return torch.float32 if device == "cpu" else torch.bfloat16


def matmul_peak_gflops(
    n: int = 2048, repeats: int = 10, device: str = "cpu", clock: str = "wall"
) -> float:
    """Best ``n x n @ n x n`` throughput in GFLOP/s with the current thread count, in
    :func:`peak_dtype` (on a GPU ``n`` is raised to 8192, enough to fill it;
    ``clock="cpu"``: per second of the process's CPU time, for one thread)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    dtype = peak_dtype(device)
    if device != "cpu":
        n = max(n, 8192)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device, dtype)
    b = torch.randn(n, n, generator=g).to(device, dtype)
    best = float("inf")
    for i in range(repeats + 2):
        _sync(device)
        start = now()
        a @ b
        _sync(device)
        if i >= 2:  # the first products warm up the thread pool and caches
            best = min(best, now() - start)
    return 2 * n**3 / best / 1e9


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def flops_per_token(config: GPTConfig) -> float:
    """Training FLOPs per token: three forward passes (forward, and a backward pass that costs
    two), with the forward pass's matrix-product FLOPs from ``helpers.cost.forward_flops`` over a
    full window (``6 N + 12 L C T`` with ``N`` the weights used in matrix products)."""
    T = config.block_size
    # The architecture switches leave the matrix products as they are (SwiGLU's three matrices
    # of width 8C/3 hold 0.2% more than two of 4C); count them on chapter 8's architecture.
    size = replace(GPTConfig(), **{f: getattr(config, f) for f in SIZE_FIELDS})
    return 3 * forward_flops(size, T) / T


class Run:
    """One recipe's model, optimiser and batch stream, stepped by :meth:`steps`."""

    def __init__(self, recipe: Recipe, train_data: torch.Tensor, seed: int, device: str) -> None:
        self.recipe, self.train_data, self.device = recipe, train_data, device
        torch.manual_seed(seed)
        cfg = recipe.model
        self.model: nn.Module = GPT(cfg).to(device)
        if recipe.muon_lr_scale:
            self.optimizer: torch.optim.Optimizer = make_muon(
                self.model,
                lr=recipe.max_lr,
                weight_decay=recipe.weight_decay,
                muon_lr_scale=recipe.muon_lr_scale,
            )
            for group in self.optimizer.param_groups:
                if group["use_muon"]:
                    group["weight_decay"] = recipe.muon_weight_decay
        else:
            self.optimizer = make_adamw(
                self.model, lr=recipe.max_lr, weight_decay=recipe.weight_decay
            )
        self.generator = torch.Generator().manual_seed(seed)
        self.autocast = (
            torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
            if device != "cpu"
            else contextlib.nullcontext()
        )
        self.step = 0
        self.model.train()

    def steps(self, n: int, total_steps: int) -> float:
        """Take ``n`` training steps of a run of ``total_steps``; return the last loss."""
        r = self.recipe
        loss = torch.tensor(float("nan"))
        for _ in range(n):
            lr = cosine_lr(
                self.step,
                max_lr=r.max_lr,
                warmup_steps=r.warmup_steps,
                total_steps=total_steps,
                min_lr=r.min_lr,
            )
            x, y = get_batch(
                self.train_data,
                r.model.block_size,
                r.batch_size,
                generator=self.generator,
                device=self.device,
            )
            with self.autocast:
                loss = train_step(self.model, self.optimizer, x, y, lr=lr, grad_clip=r.grad_clip)
            self.step += 1
        _sync(self.device)
        return loss.item()


def held_out_losses(run: Run, held_out: dict[str, torch.Tensor], batches: int) -> dict:
    """The loss of ``run``'s model on ``batches`` batches of each held-out split (the same
    batches for every recipe: ``EVAL_SEED``), with the run's autocast."""
    with run.autocast:
        return estimate_loss(
            run.model,
            held_out,
            run.recipe.model.block_size,
            EVAL_BATCH_SIZE,
            batches,
            seed=EVAL_SEED,
            device=run.device,
        )


def load_splits() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Tiny Shakespeare as character ids: the training tokens, and the held-out splits of
    :func:`split_text` as ``{"val": ..., "test": ...}``."""
    text = load_tinyshakespeare()
    data = torch.tensor(CharTokenizer.from_text(text).encode(text), dtype=torch.long)
    train_data, val_data, test_data = split_text(data)
    return train_data, {"val": val_data, "test": test_data}


def calibrate(
    recipes: list[Recipe],
    train_data: torch.Tensor,
    *,
    rounds: int,
    chunk: int,
    device: str,
    clock: str = "wall",
) -> dict[str, float]:
    """Seconds per training step of each recipe: ``rounds`` chunks of ``chunk`` steps, the
    recipes taking turns, after 5 untimed steps each; the fastest chunk counts (load only ever
    adds time). ``clock="cpu"`` measures the process's CPU time instead of the wall clock: with
    one thread that is the time the step would take on an idle core, however many other jobs
    share the machine. The steps are warm-up steps, whose learning rate does not depend on the
    length of the run; the models are thrown away afterwards."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    runs = [Run(r, train_data, seed=0, device=device) for r in recipes]
    for run in runs:
        run.steps(5, total_steps=10**9)
    times: dict[str, list[float]] = {r.name: [] for r in recipes}
    for _ in range(rounds):
        for run in runs:
            start = now()
            run.steps(chunk, total_steps=10**9)
            times[run.recipe.name].append((now() - start) / chunk)
    for name, t in times.items():
        print(
            f"#   {name:10s} ms/step: fastest {1e3 * min(t):.1f}, "
            f"median {1e3 * statistics.median(t):.1f} over {rounds} chunks of {chunk}",
            flush=True,
        )
    return {name: min(t) for name, t in times.items()}


def train_recipe(
    recipe: Recipe,
    train_data: torch.Tensor,
    held_out: dict[str, torch.Tensor],
    *,
    steps: int,
    seed: int,
    device: str,
    log_every: float,
    eval_batches: int = EVAL_BATCHES,
) -> dict[str, float]:
    """Train ``recipe`` for exactly ``steps`` steps; return the measurements, with the loss on
    each held-out split (``held_out``: name -> tokens) as ``"<name>_loss"``."""
    run = Run(recipe, train_data, seed, device)
    start = time.perf_counter()
    cpu_start = time.process_time()
    next_log = log_every
    done = 0
    while done < steps:
        n = min(100, steps - done)
        loss = run.steps(n, total_steps=steps)
        done += n
        elapsed = time.perf_counter() - start
        if log_every and elapsed >= next_log:
            print(
                f"  [{recipe.name}] step {done}/{steps}  loss {loss:.3f}  {elapsed:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            next_log += log_every
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    losses = held_out_losses(run, held_out, eval_batches)
    return {
        **{f"{name}_loss": loss for name, loss in losses.items()},
        "steps": steps,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "params": run.model.num_params(),
        "last_train_loss": loss,
    }


def train_for_seconds(
    recipe: Recipe,
    train_data: torch.Tensor,
    held_out: dict[str, torch.Tensor],
    *,
    seconds: float,
    seed: int,
    device: str,
    curve_every: float = 0.0,
    curve_batches: int = 20,
    eval_batches: int = EVAL_BATCHES,
) -> dict:
    """Train ``recipe`` for ``seconds`` of wall clock, however many steps fit; return the
    measurements as :func:`train_recipe` does, plus ``"curve"``.

    The learning-rate schedule is the recipe's warm-up and cosine, with the run's length in steps
    re-estimated before every step from the speed so far (``steps done / time so far * seconds``),
    so the cosine reaches its end when the time is up, on a machine of any speed. Every
    ``curve_every`` seconds of training (0: never) the clock is paused and the validation loss is
    estimated on ``curve_batches`` batches; ``"curve"`` lists ``[step, training seconds, val
    loss]`` points, the last one at the end of training.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    run = Run(recipe, train_data, seed, device)
    curve: list[list[float]] = []
    eval_cpu = [0.0]  # CPU time of the curve's evaluations, not counted as training

    def point(elapsed: float) -> None:
        cpu = time.process_time()
        val = held_out_losses(run, {"val": held_out["val"]}, curve_batches)["val"]
        run.model.train()
        curve.append([run.step, round(elapsed, 3), val])
        eval_cpu[0] += time.process_time() - cpu

    elapsed, next_point = 0.0, curve_every
    cpu_start = time.process_time()
    start = time.perf_counter()
    while elapsed < seconds:
        # Until the speed is known, a long schedule (these steps are warm-up steps anyway).
        total = int(run.step / elapsed * seconds) if run.step >= 10 else 10**9
        loss = run.steps(1, total_steps=max(total, run.step + 1))
        elapsed = time.perf_counter() - start
        if curve_every and elapsed >= next_point and elapsed < seconds:
            point(elapsed)
            start = time.perf_counter() - elapsed  # the evaluation's time is not training time
            next_point += curve_every
    cpu_seconds = time.process_time() - cpu_start - eval_cpu[0]
    if curve_every:
        point(elapsed)
    losses = held_out_losses(run, held_out, eval_batches)
    return {
        **{f"{name}_loss": value for name, value in losses.items()},
        "steps": run.step,
        "seconds": elapsed,
        "cpu_seconds": cpu_seconds,
        "params": run.model.num_params(),
        "last_train_loss": loss,
        "last_lr": run.optimizer.param_groups[0]["lr"],
        "curve": curve,
    }


def _job(name: str, steps: int, seed: int, threads: int, device: str, eval_batches: int) -> dict:
    """One fixed-step run in a worker process of ``--jobs`` (loads the text itself)."""
    torch.set_num_threads(threads)
    train_data, held_out = load_splits()
    return train_recipe(
        RECIPES[name],
        train_data,
        held_out,
        steps=steps,
        seed=seed,
        device=device,
        log_every=0,
        eval_batches=eval_batches,
    )


def parse_recipes(text: str) -> list[str]:
    names: list[str] = []
    for part in text.split(","):
        names += GROUPS.get(part, [part])
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise ValueError(
            f"unknown recipe(s) {unknown}; choose from {sorted(RECIPES)} or {sorted(GROUPS)}"
        )
    return list(dict.fromkeys(names))


def parse_steps(text: str, names: list[str]) -> dict[str, int]:
    """``"N"`` (every recipe) or ``"name=N,name=N"`` (one count per recipe in ``names``)."""
    if "=" not in text:
        pairs = {n: text for n in names}
    else:
        pairs = dict(part.split("=", 1) for part in text.split(","))
    missing = [n for n in names if n not in pairs]
    if missing:
        raise ValueError(f"--steps gives no count for {missing}")
    steps = {n: int(pairs[n]) for n in names}
    if any(v <= 0 for v in steps.values()):
        raise ValueError("--steps must be positive")
    return steps


def smoke(recipe: Recipe, device: str) -> int:
    """A few steps of ``recipe`` at full size with bf16 autocast on ``device`` (the GPU path
    without a GPU): checks that the code path runs and the loss is finite."""
    g = torch.Generator().manual_seed(0)
    data = torch.randint(recipe.model.vocab_size, (10_000,), generator=g)
    small = replace(recipe, batch_size=2)
    run = Run(small, data, seed=0, device=device)
    run.autocast = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    first = run.steps(1, total_steps=3)
    last = run.steps(2, total_steps=3)
    print(
        f"smoke {recipe.name} on {device} with bf16 autocast: {run.model.num_params():,} params, "
        f"loss {first:.3f} -> {last:.3f} in 3 steps of batch 2 x {recipe.model.block_size}"
    )
    return 0 if torch.isfinite(torch.tensor(last)) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--recipe",
        default="book",
        help="comma-separated recipes, or 'all' (reference, book, modern) or 'ablation'",
    )
    p.add_argument("--seconds", type=float, default=180.0, help="training budget per recipe")
    p.add_argument(
        "--steps",
        help="train exactly this many steps, no calibration: N for every recipe, or "
        "name=N,name=N (e.g. the counts a --calibrate-only run printed)",
    )
    p.add_argument("--book-steps", type=int, help="anchor: the book's recipe gets this many steps")
    p.add_argument("--calibrate-only", action="store_true", help="print the step counts and stop")
    p.add_argument("--rounds", type=int, default=6, help="calibration chunks per recipe")
    p.add_argument("--chunk", type=int, default=30, help="steps per calibration chunk")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="calibrate on wall-clock time, or on CPU time (meaningful with --threads 1 only)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu", help="cpu or cuda (bf16 autocast on cuda)")
    p.add_argument("--seeds", default="1337", help="comma-separated seeds, one run per seed")
    p.add_argument("--eval-batches", type=int, default=EVAL_BATCHES, help="batches per loss")
    p.add_argument("--results", help="JSON file to store the results in (see validate_results)")
    p.add_argument("--label", help="name of this run in --results (default: --recipe)")
    p.add_argument(
        "--jobs", type=int, default=1, help="training runs at once, in separate processes"
    )
    p.add_argument("--smoke", action="store_true", help="3 steps with bf16 autocast, then stop")
    p.add_argument("--log-every", type=float, default=60.0, help="seconds between progress lines")
    args = p.parse_args(argv)
    try:
        names = parse_recipes(args.recipe)
    except ValueError as err:
        p.error(str(err))
    fixed_steps: dict[str, int] = {}
    if args.steps is not None:
        try:
            fixed_steps = parse_steps(args.steps, names)
        except ValueError as err:
            p.error(str(err))
    if args.seconds <= 0:
        p.error("--seconds must be positive")
    if args.clock == "cpu" and args.threads != 1:
        p.error("--clock cpu needs --threads 1 (with more threads CPU time is not step time)")
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds must be comma-separated ints, got {args.seeds!r}")
    if args.eval_batches < 1:
        p.error("--eval-batches must be at least 1")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    torch.set_num_threads(args.threads)
    if args.smoke:
        return max(smoke(RECIPES[n], args.device) for n in names)

    train_data, held_out = load_splits()
    recipes = [RECIPES[n] for n in names]

    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        "unknown CPU",
    )
    print(f"# torch {torch.__version__}, {cpu}, {args.threads} threads, device {args.device}")
    peak = matmul_peak_gflops(device=args.device, clock=args.clock)
    per_step: dict[str, float] = {}
    if fixed_steps:
        steps = fixed_steps
        print(f"# {peak_dtype(args.device)} matmul peak {peak:.0f} GFLOP/s ({args.clock} clock)")
    else:
        dtype = peak_dtype(args.device)
        print(f"# calibrating (interleaved); {dtype} matmul peak {peak:.0f} GFLOP/s", flush=True)
        per_step = calibrate(
            recipes,
            train_data,
            rounds=args.rounds,
            chunk=args.chunk,
            device=args.device,
            clock=args.clock,
        )
        peak = max(peak, matmul_peak_gflops(device=args.device, clock=args.clock))
        if args.book_steps is not None:
            if "book" not in per_step:
                p.error("--book-steps needs the book recipe among --recipe")
            budget = args.book_steps * per_step["book"]
            print(f"# book gets {args.book_steps} steps: a budget of {budget:.1f} s at its speed")
        else:
            budget = args.seconds
        steps = {n: max(1, int(budget / per_step[n])) for n in names}
        print(
            f"# {dtype} matmul peak {peak:.0f} GFLOP/s; steps for {budget:.0f} s: "
            + ", ".join(f"{n} {s}" for n, s in steps.items()),
            flush=True,
        )
    if args.calibrate_only:
        return 0

    machine = {
        "torch": torch.__version__,
        "cpu": cpu,
        "threads": args.threads,
        "device": args.device,
        "clock": args.clock,
        "matmul_peak_gflops": round(peak, 1),
        "matmul_peak_dtype": str(peak_dtype(args.device)).removeprefix("torch."),
    }
    # Every recipe, same seed: same batches (and the same initial weights wherever the
    # parameter shapes agree). With --jobs N the runs go to N processes at once: a fixed number
    # of steps gives the same result however busy the machine is.
    jobs = [(r.name, steps[r.name], seed) for r in recipes for seed in seeds]
    if args.jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
            outs = list(
                pool.map(
                    _job,
                    *zip(*jobs, strict=True),
                    [args.threads] * len(jobs),
                    [args.device] * len(jobs),
                    [args.eval_batches] * len(jobs),
                )
            )
    else:
        outs = [
            train_recipe(
                RECIPES[name],
                train_data,
                held_out,
                steps=n,
                seed=seed,
                device=args.device,
                log_every=args.log_every,
                eval_batches=args.eval_batches,
            )
            for name, n, seed in jobs
        ]
    finished = dict(zip(((name, seed) for name, _, seed in jobs), outs, strict=True))
    results: dict[str, dict] = {}
    for r in recipes:
        rec: dict = {"describe": r.describe(), "seeds": seeds}
        rec.update({field: [] for field in RUN_FIELDS if field != "seeds"})
        for seed in seeds:
            out = finished[r.name, seed]
            for field in RUN_FIELDS:
                if field != "seeds":
                    rec[field].append(out[field])
            print(
                f"{r.name:10s} seed {seed}: val_loss {out['val_loss']:.4f}  test_loss "
                f"{out['test_loss']:.4f}  steps {out['steps']}  (trained in {out['seconds']:.0f} s"
                f" wall, {out['cpu_seconds']:.0f} s CPU)",
                flush=True,
            )
        tokens_per_step = r.batch_size * r.model.block_size
        # Throughput from the calibration (interleaved, fastest chunk) when there is one, else
        # from the training runs themselves (their CPU time with --clock cpu).
        run_seconds = rec["cpu_seconds"] if args.clock == "cpu" else rec["seconds"]
        seconds_per_step = per_step.get(r.name, sum(run_seconds) / sum(rec["steps"]))
        rec["tokens_per_s"] = tokens_per_step / seconds_per_step
        rec["mfu"] = flops_per_token(r.model) * rec["tokens_per_s"] / (peak * 1e9)
        rec["params"] = GPT(r.model).num_params()
        results[r.name] = rec
        print(
            f"{r.name:10s} test_loss {mean_sd(rec['test_loss'])}  val_loss "
            f"{mean_sd(rec['val_loss'])}  tokens/s {rec['tokens_per_s']:,.0f}  "
            f"MFU {100 * rec['mfu']:.1f}%  params {rec['params']:,}  ({r.describe()})",
            flush=True,
        )
    for base in ("reference", "book"):
        if base not in results:
            continue
        for name, rec in results.items():
            if name in ("reference", base):
                continue
            diffs = [
                a - b for a, b in zip(rec["test_loss"], results[base]["test_loss"], strict=True)
            ]
            print(
                f"{name} vs {base}: test loss {mean_sd(diffs)} (paired by seed), tokens/s "
                f"x{rec['tokens_per_s'] / results[base]['tokens_per_s']:.2f}",
                flush=True,
            )
    if args.results:
        run = {"command": " ".join(["bench/train_gpt.py", *sys.argv[1:]]), "machine": machine}
        run["recipes"] = results
        write_results(args.results, args.label or args.recipe, run)
        print(f"# results stored in {args.results} under {args.label or args.recipe!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
