"""Batches, loss estimates, the learning-rate schedule and the training loop for language models.

Defined in chapter 7, "Tiny Shakespeare and a bigram model" (the split, batches and loss
estimates); the recipe and the training loop in chapter 8, "Building and training a GPT".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from helpers.validation import check_non_negative_int, check_positive_int


def train_val_split(
    data: torch.Tensor, train_fraction: float = 0.9
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D token tensor into its first ``train_fraction`` and the rest (no shuffling:
    the validation text is a contiguous, unseen stretch of the corpus)."""
    if data.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n = int(train_fraction * len(data))
    return data[:n], data[n:]


def get_batch(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``batch_size`` random windows of ``block_size`` tokens.

    Returns ``(x, y)``, both ``(B, T)``, where ``y`` is ``x`` shifted left by one: at every
    position the target is the next token. Window starts are uniform over every position that
    leaves room for the shifted target (``0 .. len(data) - block_size - 1``); pass a seeded
    ``generator`` for reproducible batches that leave the global random stream alone.
    """
    if data.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    check_positive_int("block_size", block_size)
    check_positive_int("batch_size", batch_size)
    if len(data) <= block_size:
        raise ValueError(f"need more than block_size={block_size} tokens, got {len(data)}")
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[ix[:, None] + offsets]
    y = data[ix[:, None] + offsets + 1]
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss(
    model: nn.Module,
    splits: dict[str, torch.Tensor],
    block_size: int,
    batch_size: int,
    eval_steps: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Mean loss of ``model`` on ``eval_steps`` batches of each split.

    The batches come from their own generator seeded with ``seed``, so every call sees the same
    batches (estimates are comparable across training) and the caller's random stream is untouched.
    ``model(x, y)`` must return ``(logits, loss)``.
    """
    check_positive_int("eval_steps", eval_steps)
    if not splits:
        raise ValueError("splits is empty: pass e.g. {'train': train_data, 'val': val_data}")
    was_training = model.training
    model.eval()
    out = {}
    try:
        for name, data in splits.items():
            g = torch.Generator().manual_seed(seed)
            losses = torch.empty(eval_steps)
            for i in range(eval_steps):
                x, y = get_batch(data, block_size, batch_size, generator=g, device=device)
                _, loss = model(x, y)
                losses[i] = loss.item()
            out[name] = losses.mean().item()
    finally:
        model.train(was_training)
    return out


def cosine_lr(
    step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0
) -> float:
    """Linear warm-up to ``max_lr`` over ``warmup_steps``, then cosine decay to ``min_lr``
    at ``total_steps``.

    Step ``s < warmup_steps`` gets ``max_lr * (s + 1) / warmup_steps`` (so the last warm-up step
    and step ``warmup_steps`` both get ``max_lr``); from ``total_steps`` on the rate stays at
    ``min_lr``.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if warmup_steps < 0 or total_steps < 0:
        raise ValueError(
            f"warmup_steps and total_steps must be >= 0, got {warmup_steps}, {total_steps}"
        )
    if not 0.0 <= min_lr <= max_lr:
        raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`train`.

    The defaults are the book's CPU recipe for the default :class:`helpers.model.GPTConfig`
    (chapter 8 trains with them; ``bench/train_gpt.py`` measures them; ``bench/README.md``
    says how they were chosen): batch 12 windows of 64 characters, AdamW with weight decay 0.1,
    100 warm-up steps to a learning rate of 5e-3, cosine decay to 5e-5, gradients clipped to
    norm 1. ``eval_interval=None`` estimates the losses once, after the last step.
    """

    max_steps: int = 10_800
    batch_size: int = 12
    block_size: int = 64
    max_lr: float = 5e-3
    min_lr: float = 5e-5
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_interval: int | None = 900
    eval_steps: int = 20
    seed: int = 1337

    def __post_init__(self) -> None:
        for name in ("batch_size", "block_size", "eval_steps"):
            check_positive_int(name, getattr(self, name))
        if self.eval_interval is not None:
            check_positive_int("eval_interval", self.eval_interval)
        for name in ("max_steps", "warmup_steps"):
            check_non_negative_int(name, getattr(self, name))
        if not 0.0 <= self.min_lr <= self.max_lr:
            raise ValueError(
                f"need 0 <= min_lr <= max_lr, got min_lr={self.min_lr}, max_lr={self.max_lr}"
            )


@dataclass
class History:
    """What :func:`train` measured."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall-clock time of the training steps alone, without the estimates


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    grad_clip: float,
) -> torch.Tensor:
    """One optimiser step on the batch ``(x, y)`` at learning rate ``lr``: forward, backward,
    gradient clipping to norm ``grad_clip`` (0: none), update. Returns the batch's loss.

    ``model(x, y)`` must return ``(logits, loss)``. :func:`train` and the benchmark
    (``bench/train_gpt.py``) both take their steps through here, so they train identically.
    """
    if grad_clip < 0:
        raise ValueError(f"grad_clip must be >= 0, got {grad_clip}")
    for group in optimizer.param_groups:
        group["lr"] = lr
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss


def train(
    model: nn.Module,
    train_data: torch.Tensor,
    val_data: torch.Tensor,
    config: TrainConfig,
    *,
    device: torch.device | str = "cpu",
    optimizer: torch.optim.Optimizer | None = None,
    progress: Callable[[int], object] | None = None,
    log: Callable[[str], object] | None = None,
) -> History:
    """Train ``model`` with AdamW, warm-up + cosine learning rate and gradient clipping.

    Train and validation losses are estimated every ``eval_interval`` steps (from step 0) and at
    the end; with ``eval_interval=None``, at the end only.
    ``log`` (e.g. ``print``) receives one line per estimate as it is made, such as
    ``"step   900: train loss 2.0208, val loss 2.0989"``: a loss table that doubles as a progress
    report. ``progress`` (e.g. a tqdm bar's ``update``) is called with 1 after every step.
    ``History.seconds`` is the time spent in the training steps (batches included), without the
    loss estimates, so ``seconds / max_steps`` is the time of one step.
    """
    g = torch.Generator().manual_seed(config.seed)
    if optimizer is None:
        optimizer = make_adamw(model, lr=config.max_lr, weight_decay=config.weight_decay)
    splits = {"train": train_data, "val": val_data}
    history = History()

    def evaluate(step: int) -> None:
        losses = estimate_loss(
            model, splits, config.block_size, config.batch_size, config.eval_steps, device=device
        )
        history.steps.append(step)
        history.train_loss.append(losses["train"])
        history.val_loss.append(losses["val"])
        if log is not None:
            log(f"step {step:5d}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")

    model.train()
    for step in range(config.max_steps):
        if config.eval_interval is not None and step % config.eval_interval == 0:
            evaluate(step)
        start = time.perf_counter()
        lr = cosine_lr(
            step,
            max_lr=config.max_lr,
            warmup_steps=config.warmup_steps,
            total_steps=config.max_steps,
            min_lr=config.min_lr,
        )
        x, y = get_batch(
            train_data, config.block_size, config.batch_size, generator=g, device=device
        )
        train_step(model, optimizer, x, y, lr=lr, grad_clip=config.grad_clip)
        history.seconds += time.perf_counter() - start
        if progress is not None:
            progress(1)
    evaluate(config.max_steps)
    return history


def make_adamw(model: nn.Module, *, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW that decays only matrices (weights of linear and embedding layers), not biases or
    LayerNorm gains: shrinking those towards zero has no regularising purpose."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))
