"""Softmax, written out: the naive formula and the numerically stable one."""

from __future__ import annotations

import torch


def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x) / sum(exp(x))`` exactly as written on paper.

    Overflows for large logits (``exp(89.)`` is ``inf`` in float32, and ``inf / inf`` is NaN):
    shown in the book as the mistake to avoid. Use ``stable_softmax``.
    """
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax that never overflows: subtract the row maximum before exponentiating.

    ``softmax(x) == softmax(x - c)`` for any constant ``c``, so choosing ``c = max(x)`` gives the
    same result while the largest exponent is ``exp(0) = 1``. Rows that are entirely ``-inf``
    (a query allowed to see nothing) return zeros instead of NaN.
    """
    # The shift does not change the result, so no gradient needs to flow through it.
    m = x.amax(dim=dim, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a fully masked row has max -inf
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
