"""Rotary position embeddings (RoPE): rotate queries and keys by their positions.

Defined in chapter 10, "From GPT-2 to a modern transformer".

Chapter 6 showed that the sinusoidal encoding of position ``pos + k`` is a rotation of the
encoding of ``pos``, by angles that depend on the offset ``k`` only. RoPE (Su et al., 2021) uses
that rotation directly: instead of adding a position vector to the token, it rotates each query
and each key by an angle proportional to its position. A dot product of two rotated vectors
depends only on the *difference* of their angles, so attention scores depend only on how far
apart two tokens are.

The convention (the same pairs and frequencies as chapter 6's interleaved sines and cosines):
the dimensions of a head are taken in pairs ``(2i, 2i + 1)``, and the pair of a vector at position
``pos`` is rotated by the angle ``pos * base ** (-2i / head_size)``:

    ``x'[2i]     = x[2i] cos(angle) - x[2i + 1] sin(angle)``
    ``x'[2i + 1] = x[2i] sin(angle) + x[2i + 1] cos(angle)``
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from helpers.validation import check_positive_int


def _check_head_size_and_base(head_size: int, base: float) -> int:
    head_size = check_positive_int("head_size", head_size, what="the size of one head")
    if head_size % 2:
        raise ValueError(
            f"head_size must be even, got {head_size}: RoPE rotates the dimensions in pairs"
        )
    if (
        isinstance(base, bool)
        or not isinstance(base, numbers.Real)
        or not math.isfinite(base)
        or base <= 1
    ):
        raise ValueError(f"base must be a finite number > 1 (RoPE uses 10000), got {base!r}")
    return head_size


def rope_frequencies(head_size: int, base: float = 10000.0) -> torch.Tensor:
    """``omega_i = base ** (-2i / head_size)`` for ``i = 0 .. head_size/2 - 1``, float64.

    Pair 0 turns by one radian per position; the last pair turns almost ``base`` times slower.

    Raises:
        ValueError: if ``head_size`` is not a positive even int or ``base`` is not > 1.
    """
    head_size = _check_head_size_and_base(head_size, base)
    two_i = torch.arange(0, head_size, 2, dtype=torch.float64)
    return base ** (-two_i / head_size)


def rope_angles(positions: torch.Tensor, head_size: int, base: float = 10000.0) -> torch.Tensor:
    """The rotation angles ``pos * omega_i``, shape ``(T, head_size / 2)``, in float64.

    Computed in float64 so that positions in the thousands keep their precision (a float32
    angle of 5,000 radians is off by about 0.0002).

    Raises:
        ValueError: if ``positions`` is not a 1-D integer tensor, or on a bad ``head_size`` or
            ``base``.
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1:
        raise ValueError(f"positions must be a 1-D tensor of ints (T,), got {positions!r}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be integers, got dtype {positions.dtype}")
    freqs = rope_frequencies(head_size, base).to(positions.device)
    return positions.to(torch.float64)[:, None] * freqs[None, :]


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[..., 2i], x[..., 2i + 1])`` by the angle whose cosine and sine are
    ``cos[..., i]`` and ``sin[..., i]`` (broadcast against ``x``'s leading dimensions)."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., T, head_size / 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys by their positions.

    Args:
        x: ``(..., T, head_size)`` vectors, for example ``(B, n_head, T, head_size)`` queries.
        positions: ``(T,)`` integer positions of the ``T`` rows (any ints, also beyond a model's
            ``block_size``, also negative).
        base: the frequency base (10000 in RoPE and in chapter 6).

    Returns:
        A tensor of ``x``'s shape and dtype with every pair of dimensions ``(2i, 2i + 1)`` of the
        row at position ``pos`` rotated by the angle ``pos * base ** (-2i / head_size)``.

    Raises:
        ValueError: if ``x`` has fewer than 2 dimensions, an odd last dimension, or if
            ``positions`` does not hold one integer per row of ``x``.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError("x must be a tensor of shape (..., T, head_size)")
    if isinstance(positions, torch.Tensor) and positions.dim() == 1:
        if positions.shape[0] != x.shape[-2]:
            raise ValueError(
                f"need one position per row: x has T={x.shape[-2]} rows, "
                f"positions has {positions.shape[0]}"
            )
    angles = rope_angles(positions, x.shape[-1], base)
    return rotate_pairs(x, angles.cos().to(x.dtype), angles.sin().to(x.dtype))


class RotaryEmbedding(nn.Module):
    """RoPE for the heads of one attention layer, with the cosines and sines of the positions
    ``0 .. block_size - 1`` precomputed. A later position extends the tables (to at least twice
    their length, computed once in float64 like the first ones), so generating past
    ``block_size`` does not recompute them at every step.

    The rotation is :func:`rotate_pairs`'s, written with fewer operations for speed:
    ``x * cos2 + swap(x) * sin2``, where ``swap`` exchanges the two members of every pair,
    ``cos2`` repeats each cosine twice and ``sin2`` holds ``(-sin, +sin)`` for every pair.

    Args:
        head_size: the size of one head (even).
        block_size: the number of positions to precompute.
        base: the frequency base.
    """

    def __init__(self, head_size: int, block_size: int, base: float = 10000.0) -> None:
        super().__init__()
        self.head_size = _check_head_size_and_base(head_size, base)
        self.block_size = check_positive_int("block_size", block_size, what="positions")
        self.base = float(base)
        cos2, sin2 = self._tables(torch.arange(block_size))
        self.register_buffer("cos2", cos2.float(), persistent=False)
        self.register_buffer("sin2", sin2.float(), persistent=False)

    def _tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = rope_angles(positions, self.head_size, self.base)  # (T, head_size / 2)
        cos2 = angles.cos().repeat_interleave(2, dim=-1)
        sin2 = torch.stack([-angles.sin(), angles.sin()], dim=-1).flatten(-2)
        return cos2, sin2

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x`` (``(..., T, head_size)``), whose rows sit at positions
        ``offset .. offset + T - 1``."""
        T = x.shape[-2]
        if x.shape[-1] != self.head_size:
            raise ValueError(f"expected head_size {self.head_size}, got x of {tuple(x.shape)}")
        if offset < 0:
            cos2, sin2 = self._tables(torch.arange(offset, offset + T, device=x.device))
        else:
            if offset + T > self.cos2.shape[0]:
                n = max(offset + T, 2 * self.cos2.shape[0])
                cos2, sin2 = self._tables(torch.arange(n, device=self.cos2.device))
                self.cos2, self.sin2 = cos2.float(), sin2.float()
            cos2, sin2 = self.cos2[offset : offset + T], self.sin2[offset : offset + T]
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x1, x0, x3, x2, ...)
        return x * cos2.to(x.dtype) + swapped * sin2.to(x.dtype)
