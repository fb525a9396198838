"""The averaging trick: every token becomes the mean of itself and the tokens before it.

Defined in chapter 1, "The averaging trick".

Three ways to compute the same thing, in the order the book teaches them:

* :func:`average_past_loop`: two explicit for-loops (clear, slow);
* :func:`average_past_matmul`: one matrix product with a row-normalised lower-triangular matrix;
* :func:`average_past_softmax`: a softmax over a matrix of zeros whose future entries are
  ``-inf``. This is the form self-attention generalises: the zeros become learned affinities.
"""

from __future__ import annotations

import torch

from helpers.validation import check_positive_int


def _check_input(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor of shape (B, T, C), got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(
            "x must have shape (B, T, C) (batch, time, channels), "
            f"got {x.dim()}-D shape {tuple(x.shape)}; "
            "add a batch dimension with x.unsqueeze(0) for a single sequence"
        )
    if x.shape[1] == 0:
        raise ValueError(f"x must contain at least one token (T >= 1), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(
            f"x must be a floating-point tensor (an average is not an integer), got dtype {x.dtype}"
        )


def uniform_causal_weights(
    T: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ``(T, T)`` averaging matrix: row ``t`` holds ``1/(t+1)`` in columns ``0..t``, then ``0``.

    Multiplying it with a ``(B, T, C)`` tensor averages the past of every position. Every row sums
    to 1 and every entry above the diagonal is exactly 0.

    Raises:
        ValueError: if ``T`` is not a positive int.
    """
    T = check_positive_int("T", T, what="the number of tokens")
    tril = torch.tril(torch.ones(T, T, dtype=dtype, device=device))  # 1 on and below, 0 above
    return tril / tril.sum(dim=1, keepdim=True)


def average_past_loop(x: torch.Tensor) -> torch.Tensor:
    """Average the past with explicit loops: ``out[b, t] = mean(x[b, 0..t])``.

    Args:
        x: ``(B, T, C)`` floating-point tensor.

    Returns:
        ``(B, T, C)`` tensor of running means.

    Raises:
        ValueError: if ``x`` is not a non-empty 3-D floating-point tensor.
    """
    _check_input(x)
    B, T, _ = x.shape
    out = torch.zeros_like(x)
    for b in range(B):
        for t in range(T):
            out[b, t] = x[b, : t + 1].mean(dim=0)  # tokens 0..t of sequence b: (t+1, C) -> (C,)
    return out


def average_past_matmul(x: torch.Tensor) -> torch.Tensor:
    """Average the past with one matrix product: ``uniform_causal_weights(T) @ x``.

    The ``(T, T)`` weights broadcast over the batch: ``(T, T) @ (B, T, C) -> (B, T, C)``.

    Raises:
        ValueError: if ``x`` is not a non-empty 3-D floating-point tensor.
    """
    _check_input(x)
    weights = uniform_causal_weights(x.shape[1], dtype=x.dtype, device=x.device)
    return weights @ x


def average_past_softmax(x: torch.Tensor) -> torch.Tensor:
    """Average the past as a softmax over masked affinities.

    All affinities start equal (zeros); future positions are set to ``-inf`` so that the softmax
    gives them weight exactly 0 and spreads the rest uniformly over positions ``0..t``.

    Raises:
        ValueError: if ``x`` is not a non-empty 3-D floating-point tensor.
    """
    _check_input(x)
    T = x.shape[1]
    tril = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))  # True: s <= t
    affinities = torch.zeros(T, T, dtype=x.dtype, device=x.device)
    affinities = affinities.masked_fill(~tril, float("-inf"))  # the future: -inf
    weights = torch.softmax(affinities, dim=-1)
    return weights @ x
