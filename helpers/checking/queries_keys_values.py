"""The exercise checker of chapter 3: causal attention (``check_causal_attention``).

Defined in chapter 3, "Queries, keys and values".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.checking._core import (
    CheckResult,
    _causal_sdpa,
    _differ,
    _expect_close,
    _Mismatch,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
)


def _scale_hint(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """Name the scaling the reader used if it is one of the usual mistakes."""
    hs = q.shape[-1]
    for scale, words in ((1.0, "no scaling"), (1.0 / hs, "dividing by head_size")):
        if _differ(got, _causal_sdpa(q, k, v, is_causal=True, scale=scale)) is None:
            return (
                f"Your output matches {words}: divide the scores by sqrt(head_size) "
                f"= sqrt({hs}) instead."
            )
    return (
        "scores = q @ k.transpose(-2, -1) / sqrt(head_size); future scores -> -inf; "
        "softmax over the keys (dim=-1); then weights @ v."
    )


def check_causal_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's causal attention (chapter 3, "Queries, keys and values").

    The reader writes ``fn(q, k, v)``: ``q``, ``k``, ``v`` are ``(B, T, head_size)`` tensors; it
    returns the ``(B, T, head_size)`` output of causal scaled dot-product attention,
    ``softmax(mask(q @ k^T / sqrt(head_size))) @ v``, which is what
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` computes.

    Properties: the output has shape ``(B, T, head_size)`` (also for ``T = 1``); every query's
    weights sum to 1 (identical values come back unchanged); the output at ``t`` does not
    change when the tokens after ``t`` change; the result equals PyTorch's.
    """
    cases = [((2, 5, 8), 1), ((1, 1, 4), 2), ((3, 7, 16), 3), ((2, 6, 8), 4)]

    def qkv(size: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
        x = _randn(3, *size, seed=seed)
        return x[0] * 2.0, x[1] * 2.0, x[2]  # larger q, k: the scaling matters

    def shape(s: _Session) -> None:
        for size, seed in cases:
            q, k, v = qkv(size, seed)
            what = f"q, k, v of shape {_shape(size)}, seed {seed}"
            _tensor_out(s.call(fn, q, k, v, input=what), size)

    def weights_sum(s: _Session) -> None:
        for size, seed in cases:
            q, k, _ = qkv(size, seed)
            u = _randn(size[0], 1, size[2], seed=seed + 50)
            v = u.expand(size).contiguous()
            what = (
                f"q, k of shape {_shape(size)}, seed {seed}; v: the same vector at every position"
            )
            out = _tensor_out(s.call(fn, q, k, v, input=what), size)
            _expect_close(out, v, "that vector at every position (weights summing to 1)")

    def causal(s: _Session) -> None:
        size, seed = (2, 6, 8), 5
        q, k, v = qkv(size, seed)
        base = f"q, k, v of shape {_shape(size)}, seed {seed}"
        out = _tensor_out(s.call(fn, q, k, v, input=base), size)
        for t in (0, 3):
            changed = [x.clone() for x in (q, k, v)]
            for i, x in enumerate(changed):
                x[:, t + 1 :] = _randn(size[0], size[1] - t - 1, size[2], seed=60 + i, scale=4.0)
            what = f"{base}, with the tokens after t = {t} changed"
            out2 = _tensor_out(s.call(fn, *changed, input=what), size)
            problem = _differ(out2[:, : t + 1], out[:, : t + 1])
            if problem is not None:
                rows = "position 0" if t == 0 else f"positions 0..{t}"
                raise _Mismatch(f"{rows} the same as before the change", f"in {rows}: {problem}")

    def matches_torch(s: _Session) -> None:
        for size, seed in [*cases, ((4, 9, 32), 6)]:
            q, k, v = qkv(size, seed)
            what = f"q, k, v of shape {_shape(size)}, seed {seed}"
            out = _tensor_out(s.call(fn, q, k, v, input=what), size)
            expected = _causal_sdpa(q, k, v, is_causal=True)
            if _differ(out, expected) is not None:
                _expect_close(
                    out,
                    expected,
                    "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                    hint=_scale_hint(out, q, k, v),
                )

    return _run(
        "check_causal_attention",
        [
            _Property(
                "shape",
                "output shape (B, T, head_size)",
                "Return weights @ v, one tensor: (B, T, T) @ (B, T, head_size).",
                shape,
            ),
            _Property(
                "weights_sum",
                "each query's weights sum to 1 (equal values come back unchanged)",
                "Take the softmax over the keys, the last dimension of the scores (dim=-1).",
                weights_sum,
            ),
            _Property(
                "causal",
                "the output at t ignores the tokens after t",
                "Set the scores of future keys (above the diagonal) to -inf before the softmax; "
                "a score of 0 still gets a weight.",
                causal,
            ),
            _Property(
                "matches_torch",
                "equals F.scaled_dot_product_attention(is_causal=True)",
                "scores = q @ k.transpose(-2, -1) / sqrt(head_size), masked, softmaxed, @ v.",
                matches_torch,
            ),
        ],
    )
