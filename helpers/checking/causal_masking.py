"""The exercise checker of chapter 2: the causal softmax (``check_causal_softmax``).

Defined in chapter 2, "Causal masking".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from helpers.checking._core import (
    CheckResult,
    _differ,
    _expect_close,
    _expect_gradients,
    _index,
    _Mismatch,
    _mistake_hint,
    _num,
    _nums,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
)

RENORMALISED_HINT = (
    "{} a softmax over all the keys, then zeroing the future and dividing by the row sums: when "
    "every visible score is far below a future score, exp underflows to 0 for every visible key "
    "and the row becomes 0 / 0 = nan (or keeps only a few digits). Mask the future scores with "
    "-inf before the softmax, so that the largest visible score gets exp(0)."
)


def _renormalised(scores: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """The mistake "softmax, zero the future, renormalise", in the scores' own dtype (where its
    underflow happens): softmax over all the keys, future weights set to 0, rows divided by
    their sums."""
    weights = scores.softmax(dim=-1).masked_fill(~visible, 0.0)
    return weights / weights.sum(dim=-1, keepdim=True)


_GLOBAL_MAX_HINT = (
    "Your weights match exp of the scores minus one maximum for the whole tensor: in a row "
    "whose visible scores are all far below it, exp underflows to 0 for every visible key and "
    "the row becomes 0 / 0 = nan. Subtract each row's own largest visible score "
    "(softmax(dim=-1) of the masked scores does)."
)
_EITHER_HINT = (
    "Your weights match subtracting a maximum taken over more than the row's visible scores (a "
    "softmax over all the keys, then zeroing the future and dividing by the row sums; or one "
    "maximum for the whole tensor): when every visible score is far below it, exp underflows to "
    "0 for every visible key and the row becomes 0 / 0 = nan. Mask the future scores with -inf, "
    "then softmax(dim=-1): the largest visible score gets exp(0)."
)


def _underflow_mistakes(
    scores: torch.Tensor, visible: torch.Tensor
) -> list[tuple[str, Callable[[], torch.Tensor | None]]]:
    """The two mistakes that subtract a maximum over more than the visible keys ("softmax,
    zero, renormalise" and one maximum for the whole tensor), in the scores' own dtype. Where
    both give the same weights (every row's maximum is the tensor's), one hint names both."""

    def renormalised() -> torch.Tensor:
        return _renormalised(scores, visible)

    def global_max() -> torch.Tensor:
        masked = scores.masked_fill(~visible, -math.inf)
        e = torch.exp(masked - masked.max())
        return e / e.sum(dim=-1, keepdim=True)

    def both() -> torch.Tensor | None:
        a, b = renormalised().double(), global_max().double()
        return a if torch.isclose(a, b, 1e-4, 1e-5, equal_nan=True).all() else None

    return [
        (_EITHER_HINT, both),
        (RENORMALISED_HINT.format("Your weights match"), renormalised),
        (_GLOBAL_MAX_HINT, global_max),
    ]


def check_causal_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's causal softmax (chapter 2, "Causal masking").

    The reader writes ``fn(scores)``: ``scores`` is a ``(..., T, T)`` float tensor (query ``i``
    in row ``i``, key ``j`` in column ``j``); it returns the causal attention weights of the same
    shape: keys after the query get weight exactly 0, and each row is the softmax of the scores
    of the keys it may see.

    Properties: the weights have the scores' shape (with and without batch dimensions, and for
    ``T = 1``); future keys get weight exactly 0 (also when every visible score is below -1e9,
    where a finite fill value such as -1e9 would outweigh them); every row is a probability
    distribution; every row equals the softmax over its visible keys, also for float64 scores (to
    float64 precision), bfloat16 ones and non-contiguous ones, in the scores' own dtype.
    """
    # Each property has its own inputs (no (shape, seed) pair shared), beyond the chapter's sizes
    # (T up to 70), with exact zeros among the visible scores, ties, and scores of +-1000.
    cases = {
        "shape": [((5, 5), 1, ""), ((2, 6, 6), 2, ""), ((2, 3, 4, 4), 3, ""), ((1, 1), 4, "")]
        + [((3, 1, 1), 5, "")],
        "future": [((5, 5), 6, "zeros"), ((2, 6, 6), 7, "below -1e9"), ((2, 3, 40, 40), 8, "")]
        + [((1, 1), 9, ""), ((2, 70, 70), 10, "large")],
        "rows": [((9, 9), 11, "all zero"), ((2, 6, 6), 12, "large"), ((3, 12, 12), 13, "ties")]
        + [((1, 1), 14, "large"), ((2, 2, 33, 33), 15, "zeros")],
        "softmax": [((5, 5), 16, ""), ((2, 6, 6), 17, "large"), ((2, 3, 4, 4), 18, "strided")]
        + [((3, 1, 1), 19, "bfloat16"), ((2, 70, 70), 20, "float64")],
    }
    kinds = {
        "": "",
        "zeros": ", every third score exactly 0",
        "all zero": ", every score exactly 0",
        "large": ", scores rounded to integers up to +-1000",
        "ties": ", scores rounded to integers in -2..2 (ties)",
        "below -1e9": ", float64, every score -1e10 plus a number of size 3 (all below -1e9)",
        "float64": ", float64",
        "bfloat16": ", bfloat16",
        "strided": ", non-contiguous (a transposed view)",
    }

    def scores_of(size: tuple[int, ...], seed: int, kind: str) -> torch.Tensor:
        scores = _randn(*size, seed=seed, scale=3.0)
        if kind == "zeros":
            scores.view(-1)[::3] = 0.0
        elif kind == "all zero":
            scores.zero_()
        elif kind == "large":
            scores = (scores * 300).round().clamp(-1000, 1000)
        elif kind == "ties":
            scores = (scores / 2).round().clamp(-2, 2)
        elif kind == "below -1e9":
            scores = scores.double() - 1e10
        return _variant(scores, kind)

    def weights(s: _Session, size: tuple[int, ...], seed: int, kind: str) -> tuple[Any, ...]:
        scores = scores_of(size, seed, kind)
        what = f"scores of shape {_shape(size)}, seed {seed}{kinds[kind]}"
        out = s.call(fn, scores, input=what)
        w = _tensor_out(out, size, "the weights", mistakes=mistakes(scores), dtype=scores.dtype)
        return scores, w

    def allowed(T: int) -> torch.Tensor:
        return torch.ones(T, T, dtype=torch.bool).tril()

    def mistakes(scores: torch.Tensor) -> list[tuple[str, Callable[[], torch.Tensor]]]:
        sd, T = scores.double(), scores.shape[-1]
        visible = allowed(T)
        masked = sd.masked_fill(~visible, -math.inf)
        return [
            (
                "Your weights match masking the future with a finite number such as -1e9: when "
                "every visible score is below it, the future keys outweigh them. Fill with "
                "float('-inf'), which is below every score.",
                lambda: sd.masked_fill(~visible, -1e9).softmax(dim=-1) if sd.max() < -1e9 else None,
            ),
            (
                "Your weights match a softmax with no mask: set the scores of the keys after "
                "each query to -inf before the softmax.",
                lambda: sd.softmax(dim=-1),
            ),
            (
                "Your weights match masking the future scores with 0: a score of 0 still gets a "
                "weight after the softmax, exp(-inf) = 0 does not.",
                lambda: sd.masked_fill(~visible, 0.0).softmax(dim=-1),
            ),
            (
                "Your weights match zeroing the future after the softmax: the rows then sum to "
                "less than 1. Set the future scores to -inf before the softmax instead.",
                lambda: sd.softmax(dim=-1) * visible,
            ),
            *_underflow_mistakes(scores, visible),
            (
                "Your weights match a softmax over the queries (dim=-2): take it over the keys, "
                "the last dimension (dim=-1).",
                lambda: masked.softmax(dim=-2).nan_to_num(),
            ),
            (
                "Your weights match a mask that hides the diagonal too: query i may see key i "
                "itself (tril with diagonal=0, triu(diagonal=1) for the future).",
                lambda: sd.masked_fill(~allowed(T).tril(-1), -math.inf).softmax(-1).nan_to_num(),
            ),
            (
                "Your weights match log_softmax: the weights are softmax(...), not its log.",
                lambda: masked.log_softmax(dim=-1),
            ),
        ]

    def shape(s: _Session) -> None:
        for size, seed, kind in cases["shape"]:
            weights(s, size, seed, kind)

    def future(s: _Session) -> None:
        for size, seed, kind in cases["future"]:
            scores, w = weights(s, size, seed, kind)
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
                    _mistake_hint(w, mistakes(scores), None),
                )

    def rows(s: _Session) -> None:
        for size, seed, kind in cases["rows"]:
            scores, w = weights(s, size, seed, kind)
            if (w < 0).any():
                raise _Mismatch(
                    "weights in [0, 1]",
                    f"weights such as {_nums(w[w < 0])}",
                    _mistake_hint(w, mistakes(scores), None),
                )
            totals = w.double().sum(dim=-1)
            problem = _differ(totals, torch.ones_like(totals))
            if problem is not None:
                hint = _mistake_hint(w, mistakes(scores), None)
                raise _Mismatch("every row sums to 1", f"row sum {problem}", hint)

    def softmax(s: _Session) -> None:
        for number, (size, seed, kind) in enumerate(cases["softmax"]):
            scores = scores_of(size, seed, kind)
            with torch.enable_grad():
                scores.requires_grad_(number == 0)  # the first call with gradients on
                what = f"scores of shape {_shape(size)}, seed {seed}{kinds[kind]}"
                w = _tensor_out(
                    s.call(fn, scores, input=what), size, "the weights", dtype=scores.dtype
                )
                T = size[-1]
                expected = scores.double().masked_fill(~allowed(T), -math.inf).softmax(dim=-1)
                _expect_close(
                    w,
                    expected,
                    "the softmax over keys 0..i in row i",
                    atol=1e-6,
                    mistakes=mistakes(scores.detach()),
                    dtype=scores.dtype,
                )
                if scores.requires_grad:
                    _expect_gradients(w, expected, [("the scores", scores)])

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
                "Row i gives weight only to keys 0..i: every key after the query gets exactly 0.",
                future,
            ),
            _Property(
                "rows",
                "each row is a probability distribution (sums to 1)",
                "Each row holds the weights of one query over the keys: all >= 0, summing to 1.",
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
