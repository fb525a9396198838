"""The exercise checker of chapter 4: the scaled scores (``check_scaled_scores``).

Defined in chapter 4, "Scaling and softmax peakiness".
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
    _Mismatch,
    _mistake_hint,
    _num,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
)


def check_scaled_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's scaled attention scores (chapter 4, "Scaling and softmax peakiness").

    The reader writes ``fn(q, k)``: ``q`` and ``k`` are ``(B, T, head_size)`` tensors; it returns
    the ``(B, T, T)`` scores ``q @ k^T / sqrt(head_size)`` (query ``i`` in row ``i``, key ``j``
    in column ``j``).

    Properties: the scores have shape ``(B, T, T)``; row ``i`` belongs to query ``i`` and column
    ``j`` to key ``j``; for unit-variance ``q`` and ``k`` the scores have variance close to 1 for
    every head size from 16 to 1024; the scores equal ``q @ k^T / sqrt(head_size)``, also for
    float64 inputs (to float64 precision), bfloat16 ones and non-contiguous ones, in the input's
    dtype.
    """
    # Each property has its own inputs (no (shape, seed) pair shared); the formula is checked on
    # the first property's shapes with other data, and on T = 40, beyond the chapter's sizes.
    cases = [((2, 5, 8), 1), ((1, 1, 4), 2), ((3, 6, 16), 3), ((2, 4, 64), 4)]
    final = [((2, 5, 8), 11, "float64"), ((1, 1, 4), 12, "bfloat16"), ((3, 6, 16), 13, "strided")]
    final += [((2, 40, 64), 14, "")]
    kinds = {"": "", "float64": ", float64", "bfloat16": ", bfloat16"}
    kinds["strided"] = ", non-contiguous (transposed views, as inside a model)"

    def mistakes(q: torch.Tensor, k: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        qd, kd = q.double(), k.double()
        raw = qd @ kd.transpose(-2, -1)
        hs = q.shape[-1]
        return [
            (
                "Your scores match k @ q^T: queries index the rows, q @ k.transpose(-2, -1).",
                lambda: kd @ qd.transpose(-2, -1) / math.sqrt(hs),
            ),
            (
                "Your scores match no scaling: divide q @ k^T by sqrt(head_size).",
                lambda: raw,
            ),
            (
                "Your scores match dividing by head_size: divide by sqrt(head_size) instead.",
                lambda: raw / hs,
            ),
            (
                "Your scores match dividing by sqrt(32), a fixed number: divide by "
                "sqrt(head_size) with head_size = q.shape[-1].",
                lambda: raw / math.sqrt(32),
            ),
            (
                "Your scores match dividing by 32, a fixed number: divide by sqrt(head_size) "
                "with head_size = q.shape[-1].",
                lambda: raw / 32,
            ),
        ]

    def call(s: _Session, size: tuple[int, ...], seed: int, what: str = "") -> tuple[Any, ...]:
        x = _randn(2, *size, seed=seed)
        text = what or f"q, k of shape {_shape(size)}, seed {seed}"
        out = _tensor_out(s.call(fn, x[0], x[1], input=text), (*size[:2], size[1]), "the scores")
        return x[0], x[1], out

    def shape(s: _Session) -> None:
        for size, seed in cases:
            call(s, size, seed)

    def rows_and_columns(s: _Session) -> None:
        size, seed = (2, 5, 8), 5
        x = _randn(2, *size, seed=seed)
        q, k = x[0], x[1]
        base = f"q, k of shape {_shape(size)}, seed {seed}"
        out = _tensor_out(s.call(fn, q, k, input=base), (2, 5, 5), "the scores")
        for who, i in (("query", 1), ("key", 3)):
            q2, k2 = q.clone(), k.clone()
            (q2 if who == "query" else k2)[:, i] = _randn(2, 8, seed=70 + i, scale=3.0)
            what = f"{base}, with {who} {i} changed"
            out2 = _tensor_out(s.call(fn, q2, k2, input=what), (2, 5, 5), "the scores")
            keep = torch.ones(2, 5, 5, dtype=torch.bool)
            if who == "query":
                keep[:, i, :] = False
            else:
                keep[:, :, i] = False
            line = f"row {i}" if who == "query" else f"column {i}"
            expected = torch.where(keep, out, out2)  # the changed row or column may change
            problem = _differ(out2, expected)
            if problem is not None:
                hint = _mistake_hint(out2, mistakes(q2, k2)[:1], None)
                raise _Mismatch(f"only {line} changes", f"other entries changed: {problem}", hint)

    # Sample-size justification for the variance tolerance: with q, k ~ N(0, 1) the scaled
    # score s_ij = q_i . k_j / sqrt(d) has variance exactly 1; given q_i it is N(0, |q_i|^2 / d),
    # so Var(s^2) ~ 2 and two scores sharing a query or a key have Cov(s^2, s'^2) = 2 / d. For
    # B independent (T, T) score matrices the mean of s^2 then has variance
    # ~ (2 / T^2 + 4 / (T d)) / B, i.e. a standard deviation of 0.035 at d = 16 (B = 8, T = 32)
    # and 0.016 at d = 1024 (over 200 seeds we measured 0.035 and 0.017). Accepting 0.8 .. 1.25
    # is more than 5.7 standard deviations at every head size, while the usual mistakes are far
    # outside: no scaling gives d (>= 16), dividing by d gives 1 / d (<= 1 / 16), and dividing
    # by a fixed sqrt(C) is off by a factor d / C (0.5 at d = 16 for C = 32).
    def variance(s: _Session) -> None:
        for d, seed in ((16, 6), (64, 7), (256, 8), (1024, 9)):
            size = (8, 32, d)
            what = f"q, k of shape {_shape(size)} drawn from N(0, 1), seed {seed} (head_size {d})"
            q, k, out = call(s, size, seed, what)
            var = out.double().pow(2).mean().item()
            if not 0.8 <= var <= 1.25:
                raise _Mismatch(
                    "variance of the scores between 0.8 and 1.25 (1 in theory)",
                    f"variance {_num(var)}",
                    _mistake_hint(out, mistakes(q, k)[1:], None),
                )

    def formula(s: _Session) -> None:
        for number, (size, seed, kind) in enumerate(final):
            x = _randn(2, *size, seed=seed)
            q, k = _variant(x[0].clone(), kind), _variant(x[1].clone(), kind)
            with torch.enable_grad():
                grad = number == len(final) - 1  # the last call with gradients on
                q.requires_grad_(grad)
                k.requires_grad_(grad)
                text = f"q, k of shape {_shape(size)}, seed {seed}{kinds[kind]}"
                out = _tensor_out(
                    s.call(fn, q, k, input=text), (*size[:2], size[1]), "the scores", dtype=q.dtype
                )
                expected = q.double() @ k.double().transpose(-2, -1) / math.sqrt(size[-1])
                _expect_close(
                    out,
                    expected,
                    "q @ k.transpose(-2, -1) / sqrt(head_size)",
                    mistakes=mistakes(q.detach(), k.detach()),
                    dtype=q.dtype,
                )
                if grad:
                    _expect_gradients(out, expected, [("q", q), ("k", k)])

    scale_hint = (
        "The scores are q @ k.transpose(-2, -1) divided by sqrt(head_size), with head_size = "
        "q.shape[-1]."
    )
    return _run(
        "check_scaled_scores",
        [
            _Property(
                "shape",
                "scores shape (B, T, T)",
                "Return one (B, T, T) tensor: row i holds query i's score with every key j.",
                shape,
            ),
            _Property(
                "rows_and_columns",
                "row i holds query i's scores, column j key j's",
                "Entry (i, j) depends only on query i and key j: row i is query i's scores.",
                rows_and_columns,
            ),
            _Property(
                "variance",
                "unit-variance q, k give scores of variance ~1 for head_size 16..1024",
                scale_hint,
                variance,
            ),
            _Property("formula", "equals q @ k^T / sqrt(head_size)", scale_hint, formula),
        ],
    )
