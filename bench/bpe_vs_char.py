"""Characters or BPE tokens? The book's GPT trained on each at equal training compute, scored in
bits per character on the same validation text. The chapter "From characters to GPT-2" reads the
results file this script writes (``bench/bpe_vs_char.json``).

Not a test: a benchmark (it takes several minutes of CPU on one thread).

Method:

* Text: Tiny Shakespeare, cut at 90% of its characters (the split of chapters 7 and 8). The BPE
  tokenizer (``helpers.bpe``) learns its merges from the training part only.
* Models: the chapter-8 GPT (``GPTConfig()``: 4 layers, 4 heads, ``n_embd`` 64, context 64
  tokens) on characters (``vocab_size`` 65), and the same GPT with ``vocab_size`` set to the BPE
  vocabulary. Both are trained with chapter 8's recipe (``TrainConfig()``: batch 12, AdamW,
  warm-up then cosine decay), with fewer steps than chapter 8 so that three seeds of each fit in
  a few minutes.
* Equal compute, counted in FLOPs: a training step costs three forward passes (the backward pass
  costs two) of ``helpers.cost.forward_flops`` over the batch: ``6 N`` per token for the weights
  plus the attention scores and weighted sums. The larger vocabulary makes a BPE step dearer (a
  bigger LM head), so the BPE model gets ``char_steps * flops(char step) / flops(BPE step)``
  steps, rounded. FLOPs, not seconds, because the machine is shared: a time budget would
  depend on the load, a FLOP count does not.
* Score: every validation token after the first is predicted, the text cut into consecutive
  windows of ``block_size`` tokens (the context restarts at each window). Bits per character =
  the summed loss in nats / ln 2 / the number of characters of the predicted tokens; this equals
  (nats per token) / ln 2 / (characters per token), which the script checks.

Run from the repository root::

    nice .venv/bin/python bench/bpe_vs_char.py               # writes bench/bpe_vs_char.json
    .venv/bin/python bench/bpe_vs_char.py --char-steps 50 --seeds 0 --out /tmp/smoke.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from dataclasses import replace
from pathlib import Path

import torch

from helpers.bpe import BPETokenizer
from helpers.cost import forward_flops
from helpers.data import load_tinyshakespeare
from helpers.model import GPT, GPTConfig
from helpers.tokenizer import CharTokenizer
from helpers.training import TrainConfig, cosine_lr, get_batch, make_adamw, train_step

BPE_VOCAB_SIZE = 512
CHAR_STEPS = 3_000
SEEDS = (0, 1, 2)
EVAL_BATCH = 64  # windows per forward pass when scoring


def step_flops(config: GPTConfig, batch_size: int) -> int:
    """Training FLOPs of one step: three forward passes over ``batch_size`` full windows."""
    return 3 * forward_flops(config, config.block_size, batch_size=batch_size)


@torch.no_grad()
def score(model: GPT, ids: torch.Tensor, chars_of: list[int]) -> dict[str, float]:
    """Summed loss (nats) over every token of ``ids`` after the first, in consecutive windows of
    ``block_size`` tokens; ``chars_of[i]`` is the number of characters of token ``ids[i]``."""
    model.eval()
    T = model.config.block_size
    n = len(ids) - 1  # predicted tokens
    total = 0.0
    starts = list(range(0, n, T))
    for i in range(0, len(starts), EVAL_BATCH):
        group = starts[i : i + EVAL_BATCH]
        for s in group:  # the last window may be short: score it on its own
            if s + T > n:
                x, y = ids[None, s:n], ids[None, s + 1 : n + 1]
                logits, _ = model(x)
                total += torch.nn.functional.cross_entropy(logits[0], y[0], reduction="sum").item()
        full = [s for s in group if s + T <= n]
        if full:
            x = torch.stack([ids[s : s + T] for s in full])
            y = torch.stack([ids[s + 1 : s + T + 1] for s in full])
            logits, _ = model(x)
            total += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            ).item()
    chars = sum(chars_of[1:])
    nats_per_token = total / n
    bits_per_char = total / math.log(2) / chars
    # the same number the other way round: nats/token -> bits/token -> bits/char
    assert math.isclose(bits_per_char, nats_per_token / math.log(2) / (chars / n), rel_tol=1e-12)
    return {
        "nats_per_token": nats_per_token,
        "bits_per_char": bits_per_char,
        "tokens_scored": n,
        "chars_scored": chars,
    }


def train_one(
    config: GPTConfig, train_ids: torch.Tensor, steps: int, seed: int, recipe: TrainConfig
) -> GPT:
    """Chapter 8's recipe for ``steps`` steps (its cosine schedule ends there)."""
    torch.manual_seed(seed)
    model = GPT(config)
    opt = make_adamw(model, lr=recipe.max_lr, weight_decay=recipe.weight_decay)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        lr = cosine_lr(
            step,
            max_lr=recipe.max_lr,
            warmup_steps=recipe.warmup_steps,
            total_steps=steps,
            min_lr=recipe.min_lr,
        )
        x, y = get_batch(train_ids, config.block_size, recipe.batch_size, generator=g)
        train_step(model, opt, x, y, lr=lr, grad_clip=recipe.grad_clip)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab-size", type=int, default=BPE_VOCAB_SIZE)
    parser.add_argument("--char-steps", type=int, default=CHAR_STEPS)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu_start = time.process_time()

    text = load_tinyshakespeare()
    if not text.isascii():
        raise SystemExit("expected ASCII text: bits per character = bits per byte")
    n = int(0.9 * len(text))
    train_text, val_text = text[:n], text[n:]

    chars = CharTokenizer.from_text(text)
    t0 = time.process_time()
    bpe = BPETokenizer.train(train_text, args.vocab_size)
    bpe_seconds = time.process_time() - t0

    recipe = TrainConfig()
    char_cfg = GPTConfig(vocab_size=chars.vocab_size)
    bpe_cfg = replace(char_cfg, vocab_size=bpe.vocab_size)
    flops_char = step_flops(char_cfg, recipe.batch_size)
    flops_bpe = step_flops(bpe_cfg, recipe.batch_size)
    bpe_steps = round(args.char_steps * flops_char / flops_bpe)

    data = {}
    for name, tok, cfg, steps in (
        ("char", chars, char_cfg, args.char_steps),
        ("bpe", bpe, bpe_cfg, bpe_steps),
    ):
        train_ids = torch.tensor(tok.encode(train_text))
        val_list = tok.encode(val_text)
        val_ids = torch.tensor(val_list)
        chars_of = [len(tok.decode([i])) for i in val_list]
        runs = []
        for seed in args.seeds:
            t0 = time.process_time()
            model = train_one(cfg, train_ids, steps, seed, recipe)
            result = score(model, val_ids, chars_of)
            result["seed"] = seed
            result["cpu_seconds"] = round(time.process_time() - t0, 1)
            runs.append(result)
            print(f"{name} seed {seed}: {result['bits_per_char']:.4f} bits/char", flush=True)
        data[name] = {
            "vocab_size": cfg.vocab_size,
            "params": GPT(cfg).num_params(non_embedding=False),
            "steps": steps,
            "flops_per_step": step_flops(cfg, recipe.batch_size),
            "total_flops": steps * step_flops(cfg, recipe.batch_size),
            "train_tokens_seen": steps * recipe.batch_size * cfg.block_size,
            "train_chars_per_token": len(train_text) / len(train_ids),
            "val_chars_per_token": len(val_text) / len(val_list),
            "runs": runs,
        }

    out = {
        "what": "the chapter-8 GPT on characters vs on byte-level BPE tokens, equal FLOPs",
        "train_chars": len(train_text),
        "val_chars": len(val_text),
        "bpe_vocab_size": bpe.vocab_size,
        "bpe_train_cpu_seconds": round(bpe_seconds, 1),
        "recipe": {
            "batch_size": recipe.batch_size,
            "block_size": char_cfg.block_size,
            "max_lr": recipe.max_lr,
            "min_lr": recipe.min_lr,
            "warmup_steps": recipe.warmup_steps,
        },
        "seeds": args.seeds,
        "threads": 1,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "total_cpu_seconds": round(time.process_time() - cpu_start, 1),
        **data,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
