"""The exercise checker of chapter 5: splitting and merging heads (``check_split_heads``).

Defined in chapter 5, "Multi-head and cross-attention".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from helpers.checking._core import (
    CheckResult,
    _differ,
    _expect_close,
    _expect_gradients,
    _Mismatch,
    _mistake_hint,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _usage,
    _variant,
)

_NAMES = (
    "split_heads gives (B, n_head, T, head_size)",
    "head h of split_heads(x) is x[..., h*head_size:(h+1)*head_size]",
    "merge_heads puts head h back in its channels",
    "merge_heads(split_heads(x)) == x",
    "attention through split/merge equals a per-head loop with copied weights",
)


def check_split_heads(
    split_heads: Callable[[torch.Tensor, int], torch.Tensor],
    merge_heads: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> CheckResult:
    """Check the reader's head splitting and merging (chapter 5, "Multi-head and cross-attention").

    The reader writes ``split_heads(x, n_head)``: ``x`` is ``(B, T, C)``; it returns
    ``(B, n_head, T, head_size)`` with ``head_size = C // n_head``, head ``h`` holding channels
    ``h * head_size`` to ``(h + 1) * head_size - 1``; and ``merge_heads(y)``: ``y`` is
    ``(B, n_head, T, head_size)``; it returns the ``(B, T, C)`` tensor that undoes the split.

    Properties: ``split_heads`` has shape ``(B, n_head, T, head_size)``; head ``h`` of the split
    is ``x[..., h * head_size:(h + 1) * head_size]``; ``merge_heads`` puts head ``h`` back in
    those channels (shape ``(B, T, C)``); ``merge_heads(split_heads(x))`` is ``x``; attention
    computed with the two functions equals a loop over separate heads with copied weights. Some
    inputs are float64, bfloat16 or non-contiguous: the dtype must be kept and no layout assumed.
    """
    if merge_heads is None:
        return _usage(
            "check_split_heads",
            _NAMES,
            "check_split_heads needs both of your functions: "
            "check_split_heads(split_heads, merge_heads).",
        )
    # (B, T, C, n_head): several heads, T = 1, a single head, head_size = 1, a larger case (T and
    # C beyond the chapter's sizes). Each property draws its own x (seeds start at `first`).
    cases = [(2, 5, 12, 3), (1, 1, 8, 2), (2, 3, 6, 1), (1, 4, 4, 4), (3, 40, 64, 8)]

    def split_mistakes(x: torch.Tensor, n_head: int) -> list[tuple[str, Callable[[], Any]]]:
        B, T, C = x.shape
        return [
            (split_hint, lambda: x.reshape(B, n_head, T, C // n_head)),
            (
                "Your heads match taking every n_head-th channel (view(B, T, head_size, n_head)): "
                "head h holds the consecutive channels h*head_size..(h+1)*head_size - 1, so "
                "view(B, T, n_head, head_size).transpose(1, 2).",
                lambda: x.view(B, T, C // n_head, n_head).permute(0, 3, 1, 2),
            ),
        ]

    def merge_mistakes(y: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        B, n_head, T, hs = y.shape
        return [
            (merge_hint, lambda: y.reshape(B, T, n_head * hs)),
            (
                "Your output matches swapping T with head_size before the reshape: move the head "
                "axis (dim 1) next to head_size, y.transpose(1, 2).reshape(B, T, C).",
                lambda: y.transpose(2, 3).reshape(B, T, n_head * hs),
            ),
        ]

    def describe(B: int, T: int, C: int, n_head: int, seed: int) -> str:
        return f"x of shape {_shape((B, T, C))}, n_head = {n_head}, seed {seed}"

    kinds = {"": "", "float64": ", float64", "bfloat16": ", bfloat16"}
    kinds["strided"] = ", non-contiguous (a transposed view)"

    def split(
        s: _Session, B: int, T: int, C: int, n_head: int, seed: int, kind: str = ""
    ) -> tuple[Any, ...]:
        x = _variant(_randn(B, T, C, seed=seed), kind)
        what = "split_heads(x, n_head) with " + describe(B, T, C, n_head, seed) + kinds[kind]
        y = s.call(split_heads, x, n_head, input=what)
        return x, _tensor_out(y, (B, n_head, T, C // n_head), "split_heads's output", dtype=x.dtype)

    def split_shape(s: _Session) -> None:
        for seed, case in enumerate(cases, start=41):
            split(s, *case, seed)

    def split_heads_are_slices(s: _Session) -> None:
        for seed, (B, T, C, n_head) in enumerate(cases, start=1):
            x, y = split(s, B, T, C, n_head, seed, "strided" if seed == 4 else "")
            hs = C // n_head
            for h in range(n_head):
                problem = _differ(y[:, h], x[..., h * hs : (h + 1) * hs], atol=0, rtol=0)
                if problem is not None:
                    raise _Mismatch(
                        f"head {h} = x[..., {h * hs}:{(h + 1) * hs}] (channels of every token)",
                        f"head {h}: {problem}",
                        _mistake_hint(y, split_mistakes(x, n_head), None, atol=0, rtol=0),
                    )

    def merge(s: _Session) -> None:
        for seed, (B, T, C, n_head) in enumerate(cases, start=1):
            hs = C // n_head
            y = _randn(B, n_head, T, hs, seed=seed + 20)
            what = f"merge_heads(y) with y of shape {_shape(y.shape)}, seed {seed + 20}"
            x = _tensor_out(s.call(merge_heads, y, input=what), (B, T, C), "merge_heads's output")
            for h in range(n_head):
                problem = _differ(x[..., h * hs : (h + 1) * hs], y[:, h], atol=0, rtol=0)
                if problem is not None:
                    raise _Mismatch(
                        f"channels {h * hs}..{(h + 1) * hs - 1} of every token = head {h}",
                        f"channels {h * hs}..{(h + 1) * hs - 1}: {problem}",
                        _mistake_hint(x, merge_mistakes(y), None, atol=0, rtol=0),
                    )

    def round_trip(s: _Session) -> None:
        for seed, (B, T, C, n_head) in enumerate(cases, start=51):
            kind = {51: "float64", 53: "bfloat16", 55: "strided"}.get(seed, "")
            x, y = split(s, B, T, C, n_head, seed, kind)
            what = (
                "merge_heads(split_heads(x, n_head)) with "
                + describe(B, T, C, n_head, seed)
                + kinds[kind]
            )
            back = s.call(merge_heads, y, input=what)
            _expect_close(
                _tensor_out(back, (B, T, C), "merge_heads's output", dtype=x.dtype), x, "x", atol=0
            )

    def per_head_loop(s: _Session) -> None:
        from helpers.multihead import (
            MultiHeadAttention,
            MultiHeadAttentionConcat,
            copy_concat_to_fused,
        )

        for seed, (B, T, C, n_head) in enumerate([(2, 6, 12, 3), (1, 5, 16, 4)], start=30):
            torch.manual_seed(seed)
            looped = MultiHeadAttentionConcat(C, n_head)  # one Head module per head
            fused = MultiHeadAttention(C, n_head)
            copy_concat_to_fused(looped, fused)
            x = _randn(B, T, C, seed=seed)
            grad = seed == 31  # the second layer runs with gradients on
            with torch.enable_grad():
                x.requires_grad_(grad)
                q, k, v = fused.c_attn(x).split(C, dim=2)  # (B, T, C) each, as in the layer
                where = f"one attention layer, {describe(B, T, C, n_head, seed)}"
                heads = []
                for name, t in (("q", q), ("k", k), ("v", v)):
                    what = f"split_heads({name}, n_head) in {where}"
                    out = s.call(split_heads, t, n_head, input=what)
                    shape = (B, n_head, T, C // n_head)
                    heads.append(_tensor_out(out, shape, "split_heads's output"))
                y = F.scaled_dot_product_attention(*heads, is_causal=True)  # (B, n_head, T, hs)
                merged = s.call(merge_heads, y, input=f"merge_heads(attention output) in {where}")
                out = fused.c_proj(_tensor_out(merged, (B, T, C), "merge_heads's output"))
                expected = looped(x)
                _expect_close(
                    out,
                    expected,
                    "the output of the same heads run one by one (MultiHeadAttentionConcat)",
                )
                if grad:
                    _expect_gradients(
                        out,
                        fused(x),
                        [("x", x), ("the layer's c_attn.weight", fused.c_attn.weight)],
                    )

    split_hint = (
        "x.view(B, T, n_head, head_size).transpose(1, 2): split the channels first, then move "
        "the head axis forward (a direct view(B, n_head, T, head_size) mixes tokens)."
    )
    merge_hint = (
        "y.transpose(1, 2).reshape(B, T, C): move the head axis back next to head_size first "
        "(reshape, or .contiguous().view, since the transpose is not contiguous)."
    )
    return _run(
        "check_split_heads",
        [
            _Property(
                "split_shape",
                "split_heads gives (B, n_head, T, head_size)",
                "Return one tensor of shape (B, n_head, T, head_size), head_size = C // n_head.",
                split_shape,
            ),
            _Property(
                "split_slices",
                "head h of split_heads(x) is x[..., h*head_size:(h+1)*head_size]",
                "Head h holds channels h*head_size..(h+1)*head_size - 1 of every token, in order.",
                split_heads_are_slices,
            ),
            _Property(
                "merge",
                "merge_heads puts head h back in its channels",
                "Channels h*head_size..(h+1)*head_size - 1 of token t are head h at token t.",
                merge,
            ),
            _Property(
                "round_trip",
                "merge_heads(split_heads(x)) == x",
                "merge_heads must undo split_heads exactly, for every shape.",
                round_trip,
            ),
            _Property(
                "per_head_loop",
                "attention through split/merge equals a per-head loop with copied weights",
                "Split q, k and v the same way, and merge the heads back in order.",
                per_head_loop,
            ),
        ],
    )
