"""Train the book's GPT on Tiny Shakespeare (characters) on the CPU and report what it reached.

Not a test: a benchmark. It trains one or two *recipes* (a model size plus its optimisation
settings) for a wall-clock budget and prints one line per recipe with the validation loss, the
training throughput, the parameter count and the model FLOPs utilisation (MFU) against a float32
matmul peak measured on this machine with the same number of threads, so that runs on different
machines can be compared.

Recipes:

* ``reference``: Andrej Karpathy's nanoGPT CPU recipe for Shakespeare characters (4 layers,
  4 heads, ``n_embd`` 128, ``block_size`` 64, batch 12, dropout 0, lr 1e-3 -> 1e-4, 100 warm-up
  steps), run on this book's model code, with its cosine schedule stretched to fill the budget.
* ``book``: the configuration the book trains (``helpers.model.GPTConfig``'s defaults: the same
  model at half the width, ``n_embd`` 64) with a higher learning rate (5e-3 -> 5e-5), chosen by
  the measurements in ``bench/README.md``.

Stretching a schedule to a budget: the first steps (all inside the warm-up, whose learning rate
does not depend on the run's length) measure the time per step; ``max_steps`` is then set so that
training ends at the budget, and re-estimated every 5% of the budget so a change of machine load
does not leave the cosine unfinished or overrun the budget.

Examples::

    python bench/train_gpt.py                          # the book's recipe, 180 s, 2 threads
    python bench/train_gpt.py --recipe both            # reference then book (a little over 6 minutes)
    python bench/train_gpt.py --recipe reference --seconds 60
    python bench/train_gpt.py --steps 10850 --threads 1 --n-embd 96  # fixed steps: load-independent loss
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace

import torch

from helpers.data import load_tinyshakespeare
from helpers.model import GPT, GPTConfig
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
    """A model configuration plus how to optimise it."""

    name: str
    model: GPTConfig
    batch_size: int
    max_lr: float
    min_lr: float
    warmup_steps: int
    weight_decay: float = 0.1
    grad_clip: float = 1.0


# nanoGPT's config/train_shakespeare_char.py with the CPU overrides of its README.
REFERENCE = Recipe(
    "reference",
    GPTConfig(
        vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False
    ),
    batch_size=12,
    max_lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
)

# The book's configuration: GPTConfig's and TrainConfig's defaults (helpers.model, helpers.training),
# chosen by measurement (bench/README.md). The chapter book/part2/gpt.ipynb trains exactly this.
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

RECIPES = {"reference": REFERENCE, "book": BOOK}

EVAL_BATCHES = 50  # held-out batches for the final validation loss
EVAL_BATCH_SIZE = 32
EVAL_SEED = 1234


def matmul_peak_gflops(n: int = 2048, repeats: int = 10) -> float:
    """Best float32 ``n x n @ n x n`` throughput in GFLOP/s with the current thread count."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    for _ in range(2):
        a @ b  # warm-up: thread pool, caches
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def flops_per_token(model: GPT) -> float:
    """Training FLOPs per token, as in the PaLM paper's appendix (and nanoGPT's MFU): 6 per
    parameter (forward + backward) plus the attention scores and weighted sums."""
    c = model.config
    n_params = model.num_params()  # the token embedding counts (it is the tied LM head)
    return 6 * n_params + 12 * c.n_layer * c.n_embd * c.block_size


def train_recipe(
    recipe: Recipe,
    train_data: torch.Tensor,
    val_data: torch.Tensor,
    *,
    seconds: float | None,
    steps: int | None,
    seed: int,
    log_every: float,
) -> dict[str, float]:
    """Train ``recipe`` for ``seconds`` of wall clock (schedule stretched to fit) or exactly
    ``steps`` steps; return the measurements."""
    torch.manual_seed(seed)
    model = GPT(recipe.model)
    optimizer = make_adamw(model, lr=recipe.max_lr, weight_decay=recipe.weight_decay)
    g = torch.Generator().manual_seed(seed)
    B, T = recipe.batch_size, recipe.model.block_size

    skip = 5  # the first steps are slower (allocations, thread pool): not timed
    calib_steps = max(skip + 5, min(recipe.warmup_steps, 40))  # timed to size the run
    # Until calibrated, max_steps is effectively infinite: inside the warm-up the learning rate
    # does not depend on it, and just after it the cosine is still at its peak.
    max_steps = steps if steps is not None else 10**9
    t_skip = 0.0
    next_recalib = 0.0
    next_log = log_every
    start = time.perf_counter()
    step = 0
    model.train()
    while step < max_steps:
        lr = cosine_lr(
            step,
            max_lr=recipe.max_lr,
            warmup_steps=recipe.warmup_steps,
            total_steps=max_steps,
            min_lr=recipe.min_lr,
        )
        x, y = get_batch(train_data, T, B, generator=g)
        loss = train_step(model, optimizer, x, y, lr=lr, grad_clip=recipe.grad_clip)
        step += 1

        elapsed = time.perf_counter() - start
        if step == skip:
            t_skip = elapsed
        if (
            steps is None
            and seconds is not None
            and step >= calib_steps
            and elapsed >= next_recalib
        ):
            per_step = (elapsed - t_skip) / (step - skip)
            max_steps = max(step + 1, step + int((seconds - elapsed) / per_step))
            next_recalib = elapsed + 0.05 * seconds
        if seconds is not None and elapsed >= seconds:
            break  # hard stop: the budget is the budget
        if log_every and elapsed >= next_log:
            print(
                f"  [{recipe.name}] step {step}/{max_steps}  lr {lr:.2e}  loss {loss.item():.3f}  "
                f"{elapsed:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            next_log += log_every
    train_seconds = time.perf_counter() - start

    val = estimate_loss(model, {"val": val_data}, T, EVAL_BATCH_SIZE, EVAL_BATCHES, seed=EVAL_SEED)[
        "val"
    ]
    tokens_per_s = step * B * T / train_seconds
    return {
        "val_loss": val,
        "steps": step,
        "seconds": train_seconds,
        "tokens_per_s": tokens_per_s,
        "params": model.num_params(),
        "flops_per_token": flops_per_token(model),
        "final_lr": lr,
    }


def override(recipe: Recipe, args: argparse.Namespace) -> Recipe:
    """Apply the command line's model/optimiser overrides (used for the configuration search)."""
    model_fields = {
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_embd": args.n_embd,
        "block_size": args.block_size,
        "dropout": args.dropout,
    }
    model_fields = {k: v for k, v in model_fields.items() if v is not None}
    opt_fields = {
        "batch_size": args.batch_size,
        "max_lr": args.lr,
        "min_lr": args.min_lr,
        "warmup_steps": args.warmup,
        "weight_decay": args.weight_decay,
    }
    opt_fields = {k: v for k, v in opt_fields.items() if v is not None}
    if not model_fields and not opt_fields:
        return recipe
    if args.lr is not None and args.min_lr is None:  # keep the recipe's decay ratio
        opt_fields["min_lr"] = args.lr * recipe.min_lr / recipe.max_lr
    return replace(
        recipe, name=recipe.name + "*", model=replace(recipe.model, **model_fields), **opt_fields
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", choices=["reference", "book", "both"], default="book")
    p.add_argument(
        "--seconds", type=float, default=180.0, help="wall-clock training budget per recipe"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train exactly this many steps instead (the loss then does not depend on machine load)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch.set_num_threads (the peak is measured with it)",
    )
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--log-every",
        type=float,
        default=30.0,
        help="seconds between progress lines (stderr); 0: none",
    )
    g = p.add_argument_group("overrides of the recipe (configuration search)")
    for flag, typ in [
        ("--n-layer", int),
        ("--n-head", int),
        ("--n-embd", int),
        ("--block-size", int),
        ("--dropout", float),
        ("--batch-size", int),
        ("--lr", float),
        ("--min-lr", float),
        ("--warmup", int),
        ("--weight-decay", float),
    ]:
        g.add_argument(flag, type=typ, default=None)
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error("--seconds must be positive")
    if args.steps is not None and args.steps <= 0:
        p.error("--steps must be positive")

    torch.set_num_threads(args.threads)
    text = load_tinyshakespeare()
    tokenizer = CharTokenizer.from_text(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data, 0.9)

    peak = matmul_peak_gflops()
    names = ["reference", "book"] if args.recipe == "both" else [args.recipe]
    budget = None if args.steps is not None else args.seconds
    print(
        f"# torch {torch.__version__}, {args.threads} threads, float32 matmul peak {peak:.0f} GFLOP/s, "
        + (
            f"{args.steps} steps per recipe"
            if args.steps
            else f"budget {args.seconds:.0f} s per recipe"
        ),
        flush=True,
    )
    results = {}
    for name in names:
        recipe = override(RECIPES[name], args)
        r = train_recipe(
            recipe,
            train_data,
            val_data,
            seconds=budget,
            steps=args.steps,
            seed=args.seed,
            log_every=args.log_every,
        )
        mfu = r["flops_per_token"] * r["tokens_per_s"] / (peak * 1e9)
        c = recipe.model
        results[name] = r
        print(
            f"{recipe.name:10s} val_loss {r['val_loss']:.4f}  tokens/s {r['tokens_per_s']:,.0f}  "
            f"params {r['params']:,}  MFU {100 * mfu:.1f}%  | steps {r['steps']} in {r['seconds']:.1f} s  "
            f"(L{c.n_layer} H{c.n_head} C{c.n_embd} T{c.block_size} B{recipe.batch_size} "
            f"lr {recipe.max_lr:g}->{recipe.min_lr:g} warmup {recipe.warmup_steps})",
            flush=True,
        )
    if len(results) == 2:
        ref, book = results["reference"], results["book"]
        print(
            f"book vs reference: val loss {book['val_loss']:.4f} vs {ref['val_loss']:.4f} "
            f"({book['val_loss'] - ref['val_loss']:+.4f}), tokens/s x{book['tokens_per_s'] / ref['tokens_per_s']:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
