"""The exercise checkers accept right answers, reject the mistakes learners make, never raise.

For every checker: (a) the book's own implementation (a helper wrapped to the reader's signature)
and a second, independently written answer pass; (b) each plausible wrong answer fails, on the
property that names its mistake; (c) a stub raising ``NotImplementedError`` and a function that
raises a shape error get a friendly message, not an exception; (d) the printed report is the
same text on every run.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import scaled_dot_product_attention
from helpers.averaging import average_past_loop, average_past_matmul, average_past_softmax
from helpers.checking import (
    NOT_IMPLEMENTED_MESSAGE,
    CheckResult,
    check_block_forward,
    check_cached_attention,
    check_causal_attention,
    check_causal_softmax,
    check_get_batch,
    check_rope,
    check_running_average,
    check_scaled_scores,
    check_sinusoidal_encoding,
    check_split_heads,
)
from helpers.masking import apply_causal_mask, causal_mask
from helpers.model import Block
from helpers.multihead import MultiHeadAttention
from helpers.positional import sinusoidal_encoding
from helpers.rope import apply_rope
from helpers.softmax import stable_softmax
from helpers.training import get_batch

Tensor = torch.Tensor
ROOT = Path(__file__).resolve().parents[1]


def _future(T: int) -> Tensor:
    """``True`` above the diagonal: the keys after each query."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


# --------------------------------------------------------------------------------------------
# Right and wrong answers, one table per checker: {name: function} and {name: (function, key)},
# where key is the property the mistake must fail.
# --------------------------------------------------------------------------------------------

# Chapter 1: running average ------------------------------------------------------------------


def avg_cumsum(x: Tensor) -> Tensor:
    """Independent answer: running sums divided by the counts."""
    counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
    return x.cumsum(dim=1) / counts


AVERAGE_RIGHT: dict[str, Callable[..., Any]] = {
    "book_loop": average_past_loop,
    "book_matmul": average_past_matmul,
    "book_softmax": average_past_softmax,
    "cumsum": avg_cumsum,
}

AVERAGE_WRONG: dict[str, tuple[Callable[..., Any], str]] = {
    # Averages over the whole sequence: every row sees the future.
    "includes_future": (lambda x: x.mean(dim=1, keepdim=True).expand_as(x), "causal"),
    # Divides the running sum by T instead of t + 1.
    "divides_by_T": (lambda x: x.cumsum(dim=1) / x.shape[1], "constant"),
    # Running mean along the batch dimension instead of time.
    "wrong_dim": (
        lambda x: x.cumsum(dim=0) / torch.arange(1, x.shape[0] + 1).view(-1, 1, 1),
        "batch",
    ),
    # Mean of the tokens before t, excluding t itself (row 0 becomes 0).
    "excludes_self": (
        lambda x: torch.cat([torch.zeros_like(x[:, :1]), avg_cumsum(x)[:, :-1]], dim=1),
        "constant",
    ),
    # Lower-triangular ones without normalising: a running sum, not a mean.
    "sum_not_mean": (lambda x: torch.ones(x.shape[1], x.shape[1]).tril() @ x, "constant"),
    # Forgets keepdim or returns only the last running mean: (B, C).
    "returns_B_C": (lambda x: x.mean(dim=1), "shape"),
    # Counts the newest token twice (weights 1, ..., 1, 2 normalised): still causal and
    # still returns a constant sequence unchanged, but not the mean.
    "newest_counts_twice": (
        lambda x: (x.cumsum(dim=1) + x) / torch.arange(2, x.shape[1] + 2).view(1, -1, 1),
        "mean",
    ),
}


# Chapter 2: causal softmax -------------------------------------------------------------------


def softmax_book(scores: Tensor) -> Tensor:
    return stable_softmax(apply_causal_mask(scores))


def softmax_renormalised(scores: Tensor) -> Tensor:
    """Independent answer: exponentiate (after subtracting each row's largest visible score),
    zero the future, divide by the row sums."""
    T = scores.shape[-1]
    visible_max = scores.masked_fill(_future(T), -math.inf).amax(dim=-1, keepdim=True)
    e = torch.exp((scores - visible_max).clamp(max=0)) * ~_future(T)
    return e / e.sum(dim=-1, keepdim=True)


SOFTMAX_RIGHT = {"book": softmax_book, "renormalised": softmax_renormalised}

SOFTMAX_WRONG = {
    "forgets_mask": (lambda s: s.softmax(dim=-1), "future_zero"),
    "masks_with_zero": (
        lambda s: s.masked_fill(_future(s.shape[-1]), 0.0).softmax(dim=-1),
        "future_zero",
    ),
    "softmax_over_queries": (lambda s: apply_causal_mask(s).softmax(dim=-2), "rows"),
    "masks_after_softmax": (lambda s: s.softmax(dim=-1) * ~_future(s.shape[-1]), "rows"),
    # -inf only on the last key instead of above the diagonal.
    "masks_last_column": (
        lambda s: (
            torch.cat([s[..., :-1], torch.full_like(s[..., -1:], -math.inf)], -1)
            .softmax(dim=-1)
            .nan_to_num()
        ),
        "future_zero",
    ),
    # Mask on the diagonal too: a token may not see itself.
    "hides_itself": (
        lambda s: (
            s.masked_fill(~torch.ones_like(s, dtype=torch.bool).tril(-1), -math.inf)
            .softmax(dim=-1)
            .nan_to_num()
        ),
        "rows",
    ),
    # squeeze() drops the size-1 dimensions of a T = 1 input.
    "squeezes": (lambda s: softmax_book(s).squeeze(), "shape"),
    # Uniform weights over the visible keys (the averaging matrix): ignores the scores.
    "uniform_over_visible": (
        lambda s: apply_causal_mask(torch.zeros_like(s)).softmax(dim=-1),
        "softmax",
    ),
}


# Chapter 3: causal attention -----------------------------------------------------------------


def attention_book(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return scaled_dot_product_attention(q, k, v, is_causal=True)[0]


def attention_loop(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Independent answer: one query at a time, over the keys it may see."""
    out = torch.empty_like(v)
    for t in range(q.shape[1]):
        scores = q[:, t : t + 1] @ k[:, : t + 1].transpose(1, 2) / math.sqrt(q.shape[-1])
        out[:, t] = (scores.softmax(dim=-1) @ v[:, : t + 1])[:, 0]
    return out


def _attention(q: Tensor, k: Tensor, v: Tensor, *, scale: float, fill: float, dim: int) -> Tensor:
    """Attention with the given scale, value for future scores and softmax dimension."""
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(_future(q.shape[-2]), fill)
    return scores.softmax(dim=dim) @ v


def _sqrt_hs(q: Tensor) -> float:
    return 1 / math.sqrt(q.shape[-1])


ATTENTION_RIGHT = {
    "book": attention_book,
    "loop": attention_loop,
    "torch": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}

ATTENTION_WRONG = {
    "forgets_mask": (
        lambda q, k, v: (q @ k.transpose(-2, -1) * _sqrt_hs(q)).softmax(dim=-1) @ v,
        "causal",
    ),
    "masks_with_zero": (
        lambda q, k, v: _attention(q, k, v, scale=_sqrt_hs(q), fill=0.0, dim=-1),
        "causal",
    ),
    "softmax_over_queries": (
        lambda q, k, v: _attention(q, k, v, scale=_sqrt_hs(q), fill=-math.inf, dim=-2),
        "weights_sum",
    ),
    "no_scaling": (
        lambda q, k, v: _attention(q, k, v, scale=1.0, fill=-math.inf, dim=-1),
        "matches_torch",
    ),
    "scales_by_head_size": (
        lambda q, k, v: _attention(q, k, v, scale=1 / q.shape[-1], fill=-math.inf, dim=-1),
        "matches_torch",
    ),
    # sqrt(C) of the chapter's example (C = 32) instead of sqrt(head_size).
    "scales_by_sqrt_C": (
        lambda q, k, v: _attention(q, k, v, scale=1 / math.sqrt(32), fill=-math.inf, dim=-1),
        "matches_torch",
    ),
    # Scales by the values' size d_v: the same as d_k in every case but one.
    "scales_by_sqrt_d_v": (
        lambda q, k, v: _attention(
            q, k, v, scale=1 / math.sqrt(v.shape[-1]), fill=-math.inf, dim=-1
        ),
        "matches_torch",
    ),
    # Returns (output, weights) as the book's helper does.
    "returns_tuple": (
        lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True),
        "shape",
    ),
}


# Chapter 4: scaled scores --------------------------------------------------------------------

SCORES_RIGHT = {
    "matmul": lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]),
    "einsum": lambda q, k: (
        torch.einsum("bid,bjd->bij", q * q.shape[-1] ** -0.25, k) * k.shape[-1] ** -0.25
    ),
}

SCORES_WRONG = {
    "no_scaling": (lambda q, k: q @ k.transpose(-2, -1), "variance"),
    "scales_by_head_size": (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1], "variance"),
    "scales_by_sqrt_C": (lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(32), "variance"),
    "scales_by_C": (lambda q, k: q @ k.transpose(-2, -1) / 32, "variance"),
    "keys_in_rows": (
        lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]),
        "rows_and_columns",
    ),
    # k.T on a 3-D tensor reverses all three dimensions.
    "transposes_all_dims": (lambda q, k: q @ k.T / math.sqrt(q.shape[-1]), "shape"),
    # Scaled by sqrt(head_size) times a constant close to 1 (here sqrt(head_size + 2)): only
    # the exact formula tells it apart.
    "off_by_two": (
        lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1] + 2),
        "formula",
    ),
}


# Chapter 5: split and merge heads ------------------------------------------------------------


def split_book(x: Tensor, n_head: int) -> Tensor:
    """The book's layer's own split (a method of MultiHeadAttention; building the layer draws
    its weights, so the global random state is put back, as the exercise asks)."""
    with torch.random.fork_rng(devices=[]):
        return MultiHeadAttention(x.shape[-1], n_head)._split_heads(x)


def merge_book(y: Tensor) -> Tensor:
    """The line that merges the heads in MultiHeadAttention.forward."""
    B, n_head, T, hs = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, n_head * hs)


def split_stack(x: Tensor, n_head: int) -> Tensor:
    """Independent answer: cut the channels into heads and stack them on a new axis."""
    return torch.stack(x.split(x.shape[-1] // n_head, dim=-1), dim=1)


def merge_cat(y: Tensor) -> Tensor:
    return torch.cat(y.unbind(dim=1), dim=-1)


def split_view_only(x: Tensor, n_head: int) -> Tensor:
    """view to (B, n_head, T, head_size) without the transpose: heads mix tokens."""
    B, T, C = x.shape
    return x.view(B, n_head, T, C // n_head)


def split_interleaved(x: Tensor, n_head: int) -> Tensor:
    """Head axis taken from the last position: head h gets channels h, h + n_head, ..."""
    B, T, C = x.shape
    return x.view(B, T, C // n_head, n_head).permute(0, 3, 1, 2)


def merge_without_transpose(y: Tensor) -> Tensor:
    B, n_head, T, hs = y.shape
    return y.reshape(B, T, n_head * hs)


def merge_view_not_contiguous(y: Tensor) -> Tensor:
    B, n_head, T, hs = y.shape
    return y.transpose(1, 2).view(B, T, n_head * hs)  # RuntimeError: view size is not compatible


def merge_wrong_axes(y: Tensor) -> Tensor:
    """Transposes head_size with T: tokens and channels mixed."""
    B, n_head, T, hs = y.shape
    return y.transpose(2, 3).reshape(B, T, n_head * hs)


SPLIT_RIGHT = {"book": (split_book, merge_book), "stack_cat": (split_stack, merge_cat)}

SPLIT_WRONG = {
    "split_view_without_transpose": ((split_view_only, merge_book), "split_slices"),
    "split_interleaved_channels": ((split_interleaved, merge_book), "split_slices"),
    "split_transposes_wrong_axes": (
        (lambda x, n: split_book(x, n).transpose(2, 3), merge_book),
        "split_shape",
    ),
    "merge_without_transpose": ((split_book, merge_without_transpose), "merge"),
    "merge_view_not_contiguous": ((split_book, merge_view_not_contiguous), "merge"),
    "merge_wrong_axes": ((split_book, merge_wrong_axes), "merge"),
}


# Chapter 6: sinusoidal encoding --------------------------------------------------------------


def _angles(T: int, d_model: int, base: float) -> Tensor:
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    return pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def pe_loops(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """Independent answer: the formula entry by entry."""
    pe = torch.zeros(T, d_model)
    for pos in range(T):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def pe_split_over_positions(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """sin on even positions, cos on odd positions (instead of even and odd dimensions)."""
    a = _angles(T, d_model, base).repeat_interleave(2, dim=1)
    pe = torch.cos(a)
    pe[0::2] = torch.sin(a[0::2])
    return pe.float()


def pe_halves(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """All sines first, then all cosines (not interleaved)."""
    a = _angles(T, d_model, base)
    return torch.cat([a.sin(), a.cos()], dim=-1).float()


def pe_exponent_i(T: int, d_model: int, base: float = 10000.0) -> Tensor:
    """Frequencies base**(-i/d_model) instead of base**(-2i/d_model)."""
    a = _angles(T, 2 * d_model, base)[:, : d_model // 2]
    return torch.stack([a.sin(), a.cos()], dim=-1).reshape(T, d_model).float()


PE_RIGHT = {"book": sinusoidal_encoding, "loops": pe_loops}

PE_WRONG = {
    "split_over_positions": (pe_split_over_positions, "shift"),
    "sin_cos_halves": (pe_halves, "shift"),
    "exponent_i_not_2i": (pe_exponent_i, "shift"),
    "base_1000": (lambda T, d_model, base=1000.0: sinusoidal_encoding(T, d_model, base), "formula"),
    "forgets_position": (
        lambda T, d, base=10000.0: sinusoidal_encoding(1, d).expand(T, d),
        "distinct",
    ),
    "unscaled_positions": (
        lambda T, d, base=10000.0: torch.arange(T, dtype=torch.float32)[:, None].expand(T, d),
        "bounded",
    ),
    # (d_model, T) instead of (T, d_model).
    "transposed": (lambda T, d, base=10000.0: sinusoidal_encoding(T, d, base).T, "shape"),
}


# Chapter 7: get_batch ------------------------------------------------------------------------


def batch_book(
    data: Tensor, block_size: int, batch_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    return get_batch(data, block_size, batch_size, generator=generator)


def _batch(
    data: Tensor,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None,
    *,
    high: int = 0,
    shift: int = 1,
    wrap: bool = False,
) -> tuple[Tensor, Tensor]:
    """Windows from starts drawn in 0 .. len(data) - block_size - 1 + high."""
    starts = torch.randint(len(data) - block_size + high, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(block_size)
    if wrap:
        return data[index % len(data)], data[(index + shift) % len(data)]
    x = torch.stack([data[i : i + block_size] for i in index[:, 0]])
    y = torch.stack([data[i + shift : i + block_size + shift] for i in index[:, 0]])
    return x, y


BATCH_RIGHT = {"book": batch_book, "stack": _batch}

BATCH_WRONG = {
    "targets_not_shifted": (
        lambda d, b, n, generator: _batch(d, b, n, generator, shift=0),
        "shifted",
    ),
    "targets_shifted_inside_x": (
        lambda d, b, n, generator: (lambda x: (x, x.roll(-1, dims=1)))(
            _batch(d, b, n, generator)[0]
        ),
        "shifted",
    ),
    "windows_past_the_end": (
        lambda d, b, n, generator: _batch(d, b, n, generator, high=1),
        "inside",
    ),
    "windows_wrap_around": (
        lambda d, b, n, generator: _batch(d, b, n, generator, high=1, wrap=True),
        "inside",
    ),
    # Draws from the global random state: a side effect, found at the first call.
    "ignores_generator": (lambda d, b, n, generator: _batch(d, b, n, None), "shape"),
    "misses_last_start": (lambda d, b, n, generator: _batch(d, b, n, generator, high=-1), "spread"),
    # Every start is 0: the same batch on every call, caught before the spread of the starts.
    "always_starts_at_0": (
        lambda d, b, n, generator: _batch(d, b, n, generator, high=-(len(d) - b - 1)),
        "reproducible",
    ),
    "float_tokens": (
        lambda d, b, n, generator: tuple(t.float() for t in _batch(d, b, n, generator)),
        "shape",
    ),
}


# Chapter 8: the block's forward --------------------------------------------------------------


def block_book(block: Block, x: Tensor) -> Tensor:
    """The chapter's solution: each branch reads the stream through its LayerNorm and is added
    to it."""
    x = x + block.attn(block.ln_1(x))
    return x + block.mlp(block.ln_2(x))


def block_written_out(block: Block, x: Tensor) -> Tensor:
    """Independent answer: the two residual branches, the MLP's layers spelled out."""
    h = x + block.attn(block.ln_1(x))
    mlp = block.mlp
    return h + mlp.c_proj(F.gelu(mlp.c_fc(block.ln_2(h))))


def block_post_ln(block: Block, x: Tensor) -> Tensor:
    x = block.ln_1(x + block.attn(x))
    return block.ln_2(x + block.mlp(x))


def block_no_residual(block: Block, x: Tensor) -> Tensor:
    x = block.attn(block.ln_1(x))
    return block.mlp(block.ln_2(x))


def block_no_mlp_residual(block: Block, x: Tensor) -> Tensor:
    x = x + block.attn(block.ln_1(x))
    return block.mlp(block.ln_2(x))


def block_one_layer_norm(block: Block, x: Tensor) -> Tensor:
    x = x + block.attn(block.ln_1(x))
    return x + block.mlp(block.ln_1(x))


def block_parallel(block: Block, x: Tensor) -> Tensor:
    """Both branches read x (GPT-J style), not the sum after attention."""
    return x + block.attn(block.ln_1(x)) + block.mlp(block.ln_2(x))


def block_plain_layer_norm(block: Block, x: Tensor) -> Tensor:
    """A LayerNorm without the block's learned weights."""
    x = x + block.attn(F.layer_norm(x, x.shape[-1:]))
    return x + block.mlp(F.layer_norm(x, x.shape[-1:]))


BLOCK_RIGHT = {"book": block_book, "written_out": block_written_out}

BLOCK_WRONG = {
    "post_ln": (block_post_ln, "pre_ln"),
    "missing_residuals": (block_no_residual, "residual"),
    "missing_mlp_residual": (block_no_mlp_residual, "residual"),
    "one_layer_norm_twice": (block_one_layer_norm, "matches_block"),
    "parallel_branches": (block_parallel, "matches_block"),
    "unweighted_layer_norm": (block_plain_layer_norm, "matches_block"),
    # Returns the attention output alongside the stream.
    "returns_tuple": (lambda block, x: (block_book(block, x), block.attn(block.ln_1(x))), "shape"),
}


# Chapter 9: cached attention -----------------------------------------------------------------


def cached_book(q_new: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new = q_new.shape[-2]
    mask = causal_mask(T_new, T_past=k.shape[-2] - T_new)
    return scaled_dot_product_attention(q_new, k, v, mask)[0]


def cached_loop(q_new: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Independent answer: each new query over the keys up to its own position."""
    T_new, T = q_new.shape[-2], k.shape[-2]
    rows = []
    for i in range(T_new):
        last = T - T_new + i  # this query's position
        scores = q_new[..., i : i + 1, :] @ k[..., : last + 1, :].transpose(-2, -1)
        weights = (scores / math.sqrt(q_new.shape[-1])).softmax(dim=-1)
        rows.append(weights @ v[..., : last + 1, :])
    return torch.cat(rows, dim=-2)


def cached_top_left_mask(q_new: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The mask built as if T_past were 0: (T_new, T) lower-triangular from the top left."""
    T_new, T = q_new.shape[-2], k.shape[-2]
    mask = torch.ones(T_new, T, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q_new, k, v, attn_mask=mask)


CACHED_RIGHT = {
    "book": cached_book,
    "loop": cached_loop,
    "torch_mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_mask(q.shape[-2], T_past=k.shape[-2] - q.shape[-2])
    ),
}

CACHED_WRONG = {
    # is_causal=True aligns the mask to the top left when T_q != T_k: offset forgotten.
    "is_causal_forgets_offset": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "with_cache",
    ),
    "top_left_mask": (cached_top_left_mask, "with_cache"),
    # No mask: right for one new token, wrong for several.
    "no_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), "no_cache"),
    # Attends only to the new tokens: the cache is ignored.
    "ignores_cache": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k[..., -q.shape[-2] :, :], v[..., -q.shape[-2] :, :], is_causal=True
        ),
        "with_cache",
    ),
    "no_scaling": (
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_mask(q.shape[-2], T_past=k.shape[-2] - q.shape[-2]), scale=1.0
        ),
        "no_cache",
    ),
    # Merges the heads' axis away too early: (B, T_new, n_head, head_size).
    "transposed_output": (lambda q, k, v: cached_book(q, k, v).transpose(1, 2), "shape"),
}


# Chapter 10: RoPE ----------------------------------------------------------------------------


def _freqs(head_size: int, base: float = 10000.0, exponent: float = 2.0) -> Tensor:
    i = torch.arange(head_size // 2, dtype=torch.float64)
    return base ** (-exponent * i / head_size)


def rope_complex(x: Tensor, positions: Tensor) -> Tensor:
    """Independent answer: each pair as a complex number, multiplied by e^(i angle)."""
    angle = positions.double()[:, None] * _freqs(x.shape[-1])
    z = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())
    return (
        torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2).to(x.dtype)
    )


def _rope_pairs(x: Tensor, positions: Tensor, freqs: Tensor, sign: float = 1.0) -> Tensor:
    angle = positions.double()[:, None] * freqs
    c, s = angle.cos().to(x.dtype), sign * angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def _rope_halves(x: Tensor, positions: Tensor, freqs: Tensor) -> Tensor:
    """Rotates dimension i with dimension i + head_size/2 (the "rotate half" layout)."""
    angle = positions.double()[:, None] * freqs
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x.chunk(2, dim=-1)
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)


ROPE_RIGHT = {
    "book": apply_rope,
    "complex": rope_complex,
    "pairs": lambda x, p: _rope_pairs(x, p, _freqs(x.shape[-1])),
}

ROPE_WRONG = {
    "halves_wrong_angle": (
        lambda x, p: _rope_halves(x, p, _freqs(x.shape[-1], exponent=1.0)),
        "pairs",
    ),
    "halves_instead_of_pairs": (lambda x, p: _rope_halves(x, p, _freqs(x.shape[-1])), "pairs"),
    "base_1000": (lambda x, p: _rope_pairs(x, p, _freqs(x.shape[-1], base=1000.0)), "reference"),
    "exponent_i_not_2i": (
        lambda x, p: _rope_pairs(x, p, _freqs(x.shape[-1], exponent=1.0)),
        "reference",
    ),
    "turns_backwards": (
        lambda x, p: _rope_pairs(x, p, _freqs(x.shape[-1]), sign=-1.0),
        "reference",
    ),
    # Adds the sinusoidal encoding instead of rotating.
    "adds_positions": (
        lambda x, p: x + sinusoidal_encoding(int(p.max()) + 1, x.shape[-1])[p],
        "identity",
    ),
    # Scales instead of rotating each pair: cos on both dimensions.
    "cos_only": (
        lambda x, p: (
            x
            * torch.cos(p.double()[:, None] * _freqs(x.shape[-1])).repeat_interleave(2, -1).float()
        ),
        "norms",
    ),
    # One angle per position for every pair (no frequencies): relative, but not RoPE.
    "one_frequency": (lambda x, p: _rope_pairs(x, p, torch.ones(x.shape[-1] // 2)), "reference"),
    # Complex result returned as is: (..., T, head_size / 2) complex numbers.
    "returns_complex": (
        lambda x, p: torch.view_as_complex(rope_complex(x, p).unflatten(-1, (-1, 2)).contiguous()),
        "shape",
    ),
    # Positions scaled to [0, 1] by the largest one: the angle of a pair no longer grows
    # linearly with the position, so moving every position changes the scores.
    "normalises_positions": (
        lambda x, p: _rope_pairs(x, p.double() / p.max().clamp(min=1), _freqs(x.shape[-1])),
        "relative",
    ),
}


# --------------------------------------------------------------------------------------------
# The checkers, each with its tables of right and wrong answers
# --------------------------------------------------------------------------------------------

CHECKERS: dict[str, tuple[Callable[..., CheckResult], dict[str, Any], dict[str, Any]]] = {
    "running_average": (check_running_average, AVERAGE_RIGHT, AVERAGE_WRONG),
    "causal_softmax": (check_causal_softmax, SOFTMAX_RIGHT, SOFTMAX_WRONG),
    "causal_attention": (check_causal_attention, ATTENTION_RIGHT, ATTENTION_WRONG),
    "scaled_scores": (check_scaled_scores, SCORES_RIGHT, SCORES_WRONG),
    "split_heads": (check_split_heads, SPLIT_RIGHT, SPLIT_WRONG),
    "sinusoidal_encoding": (check_sinusoidal_encoding, PE_RIGHT, PE_WRONG),
    "get_batch": (check_get_batch, BATCH_RIGHT, BATCH_WRONG),
    "block_forward": (check_block_forward, BLOCK_RIGHT, BLOCK_WRONG),
    "cached_attention": (check_cached_attention, CACHED_RIGHT, CACHED_WRONG),
    "rope": (check_rope, ROPE_RIGHT, ROPE_WRONG),
}


def _cases(kind: int) -> list[Any]:
    return [
        pytest.param(name, answer, id=f"{name}-{answer}")
        for name, table in CHECKERS.items()
        for answer in table[kind]
    ]


def _check(name: str, answer: Any) -> CheckResult:
    checker = CHECKERS[name][0]
    return checker(*answer) if isinstance(answer, tuple) else checker(answer)


@pytest.mark.parametrize(("name", "answer"), _cases(1))
def test_accepts_right_answers(name: str, answer: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = _check(name, CHECKERS[name][1][answer])
    out = capsys.readouterr().out
    assert result, out
    n = len(result.properties)
    assert out.startswith(f"All {n} properties hold: "), out
    assert result.passed == result.properties and result.failed is None
    assert out.strip() == result.report


@pytest.mark.parametrize(("name", "answer"), _cases(2))
def test_rejects_each_mistake_on_its_property(
    name: str, answer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fn, key = CHECKERS[name][2][answer]
    result = _check(name, fn)
    out = capsys.readouterr().out
    assert not result, f"the mistake {answer!r} was accepted:\n{out}"
    assert result.failed_key == key, f"{answer!r} failed on {result.failed_key!r}:\n{out}"
    assert_header(result, out)
    for label in ("input:", "got:", "hint:"):
        assert f"  {label}" in out, out
    # A few numbers, never a whole tensor: short lines, a short report.
    assert max(len(line) for line in out.splitlines()) <= 100
    assert len(out.splitlines()) <= 14, out
    assert "Traceback" not in out and " at 0x" not in out


HEADERS = {
    "raised": "Your function raised an exception.",
    "nan": "Your function returned nan or inf.",
    "changed_input": "Your function changed its input.",
    "side_effect": "Your function had a side effect.",
    "timeout": "Your function did not finish in time.",
    "not_the_exercise": "Your function calls the block itself, which is not the exercise.",
}


def assert_header(result: CheckResult, out: str) -> None:
    """The report starts by saying what went wrong: a failed property, or what the function did
    (raised, returned nan, changed its input, had a side effect, did not finish, called the
    block it was to write), and then which property was being checked."""
    number = result.properties.index(result.failed) + 1
    total = len(result.properties)
    if result.kind == "property":
        assert out.startswith(f"Property {number} of {total} failed: {result.failed}"), out
    else:
        lines = out.splitlines()
        assert lines[0] == HEADERS[result.kind], out
        assert lines[1].startswith(f"  during:   property {number} of {total}, "), out


# Properties no single plausible mistake can fail first: they follow from the properties before
# them for a function that depends only on its inputs, and are kept because they are what the
# chapter states (round trip, per-head loop, cached generation) and would catch a function that
# behaves differently on the layer's non-contiguous tensors or on a growing cache.
IMPLIED = {
    ("split_heads", "round_trip"),
    ("split_heads", "per_head_loop"),
    ("cached_attention", "generation"),
}


@pytest.mark.parametrize("name", list(CHECKERS))
def test_every_property_is_the_failure_of_some_mistake(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No property is decoration: each is the first to fail for at least one wrong answer."""
    _, right, wrong = CHECKERS[name]
    failed = {key for _, key in wrong.values()}
    result = _check(name, next(iter(right.values())))
    capsys.readouterr()
    assert len(set(result.property_keys)) == len(result.properties)
    assert failed <= set(result.property_keys)
    missing = [k for k in result.property_keys if k not in failed and (name, k) not in IMPLIED]
    assert not missing, f"no wrong answer fails {missing}"


@pytest.mark.parametrize("name", list(CHECKERS))
def test_docstring_states_the_readers_signature(name: str) -> None:
    doc = CHECKERS[name][0].__doc__ or ""
    assert "The reader writes ``" in doc and "Properties:" in doc


def _stub(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def _shape_error(*args: Any, **kwargs: Any) -> Any:
    return torch.ones(2, 3) @ torch.ones(4, 5)  # RuntimeError: mat1 and mat2 shapes ...


def _none(*args: Any, **kwargs: Any) -> Any:
    return None


def _for_checker(name: str, fn: Callable[..., Any]) -> Any:
    """``fn`` in the form the checker takes (two functions for the split/merge checker)."""
    return (fn, fn) if name == "split_heads" else fn


@pytest.mark.parametrize("name", list(CHECKERS))
def test_not_implemented_gets_the_friendly_message(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _check(name, _for_checker(name, _stub))
    out = capsys.readouterr().out
    assert out == NOT_IMPLEMENTED_MESSAGE + "\n"
    assert not result and result.not_implemented and result.n_calls == 1
    assert "not implemented" in repr(result)


@pytest.mark.parametrize("name", list(CHECKERS))
def test_a_shape_error_is_reported_not_raised(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _check(name, _for_checker(name, _shape_error))
    out = capsys.readouterr().out
    assert not result and result.failed == result.properties[0]
    assert "got:      your function raised RuntimeError: mat1 and mat2 shapes" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("name", list(CHECKERS))
def test_a_non_tensor_output_is_reported(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = _check(name, _for_checker(name, _none))
    out = capsys.readouterr().out
    assert not result and result.failed == result.properties[0]
    assert "NoneType" in out, out


def _one_of_each(name: str) -> list[tuple[str, Any]]:
    """A right answer and every wrong answer of one checker, as ``(label, answer)``."""
    _, right, wrong = CHECKERS[name]
    first = next(iter(right))
    return [(first, right[first]), *((label, fn) for label, (fn, _) in wrong.items())]


@pytest.mark.parametrize("name", list(CHECKERS))
def test_reports_are_deterministic(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    for label, answer in _one_of_each(name):
        first = _check(name, answer)
        torch.manual_seed(12345)  # a different global random state must not change the report
        second = _check(name, answer)
        out = capsys.readouterr().out
        assert first.report == second.report, label
        assert out == first.report + "\n" + second.report + "\n", label


def test_reports_are_the_same_in_a_fresh_process(capsys: pytest.CaptureFixture[str]) -> None:
    """What nbval sees: a new interpreter (other hash seed, other thread count) prints the same."""
    script = (
        "import sys, torch\n"
        "sys.path.insert(0, 'tests')\n"
        "torch.set_num_threads(2)\n"
        "import test_checking as t\n"
        "for name in t.CHECKERS:\n"
        "    for label, answer in t._one_of_each(name)[:3]:\n"
        "        t._check(name, answer)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    fresh = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    for name in CHECKERS:
        for _, answer in _one_of_each(name)[:3]:
            _check(name, answer)
    assert fresh == capsys.readouterr().out


def test_global_random_state_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    check_running_average(lambda x: torch.rand_like(x))  # draws from the global stream
    assert torch.equal(torch.rand(3), expected)
    capsys.readouterr()


def test_input_edits_in_place_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    def in_place(scores: Tensor) -> Tensor:
        scores.masked_fill_(_future(scores.shape[-1]), -math.inf)  # edits the caller's tensor
        return scores.softmax(dim=-1)

    result = check_causal_softmax(in_place)
    out = capsys.readouterr().out
    assert not result and result.failed_key == "shape"
    assert "changed the values of its first argument in place" in out
    assert "masked_fill rather than masked_fill_" in out


def test_result_repr_and_str(capsys: pytest.CaptureFixture[str]) -> None:
    good = check_causal_softmax(softmax_book)
    bad = check_causal_softmax(lambda s: s.softmax(dim=-1))
    capsys.readouterr()
    assert repr(good) == "CheckResult(check_causal_softmax: all 4 properties hold)"
    assert (
        repr(bad) == "CheckResult(check_causal_softmax: failed: future keys get weight exactly 0)"
    )
    assert str(bad) == bad.report and "expected: weight exactly 0" in bad.report
