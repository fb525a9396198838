"""Positional information for attention, which on its own cannot see word order.

Defined in chapter 6, "Positional encoding".

Two ways to give each token its position:

* ``sinusoidal_encoding``: the fixed sines and cosines of Vaswani et al. (2017), with
  ``sinusoidal_shift_matrix``, the rotation that moves every position ``k`` steps on;
* ``LearnedPositionalEmbedding``: one trained vector per position up to ``block_size`` (GPT-2).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from helpers.validation import check_non_negative_int, check_positive_int


def _check_d_model_and_base(d_model: int, base: float) -> int:
    d_model = check_positive_int("d_model", d_model, what="the model width")
    if d_model % 2:
        raise ValueError(
            f"d_model must be even, got {d_model}: dimensions come in (sin, cos) pairs, "
            "one pair per frequency"
        )
    if (
        isinstance(base, bool)
        or not isinstance(base, numbers.Real)
        or not math.isfinite(base)
        or base <= 1
    ):
        raise ValueError(f"base must be a finite number > 1 (the paper uses 10000), got {base!r}")
    return d_model


def _frequencies(d_model: int, base: float) -> torch.Tensor:
    """``omega_i = base ** (-2i / d_model)`` for ``i = 0 .. d_model/2 - 1``, in float64."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return base ** (-two_i / d_model)


def sinusoidal_encoding(
    T: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal position encodings of positions ``0 .. T - 1``, shape ``(T, d_model)``.

    ``PE[pos, 2i] = sin(pos / base**(2i / d_model))`` and
    ``PE[pos, 2i + 1] = cos(pos / base**(2i / d_model))`` (Vaswani et al., 2017): sine and
    cosine alternate over the *dimensions*; every position gets both. The angles are computed in
    float64 and the result cast to ``dtype``, so long sequences keep full float32 precision.

    Raises:
        ValueError: if ``T`` or ``d_model`` is not a positive int, ``d_model`` is odd, or
            ``base`` is not a finite number greater than 1.
    """
    T = check_positive_int("T", T, what="the number of positions")
    d_model = _check_d_model_and_base(d_model, base)
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    angles = pos * _frequencies(d_model, base)  # (T, d_model / 2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d_model / 2, 2)
    return pe.reshape(T, d_model).to(dtype=dtype, device=device)  # interleave: sin, cos, sin, ...


def sinusoidal_shift_matrix(
    k: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The ``(d_model, d_model)`` rotation ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for all pos.

    It is block diagonal: the ``i``-th ``2 x 2`` block, acting on the pair ``(sin, cos)`` of
    frequency ``omega_i``, is the rotation ``[[cos(k omega_i), sin(k omega_i)],
    [-sin(k omega_i), cos(k omega_i)]]``. It depends on the offset ``k`` only, never on ``pos``.
    For a ``(T, d_model)`` matrix of encodings (one per row) this reads
    ``PE[k:] = PE[:-k] @ M_k.T``.
    ``k`` may be negative or zero (``M_0`` is the identity; ``M_{-k} = M_k.T``).

    Raises:
        ValueError: if ``k`` is not an int, or on an invalid ``d_model`` or ``base`` (as in
            ``sinusoidal_encoding``).
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"k must be an int (a number of positions), got {k!r}")
    d_model = _check_d_model_and_base(d_model, base)
    theta = int(k) * _frequencies(d_model, base)  # (d_model / 2,)
    c, s = theta.cos(), theta.sin()
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype=dtype, device=device)


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position ``0 .. block_size - 1`` (as in GPT-2).

    Raises a clear ``ValueError`` for a sequence longer than ``block_size`` instead of the
    ``IndexError`` an ``nn.Embedding`` lookup would give.
    """

    def __init__(self, block_size: int, n_embd: int) -> None:
        super().__init__()
        block_size = check_positive_int("block_size", block_size, what="the number of positions")
        n_embd = check_positive_int("n_embd", n_embd, what="the token size C")
        self.block_size = block_size
        self.weight = nn.Embedding(block_size, n_embd).weight

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        """Embeddings of positions ``offset .. offset + T - 1``, shape ``(T, n_embd)``.

        Raises:
            ValueError: if ``T`` is not a positive int, ``offset`` is not an int ``>= 0``, or
                ``offset + T`` exceeds ``block_size``.
        """
        T = check_positive_int("T", T, what="the number of positions")
        offset = check_non_negative_int("offset", offset)
        if offset + T > self.block_size:
            raise ValueError(
                f"positions up to {offset + T - 1} requested, but this model only has "
                f"block_size={self.block_size} positions (0..{self.block_size - 1}); "
                f"crop the context to the last {self.block_size} tokens"
            )
        return self.weight[offset : offset + T]
