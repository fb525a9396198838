"""The exercise checker of chapter 2: the causal softmax (``check_causal_softmax``).

Defined in chapter 2, "Causal masking".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from helpers.checking._core import (
    CheckResult,
    _differ,
    _expect_close,
    _index,
    _Mismatch,
    _num,
    _nums,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
)


def check_causal_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's causal softmax (chapter 2, "Causal masking").

    The reader writes ``fn(scores)``: ``scores`` is a ``(..., T, T)`` float tensor (query ``i``
    in row ``i``, key ``j`` in column ``j``); it returns the causal attention weights of the same
    shape: keys after the query get weight exactly 0, and each row is the softmax of the scores
    of the keys it may see.

    Properties: the weights have the scores' shape (with and without batch dimensions, and for
    ``T = 1``); future keys get weight exactly 0; every row is a probability distribution;
    every row equals the softmax over its visible keys.
    """
    cases = [((5, 5), 1), ((2, 6, 6), 2), ((2, 3, 4, 4), 3), ((1, 1), 4), ((3, 1, 1), 5)]

    def weights(s: _Session, size: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
        scores = _randn(*size, seed=seed, scale=3.0)
        what = f"scores of shape {_shape(size)}, seed {seed}"
        return scores, _tensor_out(s.call(fn, scores, input=what), size, "the weights")

    def shape(s: _Session) -> None:
        for size, seed in cases:
            weights(s, size, seed)

    def future(s: _Session) -> None:
        for size, seed in cases:
            _, w = weights(s, size, seed)
            T = size[-1]
            above = torch.ones(T, T, dtype=torch.bool).triu(1).expand(w.shape)
            leak = (w.detach() != 0) & above
            if leak.any():
                first = leak.flatten().nonzero()[0, 0]
                index = tuple(int(i) for i in torch.unravel_index(first, w.shape))
                raise _Mismatch(
                    "weight exactly 0 for every key after its query",
                    f"weight {_num(w[index].item())} at index {_index(index)} "
                    f"(query {index[-2]}, key {index[-1]})",
                    "Set the future scores to -inf BEFORE the softmax: exp(-inf) = 0, while a "
                    "score of 0 still gets a weight.",
                )

    def rows(s: _Session) -> None:
        for size, seed in cases:
            _, w = weights(s, size, seed)
            if (w < 0).any() or not torch.isfinite(w).all():
                bad = w[(w < 0) | ~torch.isfinite(w)]
                raise _Mismatch("weights in [0, 1]", f"weights such as {_nums(bad)}")
            totals = w.double().sum(dim=-1)
            problem = _differ(totals, torch.ones_like(totals))
            if problem is not None:
                raise _Mismatch("every row sums to 1", f"row sum {problem}")

    def softmax(s: _Session) -> None:
        for size, seed in cases:
            scores, w = weights(s, size, seed)
            T = size[-1]
            allowed = torch.ones(T, T, dtype=torch.bool).tril()
            expected = scores.double().masked_fill(~allowed, -math.inf).softmax(dim=-1)
            _expect_close(w, expected, "the softmax over keys 0..i in row i", atol=1e-6)

    return _run(
        "check_causal_softmax",
        [
            _Property(
                "shape",
                "weights shaped like the scores (..., T, T)",
                "Keep every dimension: mask and softmax act on the last two only.",
                shape,
            ),
            _Property(
                "future_zero",
                "future keys get weight exactly 0",
                "Set the scores above the diagonal to -inf before the softmax.",
                future,
            ),
            _Property(
                "rows",
                "each row is a probability distribution (sums to 1)",
                "Mask, then take the softmax over the keys (dim=-1, not over the queries); "
                "zeroing weights after the softmax leaves the rows short of 1.",
                rows,
            ),
            _Property(
                "softmax",
                "row i is the softmax of the scores of keys 0..i",
                "Mask first (future scores -> -inf), then softmax(dim=-1); nothing else.",
                softmax,
            ),
        ],
    )
