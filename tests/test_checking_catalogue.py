"""A catalogue of answers that are wrong in general but can look right on a few inputs.

For every checker: answers that pass on small, well-behaved inputs but fail on exact zeros, ties,
scores of +-1000, sequences longer than the chapter's, a second draw from one generator, a
gradient, or an input they overwrite (each must be rejected, on the property named, with a hint
that names what the answer did, or a neutral hint when the checker cannot reproduce it); unusual
answers that are right (each must be accepted); and the hints given to the wrong answers of
``test_checking``'s tables. Together with those tables, every checker meets at least 8 wrong and
2 right answers.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_checking import (
    CHECKERS,
    _batch,
    _check,
    _future,
    assert_header,
    attention_book,
    attention_loop,
    avg_cumsum,
    batch_book,
    block_book,
    block_written_out,
    cached_book,
    merge_book,
    rope_complex,
    softmax_book,
    split_book,
)

import helpers.checking._core as core
from helpers.checking import check_get_batch, check_split_heads
from helpers.masking import causal_mask
from helpers.model import Block
from helpers.positional import sinusoidal_encoding
from helpers.rope import apply_rope

Tensor = torch.Tensor

# A hint that names no mistake: the checker shows input, expected and got and restates the rule.
NEUTRAL = "<neutral>"
NAN = "Your function returned nan or inf on this input"
GRAD = "cut the path of the gradient"
GRAD_VALUES = "The output is right but its gradient is not"
IN_PLACE = "in place"
CALLS_BLOCK = "calls the block itself, which is not the exercise"
UNDERFLOW = "exp underflows to 0 for every visible key and the row becomes 0 / 0 = nan"
# A function whose output repeats an earlier one: a cache keyed by the shape of its input.
CACHED = (
    "returned exactly what it returned for an earlier input of the same shape with other values"
)
RENORMALISE = "a softmax over all the keys, then zeroing the future and dividing by the row sums"


def by_shape(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Remembers the first output for each input shape and returns it again."""
    memo: dict[Any, Any] = {}

    def remembered(*args: Any) -> Any:
        key = tuple(tuple(a.shape) for a in args if isinstance(a, Tensor))
        if key not in memo:
            memo[key] = fn(*args)
        return memo[key]

    return remembered


def no_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The right numbers, computed under torch.no_grad()."""
    return torch.no_grad()(fn)


def via_numpy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The right numbers, taken through NumPy and back."""
    return lambda *args: torch.from_numpy(fn(*args).detach().numpy())


def _exit(*args: Any, **kwargs: Any) -> Any:
    sys.exit("done")


# Chapter 1 -----------------------------------------------------------------------------------


def avg_fixed_mask(x: Tensor) -> Tensor:
    """The weights built once at 16 tokens and sliced: breaks for longer sequences."""
    w = torch.ones(16, 16).tril()[: x.shape[1], : x.shape[1]]
    return (w / w.sum(dim=1, keepdim=True)) @ x


def avg_in_place(x: Tensor) -> Tensor:
    counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
    return x.cumsum_(dim=1) / counts  # overwrites the caller's x


def avg_float64_loop(x: Tensor) -> Tensor:
    """Unusual but right: a Python loop over time in float64, cast back."""
    out = torch.empty_like(x, dtype=torch.float64)
    for t in range(x.shape[1]):
        out[:, t] = x[:, : t + 1].double().mean(dim=1)
    return out.to(x.dtype)


# Chapter 2 -----------------------------------------------------------------------------------


def softmax_mask_by_value(s: Tensor) -> Tensor:
    """tril, then hide every score equal to 0: hides visible scores that are exactly 0 too."""
    w = torch.tril(s)
    return w.masked_fill(w == 0, -math.inf).softmax(dim=-1)


def softmax_no_max(s: Tensor) -> Tensor:
    """exp without subtracting the row maximum: overflows above about 88."""
    e = torch.exp(s.masked_fill(_future(s.shape[-1]), -math.inf))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_global_max(s: Tensor) -> Tensor:
    """One maximum for the whole tensor: rows far below it underflow to 0 / 0."""
    m = s.masked_fill(_future(s.shape[-1]), -math.inf)
    e = torch.exp(m - m.max())
    return e / e.sum(dim=-1, keepdim=True)


def softmax_fixed_mask(s: Tensor) -> Tensor:
    T = s.shape[-1]
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)[:T, :T]
    return s.masked_fill(future, -math.inf).softmax(dim=-1)


def softmax_where(s: Tensor) -> Tensor:
    """Unusual but right: torch.where with a lower-triangular mask."""
    visible = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    return torch.where(visible, s, torch.tensor(-math.inf)).softmax(dim=-1)


def softmax_manual(s: Tensor) -> Tensor:
    """Unusual but right: the softmax written out, the visible row maximum subtracted."""
    m = s.masked_fill(_future(s.shape[-1]), -math.inf)
    e = torch.exp(m - m.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


# Chapter 3 -----------------------------------------------------------------------------------


def _scores(q: Tensor, k: Tensor) -> Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def attn_mask_by_value(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    w = torch.tril(_scores(q, k))
    return w.masked_fill(w == 0, -math.inf).softmax(dim=-1) @ v


def attn_no_max(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    e = torch.exp(_scores(q, k).masked_fill(_future(q.shape[-2]), -math.inf))
    return e / e.sum(dim=-1, keepdim=True) @ v


def attn_fixed_mask(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T = q.shape[-2]
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)[:T, :T]
    return _scores(q, k).masked_fill(future, -math.inf).softmax(dim=-1) @ v


def attn_dropout(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    w = _scores(q, k).masked_fill(_future(q.shape[-2]), -math.inf).softmax(dim=-1)
    return F.dropout(w, p=0.2, training=True) @ v


def attn_scaled_after_softmax(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    w = (q @ k.transpose(-2, -1)).masked_fill(_future(q.shape[-2]), -math.inf).softmax(dim=-1)
    return w / math.sqrt(q.shape[-1]) @ v


def attn_in_place(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    q /= math.sqrt(q.shape[-1])  # scales the caller's q
    return (q @ k.transpose(-2, -1)).masked_fill(_future(q.shape[-2]), -math.inf).softmax(-1) @ v


def attn_manual(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Unusual but right: einsum scores, softmax written out with the row maximum."""
    s = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
    s = s.masked_fill(_future(q.shape[-2]), -math.inf)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)) @ v


# Chapter 4 -----------------------------------------------------------------------------------


def scores_standardised(q: Tensor, k: Tensor) -> Tensor:
    """Scores rescaled to mean 0 and variance 1 over the whole tensor: variance ~1 always."""
    s = q @ k.transpose(-2, -1)
    return (s - s.mean()) / s.std(correction=0).clamp(min=1e-6)


def scores_in_place(q: Tensor, k: Tensor) -> Tensor:
    q /= math.sqrt(q.shape[-1])
    return q @ k.transpose(-2, -1)


def scores_baddbmm(q: Tensor, k: Tensor) -> Tensor:
    """Unusual but right: torch.baddbmm with alpha = 1 / sqrt(head_size)."""
    out = torch.zeros(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype)
    return torch.baddbmm(out, q, k.transpose(1, 2), beta=0.0, alpha=q.shape[-1] ** -0.5)


# Chapter 5 -----------------------------------------------------------------------------------


def merge_in_place(y: Tensor) -> Tensor:
    B, n_head, T, hs = y.shape
    return y.transpose_(1, 2).reshape(B, T, n_head * hs)  # transposes the caller's y


def split_unflatten(x: Tensor, n_head: int) -> Tensor:
    """Unusual but right: unflatten the channels, then movedim."""
    return x.unflatten(-1, (n_head, -1)).movedim(2, 1)


def merge_flatten(y: Tensor) -> Tensor:
    return y.movedim(1, 2).flatten(-2)


# Chapter 6 -----------------------------------------------------------------------------------


def pe_from_one(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """Positions 1..T: still a rotation from row to row, but not the formula."""
    return sinusoidal_encoding(T + 1, d_model, base)[1:]


def pe_renamed_base(T: int, d_model: int, b: float = 10000.0) -> Tensor:
    return sinusoidal_encoding(T, d_model, b)


def pe_ignores_base(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    return sinusoidal_encoding(T, d_model)


def pe_polar(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """Unusual but right: e^(i angle) as a complex number, real part cos and imaginary sin."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    angle = pos * base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.polar(torch.ones_like(angle), angle)
    return torch.stack([z.imag, z.real], dim=-1).flatten(1).float()


# Chapter 7 -----------------------------------------------------------------------------------


def batch_reseeds_global(d: Tensor, b: int, n: int, generator: torch.Generator) -> Any:
    torch.manual_seed(1337)
    return _batch(d, b, n, None)


def batch_private_generator(d: Tensor, b: int, n: int, generator: torch.Generator) -> Any:
    return _batch(d, b, n, torch.Generator().manual_seed(1337))


def batch_reseeds_generator(d: Tensor, b: int, n: int, generator: torch.Generator) -> Any:
    generator.manual_seed(1337)
    return _batch(d, b, n, generator)


def batch_renamed(d: Tensor, b: int, n: int, rng: torch.Generator) -> Any:
    return _batch(d, b, n, rng)


def batch_in_place(d: Tensor, b: int, n: int, generator: torch.Generator) -> Any:
    d[:] = d.roll(1)  # shifts the caller's data
    return _batch(d, b, n, generator)


def batch_unfold(d: Tensor, block_size: int, batch_size: int, generator: torch.Generator) -> Any:
    """Unusual but right: every window by unfold, then a random choice of rows."""
    windows = d.unfold(0, block_size + 1, 1)  # (len(d) - block_size, block_size + 1)
    rows = windows[torch.randint(len(windows), (batch_size,), generator=generator)]
    return rows[:, :-1], rows[:, 1:]


# Chapter 8 -----------------------------------------------------------------------------------


def block_detached_branch(block: Block, x: Tensor) -> Tensor:
    x = x + block.attn(block.ln_1(x)).detach()
    return x + block.mlp(block.ln_2(x))


def block_in_place(block: Block, x: Tensor) -> Tensor:
    x += block.attn(block.ln_1(x))  # adds to the caller's x
    return x + block.mlp(block.ln_2(x))


def block_edits_weights(block: Block, x: Tensor) -> Tensor:
    block.ln_1.weight.data.fill_(1.0)  # overwrites the block's learned weights
    return block_book(block, x)


def block_sequential(block: Block, x: Tensor) -> Tensor:
    """Unusual but right: the two residual branches as a loop over (norm, layer) pairs."""
    for norm, layer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        x = x + layer(norm(x))
    return x


# Chapter 9 -----------------------------------------------------------------------------------


def _cached_scores(q: Tensor, k: Tensor) -> Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def cached_mask_by_value(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new, T = q.shape[-2], k.shape[-2]
    w = torch.tril(_cached_scores(q, k), diagonal=T - T_new)
    return w.masked_fill(w == 0, -math.inf).softmax(dim=-1) @ v


def cached_no_max(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new, T = q.shape[-2], k.shape[-2]
    s = _cached_scores(q, k).masked_fill(~causal_mask(T_new, T_past=T - T_new), -math.inf)
    e = torch.exp(s)
    return e / e.sum(dim=-1, keepdim=True) @ v


def cached_fixed_mask(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new, T = q.shape[-2], k.shape[-2]
    visible = torch.ones(16, 16, dtype=torch.bool).tril()[T - T_new : T, :T]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)


def cached_in_place(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    k /= math.sqrt(q.shape[-1])  # scales the caller's cache
    T_new, T = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-2, -1)).masked_fill(~causal_mask(T_new, T_past=T - T_new), -math.inf)
    return s.softmax(dim=-1) @ v


def cached_bottom_right(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Unusual but right: tril with the diagonal moved by T_past."""
    T_new, T = q.shape[-2], k.shape[-2]
    visible = torch.ones(T_new, T, dtype=torch.bool).tril(diagonal=T - T_new)
    s = _cached_scores(q, k).masked_fill(~visible, -math.inf)
    return s.softmax(dim=-1) @ v


# Chapter 10 ----------------------------------------------------------------------------------


def rope_ignores_positions(x: Tensor, positions: Tensor) -> Tensor:
    return apply_rope(x, torch.arange(x.shape[-2]))


def rope_in_place(x: Tensor, positions: Tensor) -> Tensor:
    out = apply_rope(x, positions)
    x.copy_(out)  # writes the result into the caller's x
    return x


def rope_matrix(x: Tensor, positions: Tensor) -> Tensor:
    """Unusual but right: one 2x2 rotation matrix per position and pair."""
    hs = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    a = positions.double()[:, None] * freqs  # (T, hs / 2)
    rot = torch.stack([a.cos(), -a.sin(), a.sin(), a.cos()], dim=-1).unflatten(-1, (2, 2))
    pairs = x.double().unflatten(-1, (-1, 2))  # (..., T, hs / 2, 2)
    return (rot @ pairs[..., None])[..., 0].flatten(-2).to(x.dtype)


# Mistakes that only inputs of another dtype, magnitude, size or layout reveal -----------------


def avg_float64_counts(x: Tensor) -> Tensor:
    """Counts made in float64: a float32 input comes back as float64."""
    counts = torch.arange(1, x.shape[1] + 1, dtype=torch.float64).view(1, -1, 1)
    return x.cumsum(dim=1) / counts


def softmax_fill_minus_1e9(s: Tensor) -> Tensor:
    """A large finite fill value: right until the visible scores are below it."""
    return s.masked_fill(_future(s.shape[-1]), -1e9).softmax(dim=-1)


def softmax_zero_renormalise(s: Tensor) -> Tensor:
    """Softmax over all the keys, zero the future, renormalise: right where exp keeps the visible
    keys, 0 / 0 where a future score is far above them."""
    w = s.softmax(dim=-1).masked_fill(_future(s.shape[-1]), 0.0)
    return w / w.sum(dim=-1, keepdim=True)


def softmax_in_float32(s: Tensor) -> Tensor:
    """softmax(..., dtype=torch.float32) for stability: float64 scores lose their dtype."""
    return torch.softmax(s.masked_fill(_future(s.shape[-1]), -math.inf), -1, dtype=torch.float32)


def softmax_rows_by_view(s: Tensor) -> Tensor:
    """Every row flattened with view: fails on a non-contiguous input."""
    T = s.shape[-1]
    rows = s.view(-1, T).unflatten(0, s.shape[:-1]).masked_fill(_future(T), -math.inf)
    return rows.softmax(dim=-1)


def softmax_divides_in_place(s: Tensor) -> Tensor:
    """Right numbers, but the division overwrites exp's output, which backward needs."""
    m = s.masked_fill(_future(s.shape[-1]), -math.inf)
    e = torch.exp(m - m.amax(dim=-1, keepdim=True))
    e /= e.sum(dim=-1, keepdim=True)
    return e


def attn_fill_minus_1e9(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return _scores(q, k).masked_fill(_future(q.shape[-2]), -1e9).softmax(dim=-1) @ v


def attn_zero_renormalise(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The causal softmax as softmax, zero the future, renormalise."""
    return softmax_zero_renormalise(_scores(q, k)) @ v


def attn_one_line_sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Right, but not the exercise: PyTorch's attention in one call."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def pe_table_5000(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The table of the usual tutorial: built once for max_len = 5000, sliced to [:T]."""
    return sinusoidal_encoding(5000, d_model, base)[:T]


def rope_float32_angles(x: Tensor, positions: Tensor) -> Tensor:
    """Angles in float32, whatever the input's dtype: float64 gets float32 precision."""
    hs = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float32) / hs)
    angle = positions.float()[:, None] * freqs
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


_ROPE_TABLE = 10000.0 ** (-torch.arange(0, 96, 2, dtype=torch.float64) / 96)


def rope_table_2048(x: Tensor, positions: Tensor) -> Tensor:
    """Cosines and sines computed once for 2048 positions and indexed by position."""
    hs = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    table = torch.arange(2048, dtype=torch.float64)[:, None] * freqs
    angle = table[positions]
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def rope_flattened_by_view(x: Tensor, positions: Tensor) -> Tensor:
    """Leading dimensions merged with view: fails on a transposed (non-contiguous) input."""
    flat = x.view(-1, x.shape[-2], x.shape[-1]).view(-1, x.shape[-1])
    return apply_rope(flat.view(x.shape), positions)


def block_switches_to_eval(block: Block, x: Tensor) -> Tensor:
    block.eval()  # "no dropout while checking": the caller's block stays in eval mode
    return block_book(block, x)


def batch_leftover_seed(d: Tensor, b: int, n: int, generator: torch.Generator) -> Any:
    torch.manual_seed(1337)  # left from a notebook cell; the draws use the generator
    return _batch(d, b, n, generator)


def cached_fill_minus_1e9(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new, T = q.shape[-2], k.shape[-2]
    visible = causal_mask(T_new, T_past=T - T_new)
    return _cached_scores(q, k).masked_fill(~visible, -1e9).softmax(dim=-1) @ v


# --------------------------------------------------------------------------------------------
# The catalogue: {checker: {label: (answer, property key, a fragment of the hint)}}
# --------------------------------------------------------------------------------------------

WRONG: dict[str, dict[str, tuple[Any, str, str]]] = {
    "running_average": {
        "fixed_mask_sliced": (avg_fixed_mask, "mean", "your function raised RuntimeError"),
        "output_cached_by_shape": (by_shape(avg_cumsum), "mean", CACHED),
        "no_grad": (no_grad(avg_cumsum), "mean", GRAD),
        "through_numpy": (via_numpy(avg_cumsum), "mean", "NumPy has no bfloat16"),
        "overwrites_input": (avg_in_place, "shape", IN_PLACE),
        "float64_for_float32": (avg_float64_counts, "mean", "returns float64 for a float32"),
    },
    "causal_softmax": {
        "masks_by_value": (softmax_mask_by_value, "future_zero", NAN),
        "no_max_subtracted": (softmax_no_max, "future_zero", NAN),
        "one_max_for_the_tensor": (softmax_global_max, "future_zero", "the whole tensor"),
        "fixed_mask_sliced": (softmax_fixed_mask, "future_zero", "RuntimeError"),
        "output_cached_by_shape": (by_shape(softmax_book), "future_zero", CACHED),
        "no_grad": (no_grad(softmax_book), "softmax", GRAD),
        "log_softmax": (
            lambda s: F.log_softmax(s.masked_fill(_future(s.shape[-1]), -math.inf), -1),
            "shape",
            "log_softmax",
        ),
        "fills_with_minus_1e9": (softmax_fill_minus_1e9, "future_zero", "such as -1e9"),
        "softmax_zero_renormalise": (softmax_zero_renormalise, "future_zero", UNDERFLOW),
        "float32_for_float64": (softmax_in_float32, "future_zero", "returns float32 for a float64"),
        "rows_by_view": (softmax_rows_by_view, "softmax", "view() needs a contiguous tensor"),
        "divides_in_place": (
            softmax_divides_in_place,
            "softmax",
            "overwrote a value that backward",
        ),
    },
    "causal_attention": {
        "masks_by_value": (attn_mask_by_value, "weights_sum", NAN),
        "no_max_subtracted": (attn_no_max, "weights_sum", NAN),
        "fixed_mask_sliced": (attn_fixed_mask, "weights_sum", "RuntimeError"),
        "output_cached_by_shape": (by_shape(attention_loop), "weights_sum", CACHED),
        "dropout": (attn_dropout, "shape", "dropout in training mode"),
        "scaled_after_softmax": (attn_scaled_after_softmax, "weights_sum", "after the softmax"),
        "weights_times_k": (
            lambda q, k, v: (
                _scores(q, k).masked_fill(_future(q.shape[-2]), -math.inf).softmax(-1) @ k
            ),
            "weights_sum",
            "weights @ k",
        ),
        "through_numpy": (via_numpy(attention_loop), "matches_torch", "NumPy has no bfloat16"),
        "overwrites_input": (attn_in_place, "shape", IN_PLACE),
        "fills_with_minus_1e9": (attn_fill_minus_1e9, "matches_torch", "such as -1e9"),
        "softmax_zero_renormalise": (attn_zero_renormalise, "weights_sum", UNDERFLOW),
    },
    "scaled_scores": {
        "standardised": (scores_standardised, "rows_and_columns", NEUTRAL),
        "output_cached_by_shape": (
            by_shape(lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])),
            "formula",
            CACHED,
        ),
        "no_grad": (no_grad(lambda q, k: _scores(q, k)), "formula", GRAD),
        "overwrites_input": (scores_in_place, "shape", IN_PLACE),
    },
    "split_heads": {
        "split_cached_by_shape": ((by_shape(split_book), merge_book), "split_slices", NEUTRAL),
        "split_without_grad": ((no_grad(split_book), merge_book), "per_head_loop", GRAD),
        "merge_overwrites_input": ((split_book, merge_in_place), "merge", IN_PLACE),
    },
    "sinusoidal_encoding": {
        "positions_from_1": (pe_from_one, "formula", "positions 1..T"),
        "renamed_base": (pe_renamed_base, "shift", "keep its parameter names"),
        "ignores_base": (pe_ignores_base, "shift", "ignores the base argument"),
        "table_of_5000": (pe_table_5000, "bounded", "computed in advance"),
    },
    "get_batch": {
        "reseeds_global_state": (batch_reseeds_global, "shape", "no torch.manual_seed"),
        "private_generator": (batch_private_generator, "reproducible", "same batch"),
        "reseeds_the_generator": (batch_reseeds_generator, "reproducible", "same batch"),
        "renamed_generator": (batch_renamed, "shape", "passes generator=... by keyword"),
        "overwrites_data": (batch_in_place, "shape", IN_PLACE),
        "leftover_global_seed": (batch_leftover_seed, "shape", "no torch.manual_seed"),
    },
    "block_forward": {
        "detached_branch": (block_detached_branch, "matches_block", GRAD_VALUES),
        "no_grad": (no_grad(block_book), "matches_block", GRAD),
        "overwrites_input": (block_in_place, "shape", IN_PLACE),
        "overwrites_weights": (block_edits_weights, "shape", "ln_1.weight"),
        "output_cached_by_shape": (by_shape(block_book), "residual", CACHED),
        "switches_to_eval": (block_switches_to_eval, "shape", "Leave the module's mode"),
        # Right numbers without writing the block: its own forward does the work.
        "calls_the_block": (lambda block, x: block(x), "shape", CALLS_BLOCK),
        "calls_its_forward": (lambda block, x: block.forward(x), "shape", CALLS_BLOCK),
        "calls_Block_forward": (lambda block, x: Block.forward(block, x), "shape", CALLS_BLOCK),
    },
    "cached_attention": {
        "masks_by_value": (cached_mask_by_value, "shape", NAN),
        "no_max_subtracted": (cached_no_max, "shape", NAN),
        "fixed_mask_sliced": (cached_fixed_mask, "shape", "your function raised"),
        "output_cached_by_shape": (by_shape(cached_book), "no_cache", CACHED),
        "overwrites_cache": (cached_in_place, "shape", IN_PLACE),
        "fills_with_minus_1e9": (cached_fill_minus_1e9, "with_cache", "such as -1e9"),
    },
    "rope": {
        "ignores_positions": (rope_ignores_positions, "identity", "positions 0..T-1"),
        "output_cached_by_shape": (by_shape(apply_rope), "identity", CACHED),
        "no_grad": (no_grad(apply_rope), "reference", GRAD),
        "overwrites_input": (rope_in_place, "shape", IN_PLACE),
        "float32_angles": (rope_float32_angles, "reference", "only to about float32 precision"),
        "table_of_2048": (rope_table_2048, "reference", "IndexError"),
        "flattened_by_view": (rope_flattened_by_view, "reference", "view() needs a contiguous"),
    },
}

RIGHT: dict[str, dict[str, Any]] = {
    "running_average": {"float64_loop": avg_float64_loop},
    "causal_softmax": {"where": softmax_where, "written_out": softmax_manual},
    "causal_attention": {"einsum_written_out": attn_manual},
    "scaled_scores": {"baddbmm": scores_baddbmm},
    "split_heads": {"unflatten_movedim": (split_unflatten, merge_flatten)},
    "sinusoidal_encoding": {"polar": pe_polar},
    "get_batch": {"unfold": batch_unfold, "book": batch_book},
    "block_forward": {"loop_over_branches": block_sequential, "written_out": block_written_out},
    "cached_attention": {"tril_moved_diagonal": cached_bottom_right},
    "rope": {"rotation_matrices": rope_matrix, "complex": rope_complex},
}

# What went wrong, for the wrong answers that do not simply fail a property: the report says
# so first ("Your function raised an exception.", "... returned nan or inf.", ...).
KIND: dict[tuple[str, str], str] = {
    ("running_average", "fixed_mask_sliced"): "raised",
    ("running_average", "through_numpy"): "raised",
    ("running_average", "overwrites_input"): "changed_input",
    ("causal_softmax", "masks_by_value"): "nan",
    ("causal_softmax", "no_max_subtracted"): "nan",
    ("causal_softmax", "one_max_for_the_tensor"): "nan",
    ("causal_softmax", "fixed_mask_sliced"): "raised",
    ("causal_softmax", "log_softmax"): "nan",
    ("causal_softmax", "rows_by_view"): "raised",
    ("causal_softmax", "softmax_zero_renormalise"): "nan",
    ("causal_attention", "masks_by_value"): "nan",
    ("causal_attention", "softmax_zero_renormalise"): "nan",
    ("causal_attention", "no_max_subtracted"): "nan",
    ("causal_attention", "fixed_mask_sliced"): "raised",
    ("causal_attention", "dropout"): "side_effect",
    ("causal_attention", "through_numpy"): "raised",
    ("causal_attention", "overwrites_input"): "changed_input",
    ("scaled_scores", "overwrites_input"): "changed_input",
    ("split_heads", "merge_overwrites_input"): "changed_input",
    ("sinusoidal_encoding", "renamed_base"): "raised",
    ("get_batch", "reseeds_global_state"): "side_effect",
    ("get_batch", "renamed_generator"): "raised",
    ("get_batch", "overwrites_data"): "changed_input",
    ("get_batch", "leftover_global_seed"): "side_effect",
    ("block_forward", "overwrites_input"): "changed_input",
    ("block_forward", "overwrites_weights"): "changed_input",
    ("block_forward", "switches_to_eval"): "changed_input",
    ("block_forward", "calls_the_block"): "not_the_exercise",
    ("block_forward", "calls_its_forward"): "not_the_exercise",
    ("block_forward", "calls_Block_forward"): "not_the_exercise",
    ("cached_attention", "masks_by_value"): "nan",
    ("cached_attention", "no_max_subtracted"): "nan",
    ("cached_attention", "fixed_mask_sliced"): "raised",
    ("cached_attention", "overwrites_cache"): "changed_input",
    ("rope", "overwrites_input"): "changed_input",
    ("rope", "table_of_2048"): "raised",
    ("rope", "flattened_by_view"): "raised",
}

# The hints given to the wrong answers of test_checking's tables.
HINTS: dict[str, dict[str, str]] = {
    "running_average": {
        "includes_future": "mean over all T tokens",
        "divides_by_T": "divided by T",
        "wrong_dim": "over the batch",
        "excludes_self": "without t itself",
        "sum_not_mean": "running sum, not the mean",
        "returns_B_C": NEUTRAL,
        "newest_counts_twice": NEUTRAL,
    },
    "causal_softmax": {
        "forgets_mask": "softmax with no mask",
        "masks_with_zero": "masking the future scores with 0",
        "softmax_over_queries": "over the queries",
        "masks_after_softmax": "zeroing the future after the softmax",
        "masks_last_column": NEUTRAL,
        "hides_itself": "hides the diagonal",
        "squeezes": NEUTRAL,
        "uniform_over_visible": "its output does not depend on the input's values",
    },
    "causal_attention": {
        "forgets_mask": "without the mask",
        "masks_with_zero": "masking future scores with 0",
        "softmax_over_queries": "over the queries",
        "no_scaling": "matches no scaling",
        "scales_by_head_size": "dividing by head_size",
        "scales_by_sqrt_C": NEUTRAL,
        "scales_by_sqrt_d_v": "dividing by sqrt(d_v)",
        "returns_tuple": "not a tuple",
    },
    "scaled_scores": {
        "no_scaling": "match no scaling",
        "scales_by_head_size": "dividing by head_size",
        "scales_by_sqrt_C": "dividing by sqrt(32)",
        "scales_by_C": "dividing by 32",
        "keys_in_rows": "match k @ q^T",
        "transposes_all_dims": NEUTRAL,
        "off_by_two": NEUTRAL,
    },
    "split_heads": {
        "split_view_without_transpose": "a direct view(B, n_head, T, head_size) mixes tokens",
        "split_interleaved_channels": "every n_head-th channel",
        "split_transposes_wrong_axes": NEUTRAL,
        "merge_without_transpose": "move the head axis back",
        "merge_view_not_contiguous": "view() needs a contiguous tensor",
        "merge_wrong_axes": "swapping T with head_size",
    },
    "sinusoidal_encoding": {
        "split_over_positions": "not sin for even positions",
        "sin_cos_halves": "every sine first",
        "exponent_i_not_2i": "base**(-i/d_model)",
        "base_1000": "matches base 1000",
        "forgets_position": NEUTRAL,
        "unscaled_positions": NEUTRAL,
        "transposed": NEUTRAL,
    },
    "get_batch": {
        "targets_not_shifted": NEUTRAL,
        "targets_shifted_inside_x": NEUTRAL,
        "windows_past_the_end": NEUTRAL,
        "windows_wrap_around": NEUTRAL,
        "ignores_generator": "not from the global random state",
        "misses_last_start": NEUTRAL,
        "always_starts_at_0": "same batch",
        "float_tokens": NEUTRAL,
    },
    "block_forward": {
        "post_ln": "matches post-LN",
        "missing_residuals": "without residual connections",
        "missing_mlp_residual": "without residual connections",
        "one_layer_norm_twice": "using ln_1 before the MLP",
        "parallel_branches": "both branches reading x",
        "unweighted_layer_norm": "without the block's learned weights",
        "returns_tuple": "not a tuple",
    },
    "cached_attention": {
        "is_causal_forgets_offset": "as if T_past were 0",
        "top_left_mask": "as if T_past were 0",
        "no_mask": "attention without a mask",
        "ignores_cache": "over the new tokens only",
        "no_scaling": "matches no scaling",
        "transposed_output": NEUTRAL,
    },
    "rope": {
        "halves_wrong_angle": NEUTRAL,
        "halves_instead_of_pairs": "the two halves",
        "base_1000": "matches base 1000",
        "exponent_i_not_2i": "exponent -i/head_size",
        "turns_backwards": "turning the other way",
        "adds_positions": "rotate, do not add",
        "cos_only": "cos on both dimensions",
        "one_frequency": "one frequency for every pair",
        "returns_complex": NEUTRAL,
        "normalises_positions": NEUTRAL,
    },
}


def _hint(report: str) -> str:
    """The hint of a report, its lines joined."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  hint:"))
    hint = [lines[start][len("  hint:") :].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith("            "):
            break
        hint.append(line.strip())
    return " ".join(hint)


def _assert_hint(name: str, report: str, fragment: str) -> None:
    hint = _hint(report)
    result_names_a_mistake = hint.startswith("Your ") and " match" in hint.split(":")[0]
    if fragment == NEUTRAL:
        assert not result_names_a_mistake, f"a neutral hint was expected:\n{report}"
    else:
        assert fragment in hint or fragment in report, f"{fragment!r} not in:\n{report}"


def _wrong_cases() -> list[Any]:
    return [
        pytest.param(name, label, id=f"{name}-{label}")
        for name, table in WRONG.items()
        for label in table
    ]


@pytest.mark.parametrize(("name", "label"), _wrong_cases())
def test_rejects_what_is_wrong_in_general(
    name: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer, key, fragment = WRONG[name][label]
    result = _check(name, answer)
    out = capsys.readouterr().out
    assert not result, f"{label!r} was accepted:\n{out}"
    assert result.failed_key == key, f"{label!r} failed on {result.failed_key!r}:\n{out}"
    assert result.kind == KIND.get((name, label), "property"), out
    assert_header(result, out)
    _assert_hint(name, out, fragment)
    assert "Traceback" not in out
    if result.kind == "raised" and "by keyword" not in out:  # the answer's line that raised
        assert "\n  at:       line " in out, out


@pytest.mark.parametrize(
    ("name", "label"),
    [pytest.param(n, label, id=f"{n}-{label}") for n, t in RIGHT.items() for label in t],
)
def test_accepts_unusual_right_answers(
    name: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _check(name, RIGHT[name][label])
    out = capsys.readouterr().out
    assert result, f"{label!r} was rejected:\n{out}"


@pytest.mark.parametrize(
    ("name", "label"),
    [pytest.param(n, label, id=f"{n}-{label}") for n, t in HINTS.items() for label in t],
)
def test_hints_name_the_mistake_made(
    name: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer, _ = CHECKERS[name][2][label]
    _check(name, answer)
    _assert_hint(name, capsys.readouterr().out, HINTS[name][label])


@pytest.mark.parametrize("name", list(CHECKERS))
def test_catalogue_size(name: str) -> None:
    """At least 8 wrong and 2 right answers per checker, and every table answer has a hint."""
    _, right, wrong = CHECKERS[name]
    assert len(wrong) + len(WRONG[name]) >= 8
    assert len(right) + len(RIGHT[name]) >= 2
    assert set(HINTS[name]) == set(wrong)


@pytest.mark.parametrize("name", list(CHECKERS))
def test_system_exit_is_reported(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    answer = (_exit, _exit) if name == "split_heads" else _exit
    result = _check(name, answer)
    out = capsys.readouterr().out
    assert not result and result.failed == result.properties[0]
    assert "your function raised SystemExit: done" in out
    assert "exit() or sys.exit()" in out


def test_keyboard_interrupt_still_stops_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(x: Tensor) -> Tensor:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _check("running_average", interrupted)
    capsys.readouterr()


def test_a_missing_second_function_gets_a_friendly_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = check_split_heads(split_book)  # type: ignore[call-arg]
    out = capsys.readouterr().out
    assert not result and result.n_calls == 0
    assert out == (
        "check_split_heads needs both of your functions: "
        "check_split_heads(split_heads, merge_heads).\n"
    )


def test_something_not_callable_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    result = check_get_batch(batch_book(torch.arange(20), 4, 2, torch.Generator()))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert not result and "an object of type tuple" in out and "without calling it" in out


def test_nan_is_reported_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    result = _check("causal_softmax", lambda s: torch.full_like(s, math.nan))
    out = capsys.readouterr().out
    assert not result and result.failed_key == "shape"
    assert "got:      nan at index [0, 0] (25 of 25 entries are nan or inf)" in out


def test_close_numbers_are_shown_with_the_digits_that_differ(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """tanh-GELU inside the block: 4 significant digits would show the same number twice."""

    def tanh_gelu(block: Block, x: Tensor) -> Tensor:
        h = x + block.attn(block.ln_1(x))
        mlp = block.mlp
        return h + mlp.c_proj(F.gelu(mlp.c_fc(block.ln_2(h)), approximate="tanh"))

    result = _check("block_forward", tanh_gelu)
    out = capsys.readouterr().out
    assert not result
    got = out.split("got:")[1].split(" at index")[0].strip()
    expected = out.split("where ")[1].split(" is expected")[0]
    assert got != expected, out


# --------------------------------------------------------------------------------------------
# Reports that say what went wrong: raised, nan, changed input, side effect, not a function,
# did not finish; and the time limit of every call
# --------------------------------------------------------------------------------------------


def _loops_forever(x: Tensor) -> Tensor:
    total = x.clone()
    t = 1
    while t < x.shape[1]:
        if t % 2 == 0:
            continue  # meant to be break: t never changes again
        total[:, t] += total[:, t - 1]
        t += 1
    return total


@pytest.mark.parametrize("signals", [True, False], ids=["sigalrm", "daemon_thread"])
def test_a_function_that_never_returns_is_stopped(
    signals: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(core, "CALL_TIME_LIMIT", 0.5)
    monkeypatch.setattr(core, "_USE_SIGNALS", signals)
    result = _check("running_average", _loops_forever)
    out = capsys.readouterr().out
    assert not result and result.kind == "timeout" and result.failed_key == "shape"
    assert out.startswith("Your function did not finish in time.\n  during:   property 1 of 5")
    assert "did not finish within 0.5 s and was stopped" in out
    assert "a continue where break was meant" in out


def test_all_the_calls_of_a_check_share_a_time_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def slow(x: Tensor) -> Tensor:
        time.sleep(0.2)
        return avg_cumsum(x)

    monkeypatch.setattr(core, "CHECK_TIME_LIMIT", 0.5)
    result = _check("running_average", slow)
    out = capsys.readouterr().out
    assert not result and result.kind == "timeout"
    assert "took more than 0.5 s in all" in out


def test_the_daemon_thread_keeps_the_callers_gradient_mode(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off the main thread (or without SIGALRM) the call runs in a thread of its own; autograd's
    mode is per thread, so the checks with gradients on must still see them."""
    monkeypatch.setattr(core, "_USE_SIGNALS", False)
    assert _check("running_average", avg_cumsum), capsys.readouterr().out
    assert _check("rope", apply_rope), capsys.readouterr().out


def test_a_check_run_outside_the_main_thread_is_bounded_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(core, "CALL_TIME_LIMIT", 0.5)
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(_check("running_average", _loops_forever))
    )
    thread.start()
    thread.join()
    capsys.readouterr()
    assert results and results[0].kind == "timeout"


def _raises_in_a_helper(x: Tensor) -> Tensor:
    weights = torch.ones(x.shape[1], x.shape[1]).tril()
    return _divide_rows(weights) @ x


def _divide_rows(weights: Tensor) -> Tensor:
    return weights / weights.sum(dim=2, keepdim=True)  # weights has two dimensions


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def _raises_unprintable(x: Tensor) -> Tensor:
    raise _Unprintable


def test_an_exception_is_reported_with_the_line_that_raised_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _check("running_average", _raises_in_a_helper)
    out = capsys.readouterr().out
    assert result.kind == "raised" and out.startswith("Your function raised an exception.\n")
    assert "got:      your function raised IndexError: Dimension out of range" in out
    # The innermost line of the reader's code, not torch's.
    assert "at:       line " in out and "of _divide_rows: return weights / weights.sum" in out


def test_an_exception_that_cannot_be_printed_is_still_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _check("causal_softmax", _raises_unprintable)
    out = capsys.readouterr().out
    assert result.kind == "raised"
    assert "raised _Unprintable: (its message cannot be printed" in out
    assert "raise _Unprintable" in out


def test_a_float_mask_gets_the_hint_of_its_error(capsys: pytest.CaptureFixture[str]) -> None:
    def float_mask(s: Tensor) -> Tensor:
        future = torch.ones(s.shape[-2:]).triu(1)  # floats, not booleans
        return s.masked_fill(future, -math.inf).softmax(dim=-1)

    result = _check("causal_softmax", float_mask)
    out = capsys.readouterr().out
    assert result.kind == "raised" and "masked_fill needs a boolean mask" in out
    assert "Keep every dimension" not in out


def test_each_failure_has_its_own_first_line(capsys: pytest.CaptureFixture[str]) -> None:
    """nan, an edited input, a value that is not a function and a wrong property are reported as
    four different things, not all as the first property failing."""
    nan = _check("causal_softmax", lambda s: torch.full_like(s, math.nan))
    edited = _check("causal_softmax", lambda s: s.masked_fill_(_future(s.shape[-1]), -math.inf))
    not_fn = _check("causal_softmax", torch.zeros(3))
    wrong = _check("causal_softmax", lambda s: s.softmax(dim=-1))
    capsys.readouterr()
    assert [r.kind for r in (nan, edited, not_fn, wrong)] == [
        "nan",
        "changed_input",
        "not_callable",
        "property",
    ]
    assert nan.report.startswith("Your function returned nan or inf.\n")
    assert edited.report.startswith("Your function changed its input.\n")
    assert not_fn.report.startswith(
        "The check needs your function itself, and it was given an object of type Tensor."
    )
    assert wrong.report.startswith("Property 2 of 4 failed: future keys get weight exactly 0")
    assert "Property" not in not_fn.report


def test_state_kept_between_calls_is_found(capsys: pytest.CaptureFixture[str]) -> None:
    """A function right on every input the first time, that answers differently when it is
    given an input again (here: it counts its calls and gives up after 30)."""
    calls = {"n": 0}

    def counts_calls(x: Tensor) -> Tensor:
        calls["n"] += 1
        return avg_cumsum(x) * (1.0 if calls["n"] <= 17 else 2.0)

    result = _check("running_average", counts_calls)
    out = capsys.readouterr().out
    assert result.kind == "side_effect" and result.failed_key == "mean"
    assert "another result the second time it was given its first input" in out
    assert "keeps state between calls" in out


def test_the_success_line_counts_inputs_not_the_repeated_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _check("running_average", avg_cumsum)
    capsys.readouterr()
    assert result.n_calls == 17 and "(checked on 17 seeded inputs" in result.report


def test_a_one_line_sdpa_is_accepted_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    """F.scaled_dot_product_attention gives the right numbers: the check holds, and a note after
    the success line says that it is not the exercise; answers written out get no note."""
    result = _check("causal_attention", attn_one_line_sdpa)
    out = capsys.readouterr().out
    assert result and out.strip() == result.report
    success, note = result.report.split("\nNote: ")
    assert success.startswith("All 4 properties hold: ") and "\n" in success
    assert "F.scaled_dot_product_attention" in note and "not the exercise" in note
    for answer in (attention_book, attention_loop, attn_manual):  # the book's own function too
        written = _check("causal_attention", answer)
        assert written and "Note:" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["causal_softmax", "causal_attention"])
def test_softmax_zero_renormalise_gets_the_underflow_reason(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Softmax over all the keys, then zero the future and renormalise: the hint names that
    mistake and why it fails (exp underflows for every visible key, 0 / 0)."""
    answer = WRONG[name]["softmax_zero_renormalise"][0]
    result = _check(name, answer)
    hint = _hint(capsys.readouterr().out)
    assert result.kind == "nan"
    assert RENORMALISE in hint and UNDERFLOW in hint, hint


@pytest.mark.parametrize("name", ["running_average", "causal_softmax"])
def test_reseeding_with_the_checks_own_seed_is_found(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch.manual_seed(0) inside an answer: the check seeds the global stream with 0 too, so
    the state the answer leaves must still differ from the one it found."""
    right = {"running_average": avg_cumsum, "causal_softmax": softmax_book}[name]

    def reseeds_with_0(*args: Any) -> Any:
        torch.manual_seed(0)
        return right(*args)

    result = _check(name, reseeds_with_0)
    out = capsys.readouterr().out
    assert result.kind == "side_effect", out
    assert "reseeded torch's global random number generator" in out
    assert "remove torch.manual_seed(...)" in out
