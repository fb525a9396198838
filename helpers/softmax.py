"""Softmax, written out: the naive formula and the numerically stable one.

Defined in chapter 4, "Scaling and softmax peakiness".
"""

from __future__ import annotations

import numbers

import torch


def _check_input(x: object, dim: object) -> None:
    """Raise ``ValueError`` unless ``x`` is a floating-point tensor and ``dim`` one of its dims."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor of logits, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(
            f"x must hold floating-point logits, got dtype {x.dtype}; convert with x.float()"
        )
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise ValueError(f"dim must be an int, got {dim!r}")
    n = max(x.dim(), 1)  # a 0-d tensor behaves like one of shape (1,), as in torch.softmax
    if not -n <= dim < n:
        raise ValueError(f"dim={dim} is out of range for x with {x.dim()} dims ({-n}..{n - 1})")


def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x) / sum(exp(x))`` exactly as written on paper.

    Overflows for large logits (``exp(89.)`` is ``inf`` in float32, and ``inf / inf`` is NaN):
    shown in the book as the mistake to avoid. Use ``stable_softmax``.

    Raises:
        ValueError: if ``x`` is not a floating-point tensor or ``dim`` is not one of its dims.
    """
    _check_input(x, dim)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax that never overflows: subtract the row maximum before exponentiating.

    ``softmax(x) == softmax(x - c)`` for any constant ``c``, so choosing ``c = max(x)`` gives the
    same result while the largest exponent is ``exp(0) = 1``. Rows that are entirely ``-inf``
    (a query allowed to see nothing) return zeros instead of NaN.

    Raises:
        ValueError: if ``x`` is not a floating-point tensor or ``dim`` is not one of its dims.
    """
    _check_input(x, dim)
    # The shift does not change the result, so no gradient needs to flow through it.
    m = x.amax(dim=dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a fully masked row has max -inf
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
