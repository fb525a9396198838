"""What attention learns: toy data, tiny models, per-head scores and head ablation.

Defined in chapter 13, "What attention learns". Top to bottom: sequences with a repeated random
segment (where copying pays) and a two-layer attention-only model trained on them (induction
heads); per-head scores (previous-token, prefix-matching) and their chance levels; ablating a head
through a forward hook; string reversal and a small encoder-decoder whose cross-attention learns
the alignment. Shapes: ``B`` batch, ``T`` time, ``C`` channels, ``H`` heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from helpers.multihead import MultiHeadAttention
from helpers.validation import check_non_negative_int, check_positive_int

__all__ = [
    "AttentionOnly",
    "CopyHistory",
    "Seq2Seq",
    "ablate_head",
    "attention_layers",
    "attention_patterns",
    "copy_losses",
    "copy_masks",
    "phase_change_step",
    "prefix_matching_score",
    "previous_token_score",
    "repeated_random_tokens",
    "reversal_batch",
    "train_copying",
    "train_reversal",
    "uniform_causal_weights",
]


# --------------------------------------------------------------------------------------------
# Data where copying pays: a random segment, then the same segment again.
# --------------------------------------------------------------------------------------------


def repeated_random_tokens(
    n: int,
    T: int,
    vocab_size: int,
    *,
    min_len: int,
    max_len: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of ``T`` uniformly random tokens in which the first ``L`` tokens are
    repeated right after themselves: ``x[L:2L] == x[:L]``; the rest is random again.

    ``L`` is drawn per sequence, uniformly in ``[min_len, max_len]`` (``max_len`` defaults to
    ``T // 2``), so the distance to the earlier copy is not a fixed number of positions: a head
    cannot find it by position alone. Returns ``(tokens (n, T), lengths (n,))``.
    """
    n = check_positive_int("n", n)
    T = check_positive_int("T", T)
    vocab_size = check_positive_int("vocab_size", vocab_size)
    min_len = check_positive_int("min_len", min_len)
    max_len = T // 2 if max_len is None else check_positive_int("max_len", max_len)
    if not min_len <= max_len <= T // 2:
        raise ValueError(
            f"need min_len <= max_len <= T // 2 (two copies fit in T={T}), "
            f"got min_len={min_len}, max_len={max_len}"
        )
    x = torch.randint(vocab_size, (n, T), generator=generator)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    pos = torch.arange(T)
    L = lengths[:, None]
    source = torch.where((pos >= L) & (pos < 2 * L), pos - L, pos)  # second copy reads the first
    return torch.gather(x, 1, source), lengths


def copy_masks(lengths: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which of the ``T - 1`` next-token predictions of each sequence fall in the first copy and
    which in the second. Prediction ``i`` reads ``x[:i+1]`` and predicts ``x[i+1]``.

    *first*: ``x[i+1]`` is in the first copy (``i + 1 <= L - 1``): a random token, unpredictable.
    *second*: ``x[i]`` and ``x[i+1]`` are both in the second copy (``L <= i <= 2L - 2``): the
    next token is the one that followed ``x[i]``'s earlier occurrence, ``x[i - L + 1]``.
    Returns two boolean ``(n, T - 1)`` masks.
    """
    T = check_positive_int("T", T)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or T < 2:
        raise ValueError(f"expected integer lengths (n,) and T >= 2, got {tuple(lengths.shape)}")
    if (lengths < 1).any() or (2 * lengths > T).any():
        raise ValueError(f"every length must be in [1, T // 2] = [1, {T // 2}]")
    i = torch.arange(T - 1)[None, :]
    L = lengths[:, None]
    return i <= L - 2, (i >= L) & (i <= 2 * L - 2)


# --------------------------------------------------------------------------------------------
# A transformer with attention only.
# --------------------------------------------------------------------------------------------


class AttentionOnly(nn.Module):
    """A GPT without MLPs and norms: token and learned position embeddings, ``n_layer`` residual
    layers of causal multi-head attention (``helpers.multihead.MultiHeadAttention``, chapter 5's
    layer; ``n_heads[l]`` heads in layer ``l``), an untied linear read-out:
    ``x = emb(idx) + pos``, then ``x = x + attn_l(x)`` for each layer, ``logits = head(x)``. The
    smallest model in which an induction head can form (with two layers).
    """

    def __init__(
        self, vocab_size: int, block_size: int, n_heads: Sequence[int], n_embd: int
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.block_size = check_positive_int("block_size", block_size)
        if isinstance(n_heads, int) or len(n_heads) == 0:
            raise ValueError(f"n_heads lists the heads of each layer, e.g. (4, 1); got {n_heads!r}")
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.layers = nn.ModuleList(MultiHeadAttention(n_embd, h) for h in n_heads)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        """Next-token logits ``(B, T, vocab_size)`` for the ``(B, T)`` ids ``idx``;
        ``need_weights`` keeps each layer's weights in its ``last_weights``."""
        if idx.dim() != 2 or idx.shape[1] > self.block_size or idx.dtype.is_floating_point:
            raise ValueError(
                f"expected integer ids (B, T) with T <= {self.block_size}, got {tuple(idx.shape)}"
            )
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = x + layer(x, need_weights=need_weights)
        return self.head(x)


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The attention layers of an :class:`AttentionOnly` model or of a ``helpers.model.GPT``,
    in order: modules with ``n_head``, ``head_size``, ``c_proj`` and ``last_weights``."""
    if isinstance(model, AttentionOnly):
        return list(model.layers)
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(hasattr(b, "attn") for b in blocks):
        raise ValueError(f"expected an AttentionOnly model or a GPT, got {type(model).__name__}")
    return [block.attn for block in blocks]


@torch.no_grad()
def attention_patterns(model: nn.Module, idx: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention weights on ``idx``: a list of ``(B, H, T, T)`` tensors."""
    was_training = model.training
    model.eval()
    model(idx, need_weights=True)
    model.train(was_training)
    return [layer.last_weights for layer in attention_layers(model)]


def copy_losses(
    model: nn.Module, tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[float, float]:
    """Mean next-token loss (nats) on the first copy and on the second copy (:func:`copy_masks`)
    of :func:`repeated_random_tokens` sequences ``tokens (n, T)``."""
    first, second = copy_masks(lengths, tokens.shape[1])
    with torch.no_grad():
        out = model(tokens[:, :-1])
        logits = out[0] if isinstance(out, tuple) else out
        loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    return loss[first].mean().item(), loss[second].mean().item()


@dataclass
class CopyHistory:
    """Held-out losses during :func:`train_copying`: first and second copy, at ``steps``."""

    steps: list[int] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    second: list[float] = field(default_factory=list)


def train_copying(
    model: AttentionOnly,
    steps: int,
    *,
    seed: int,
    held_out: tuple[torch.Tensor, torch.Tensor],
    min_len: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    eval_every: int = 10,
) -> CopyHistory:
    """Train ``model`` with AdamW (no weight decay) on fresh :func:`repeated_random_tokens`
    batches (their draws seeded by ``seed``), recording :func:`copy_losses` on ``held_out``
    ``(tokens, lengths)`` every ``eval_every`` steps and after the last one."""
    steps = check_non_negative_int("steps", steps)
    eval_every = check_positive_int("eval_every", eval_every)
    T = model.block_size + 1
    if held_out[0].shape[1] != T:
        raise ValueError(f"held-out sequences must have block_size + 1 = {T} tokens")
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    history = CopyHistory()
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            model.eval()
            first, second = copy_losses(model, *held_out)
            model.train()
            history.steps.append(step)
            history.first.append(first)
            history.second.append(second)
        if step == steps:
            break
        x, _ = repeated_random_tokens(batch_size, T, model.vocab_size, min_len=min_len,
                                      generator=g)  # fmt: skip
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return history


def phase_change_step(history: CopyHistory, threshold: float) -> int | None:
    """The first recorded step at which the second-copy loss is below ``threshold``, or ``None``
    if it never is."""
    for step, loss in zip(history.steps, history.second, strict=True):
        if loss < threshold:
            return step
    return None


# --------------------------------------------------------------------------------------------
# Per-head scores, and the chance level: the score of uniform causal attention.
# --------------------------------------------------------------------------------------------


def _check_weights(weights: torch.Tensor) -> None:
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
        raise ValueError("expected attention weights of shape (B, H, T, T)")
    if weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(f"expected square (T, T) patterns with T >= 2, got {tuple(weights.shape)}")


def uniform_causal_weights(B: int, H: int, T: int) -> torch.Tensor:
    """Attention that spreads each query evenly over itself and every earlier key: row ``i``
    holds ``1 / (i + 1)``. A score computed on it is the score's chance level."""
    for name, v in (("B", B), ("H", H), ("T", T)):
        check_positive_int(name, v)
    w = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    return w.expand(B, H, T, T).clone()


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Per head, the mean weight a query puts on the key just before it, ``w[i, i-1]``, over
    every query ``i >= 1`` and the batch. ``weights (B, H, T, T)`` -> ``(H,)``."""
    _check_weights(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def prefix_matching_score(
    weights: torch.Tensor, tokens: torch.Tensor, queries: torch.Tensor | None = None
) -> torch.Tensor:
    """Per head, how much attention goes to the tokens that followed earlier copies of the
    current token (Olsson et al.'s prefix matching).

    For query ``i``, the targets are the keys ``j + 1`` for every ``j < i`` with
    ``tokens[j] == tokens[i]``; its score is the total weight on them. The result averages over
    the queries that have at least one target (the others do not count) and over the batch.
    ``queries``, a boolean ``(B, T)`` mask, keeps only the queries it marks (for example those
    of the second copy, from :func:`copy_masks`).
    ``weights (B, H, T, T)``, ``tokens (B, T)`` -> ``(H,)``; ``nan`` if no query has a target.
    """
    _check_weights(weights)
    B, H, T, _ = weights.shape
    if tokens.shape != (B, T) or tokens.dtype.is_floating_point:
        raise ValueError(f"expected integer tokens of shape ({B}, {T}), got {tuple(tokens.shape)}")
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, i, j): token j equals token i
    earlier = torch.ones(T, T, dtype=torch.bool).tril(-1)  # j < i
    match = same & earlier
    target = torch.zeros_like(match)
    target[:, :, 1:] = match[:, :, :-1]  # key j + 1 is a target of query i
    has = target.any(dim=-1)  # (B, T): queries with a target
    if queries is not None:
        if queries.shape != (B, T) or queries.dtype != torch.bool:
            raise ValueError(f"expected a boolean queries mask of shape ({B}, {T})")
        has = has & queries
    per_query = (weights * target[:, None].to(weights.dtype)).sum(dim=-1)  # (B, H, T)
    n = has.sum()
    if n == 0:
        return torch.full((H,), math.nan, dtype=weights.dtype)
    return (per_query * has[:, None].to(weights.dtype)).sum(dim=(0, 2)) / n


# --------------------------------------------------------------------------------------------
# Ablation: remove one head's output with a forward pre-hook.
# --------------------------------------------------------------------------------------------


def ablate_head(layer: nn.Module, head: int) -> RemovableHandle:
    """Zero head ``head``'s output in a multi-head attention ``layer`` (``MultiHeadAttention``
    or the GPT's ``CausalSelfAttention``) until the returned handle's ``remove()``.

    The heads' outputs are concatenated, head ``h`` in channels ``h * head_size`` to
    ``(h + 1) * head_size - 1``, before the output projection ``c_proj``; a forward pre-hook on
    ``c_proj`` returns that input with the head's channels set to zero. No weight changes.
    """
    n_head = getattr(layer, "n_head", None)
    proj = getattr(layer, "c_proj", None)
    if n_head is None or not isinstance(proj, nn.Linear):
        raise ValueError("expected a multi-head attention layer with n_head and c_proj")
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_head:
        raise ValueError(f"head must be an int in [0, {n_head}), got {head!r}")
    hs = layer.head_size

    def zero_head(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        y = inputs[0].clone()
        y[..., head * hs : (head + 1) * hs] = 0.0
        return (y,)

    return proj.register_forward_pre_hook(zero_head)


# --------------------------------------------------------------------------------------------
# Cross-attention: reversing a string with a small encoder-decoder.
# --------------------------------------------------------------------------------------------


def reversal_batch(
    n: int, length: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random sources ``(n, length)`` in ``[0, vocab_size)``, the decoder's input (a start token
    ``vocab_size`` then the reversed source but its last token) and its target (the reversed
    source): output position ``j`` must read source position ``length - 1 - j``."""
    n = check_positive_int("n", n)
    length = check_positive_int("length", length)
    vocab_size = check_positive_int("vocab_size", vocab_size)
    src = torch.randint(vocab_size, (n, length), generator=generator)
    tgt = src.flip(1)
    start = torch.full((n, 1), vocab_size, dtype=src.dtype)
    return src, torch.cat([start, tgt[:, :-1]], dim=1), tgt


class Seq2Seq(nn.Module):
    """A one-layer encoder-decoder built from chapter 5's layers: the encoder embeds the source
    (tokens and learned positions) and applies one non-causal self-attention; the decoder embeds
    its input, applies one causal self-attention and one single-head cross-attention
    (``MultiHeadAttention(causal=False)`` called with ``context``), each a residual branch, then
    a linear read-out. ``cross.last_weights`` (after ``need_weights=True``) is the alignment."""

    def __init__(self, vocab_size: int, length: int, n_embd: int = 32, n_head: int = 2) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.length = check_positive_int("length", length)
        self.src_emb = nn.Embedding(vocab_size, n_embd)
        self.tgt_emb = nn.Embedding(vocab_size + 1, n_embd)  # + the start token
        self.src_pos = nn.Embedding(length, n_embd)
        self.tgt_pos = nn.Embedding(length, n_embd)
        self.encoder = MultiHeadAttention(n_embd, n_head, causal=False)
        self.decoder = MultiHeadAttention(n_embd, n_head, causal=True)
        self.cross = MultiHeadAttention(n_embd, 1, causal=False)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor:
        """Logits ``(B, length, vocab_size)`` for each target position."""
        if src.shape != tgt_in.shape or src.dim() != 2 or src.shape[1] != self.length:
            raise ValueError(
                f"expected src and tgt_in of shape (B, {self.length}), "
                f"got {tuple(src.shape)} and {tuple(tgt_in.shape)}"
            )
        pos = torch.arange(self.length, device=src.device)
        s = self.src_emb(src) + self.src_pos(pos)
        s = s + self.encoder(s)
        t = self.tgt_emb(tgt_in) + self.tgt_pos(pos)
        t = t + self.decoder(t)
        t = t + self.cross(t, s, need_weights=need_weights)
        return self.head(t)


def train_reversal(
    model: Seq2Seq, steps: int, *, seed: int, batch_size: int = 32, lr: float = 3e-3
) -> list[float]:
    """Train ``model`` with AdamW on fresh :func:`reversal_batch` batches (seeded by ``seed``);
    return the training loss of every step."""
    steps = check_non_negative_int("steps", steps)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(steps):
        src, tgt_in, tgt = reversal_batch(batch_size, model.length, model.vocab_size, g)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
