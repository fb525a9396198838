"""A toy task that two attention heads learn far faster than one.

Defined in chapter 5, "Multi-head and cross-attention": every position of a random sequence
must report two earlier tokens, the one ``offsets[0]`` steps back and the one ``offsets[1]``
steps back. The model is a single causal attention layer with token and position embeddings
and a *linear* readout, small enough to train in a few seconds on one CPU thread.

One softmax row mixes the two values into a single vector. A linear readout can learn to untangle
it (the keys carry content, so the split can depend on which tokens sit in the two places), but
a one-head model takes several times more steps to get there. Two heads, one per offset, hand
the readout two separate vectors and learn the task within a few hundred steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from helpers.multihead import MultiHeadAttention

IGNORE = -100  # target of a position with no token that far back (cross_entropy's default)


def make_lookback_batch(
    batch_size: int,
    block_size: int,
    vocab_size: int,
    offsets: tuple[int, ...] = (1, 3),
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token sequences and, per position, the tokens ``offsets`` steps back.

    Returns:
        ``idx`` of shape ``(B, T)`` with tokens in ``[0, vocab_size)``, and ``targets`` of shape
        ``(B, T, len(offsets))``: ``targets[b, t, i] = idx[b, t - offsets[i]]``, or ``IGNORE``
        where ``t - offsets[i] < 0``.

    Raises:
        ValueError: on a non-positive size, an offset below 1, or an offset ``>= block_size``.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("block_size", block_size),
        ("vocab_size", vocab_size),
    ):
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if not offsets or min(offsets) < 1 or max(offsets) >= block_size:
        raise ValueError(
            f"offsets must lie in 1..block_size-1 = 1..{block_size - 1}, got {offsets}"
        )
    idx = torch.randint(vocab_size, (batch_size, block_size), generator=generator)
    targets = torch.full((batch_size, block_size, len(offsets)), IGNORE, dtype=torch.long)
    for i, offset in enumerate(offsets):
        targets[:, offset:, i] = idx[:, :-offset]
    return idx, targets


@dataclass
class ToyConfig:
    """Sizes of the toy model and its task."""

    vocab_size: int = 8
    block_size: int = 12
    n_embd: int = 32
    n_head: int = 1
    offsets: tuple[int, ...] = (1, 3)


class LookbackModel(nn.Module):
    """Token + position embedding, one causal multi-head attention layer, a linear readout.

    There is no feed-forward layer and no residual connection: the readout sees only what
    attention gathered, so the attention maps are the whole story.
    """

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.attn = MultiHeadAttention(config.n_embd, config.n_head, causal=True)
        self.readout = nn.Linear(config.n_embd, len(config.offsets) * config.vocab_size)

    def forward(self, idx: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        """``idx`` ``(B, T)`` -> logits ``(B, T, len(offsets), vocab_size)``."""
        if idx.dim() != 2 or idx.shape[1] > self.config.block_size:
            raise ValueError(
                f"expected idx of shape (B, T) with T <= {self.config.block_size}, "
                f"got {tuple(idx.shape)}"
            )
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        y = self.attn(x, need_weights=need_weights)
        return self.readout(y).view(B, T, len(self.config.offsets), self.config.vocab_size)


def lookback_accuracy(
    model: LookbackModel, idx: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Fraction of correct predictions for each offset, over positions that have a target."""
    with torch.no_grad():
        predicted = model(idx).argmax(dim=-1)  # (B, T, n_offsets)
    valid = targets != IGNORE
    correct = (predicted == targets) & valid
    return correct.sum(dim=(0, 1)).double() / valid.sum(dim=(0, 1)).double()


def train_lookback(
    config: ToyConfig, seed: int, steps: int = 600, batch_size: int = 64, lr: float = 1e-2
) -> tuple[LookbackModel, list[float]]:
    """Train a :class:`LookbackModel` with AdamW on fresh random batches; return it and its losses.

    Everything is drawn from generators seeded with ``seed``, so a run is reproducible on one
    thread.
    """
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    torch.manual_seed(seed)
    model = LookbackModel(config)
    data = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        idx, targets = make_lookback_batch(
            batch_size, config.block_size, config.vocab_size, config.offsets, data
        )
        logits = model(idx)
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses
