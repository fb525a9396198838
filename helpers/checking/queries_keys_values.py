"""The exercise checker of chapter 3: causal attention (``check_causal_attention``).

Defined in chapter 3, "Queries, keys and values".
"""

from __future__ import annotations

import dis
import math
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from helpers.checking._core import (
    FAR_BELOW_TEXT,
    CheckResult,
    _causal_sdpa,
    _differ,
    _expect_close,
    _expect_gradients,
    _far_below_scores,
    _Mismatch,
    _mistake_hint,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
)
from helpers.checking.causal_masking import RENORMALISED_HINT, _renormalised

SDPA_NOTE = (
    "Note: your function calls F.scaled_dot_product_attention. That is accepted (it computes "
    "the same thing), but it is not the exercise: write the scores, the mask, the softmax and "
    "the weighted sum of the values yourself."
)


def _calls_torch_sdpa(fn: Any) -> bool:
    """Whether the code of ``fn`` (and of the functions defined inside it) calls PyTorch's
    ``scaled_dot_product_attention``: as an attribute (``F.scaled_dot_product_attention``,
    ``torch.nn.functional.scaled_dot_product_attention``) or as a global name bound to it. A
    function of the same name written elsewhere (the book's own) does not count."""
    name = "scaled_dot_product_attention"
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    globals_ = getattr(getattr(fn, "__func__", fn), "__globals__", {})
    if code is None:
        return False
    try:
        stack = [code]
        while stack:
            current = stack.pop()
            stack += [c for c in current.co_consts if isinstance(c, types.CodeType)]
            for instruction in dis.get_instructions(current):
                if instruction.argval != name:
                    continue
                if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF"):
                    if globals_.get(name) is F.scaled_dot_product_attention:
                        return True
                elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                    return True
    except Exception:  # code the disassembler cannot read: no note
        return False
    return False


def check_causal_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's causal attention (chapter 3, "Queries, keys and values").

    The reader writes ``fn(q, k, v)``: ``q`` and ``k`` are ``(B, T, d_k)`` tensors, ``v`` a
    ``(B, T, d_v)`` one; it returns the ``(B, T, d_v)`` output of causal scaled dot-product
    attention, ``softmax(mask(q @ k^T / sqrt(d_k))) @ v``, which is what
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` computes.

    Properties: the output has shape ``(B, T, d_v)`` (also for ``T = 1`` and for
    non-contiguous inputs); every query's weights sum to 1 (identical values come back
    unchanged); the output at ``t`` does not change when the tokens after ``t`` change; the
    result equals PyTorch's, also for float64 inputs (to float64 precision) and bfloat16 ones,
    in the input's dtype, for values of another size than the keys, and when every score is
    about -1e10 (a finite fill value such as -1e9 would outweigh the visible keys). A function
    that calls ``F.scaled_dot_product_attention`` is accepted, with a note that this is not the
    exercise.
    """
    # Each property has its own inputs (no (shape, seed) pair shared), T up to 40, beyond the
    # chapter's sizes; "large" inputs give scores of a few hundred, where exp overflows float32.
    cases = {
        "shape": [((2, 5, 8), 1, 2.0, ""), ((1, 1, 4), 2, 2.0, ""), ((3, 7, 16), 3, 2.0, "")]
        + [((2, 6, 8), 4, 2.0, "strided")],
        "weights_sum": [((2, 5, 8), 11, 0.0), ((1, 1, 4), 12, 2.0), ((3, 7, 16), 13, 8.0)]
        + [((2, 40, 8), 14, 2.0)],
        "matches_torch": [
            ((2, 5, 8), 21, 2.0, "float64"),
            ((1, 1, 4), 22, 2.0, "bfloat16"),
            ((3, 7, 16), 23, 2.0, "below -1e9"),
            ((2, 6, 8), 24, 8.0, ""),
            ((2, 6, 16), 26, 2.0, "d_v 5"),
            ((4, 40, 32), 25, 2.0, ""),
        ],
    }

    def qkv(
        size: tuple[int, ...], seed: int, scale: float = 2.0, kind: str = ""
    ) -> tuple[torch.Tensor, ...]:
        x = _randn(3, *size, seed=seed)
        q, k, v = x[0] * scale, x[1] * scale, x[2]  # larger q, k: the scaling matters
        if kind == "below -1e9":  # every score about -1e10, on every rounding path
            q, k = _far_below_scores(size[:-2], size[-2], size[-1], seed)
        if kind == "d_v 5":  # values of their own size: the scale must come from q, not v
            v = _randn(*size[:-1], 5, seed=seed + 100)
        plain = kind in ("below -1e9", "d_v 5")
        return tuple(_variant(t, "" if plain else kind) for t in (q, k, v))

    def describe(size: tuple[int, ...], seed: int, scale: float, kind: str = "") -> str:
        large = ", q and k scaled by 8 (scores of a few hundred)" if scale > 2 else ""
        extra = {
            "below -1e9": f", {FAR_BELOW_TEXT}",
            "d_v 5": ", except v of shape (2, 6, 5): values of size d_v = 5, keys of d_k = 16",
            "float64": ", float64",
            "bfloat16": ", bfloat16",
            "strided": ", non-contiguous (transposed views, as inside a model)",
        }.get(kind, "")
        return f"q, k, v of shape {_shape(size)}, seed {seed}{large}{extra}"

    def mistakes(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> list[tuple[str, Callable[[], torch.Tensor]]]:
        qd, kd, vd = q.double(), k.double(), v.double()
        T, hs, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = qd @ kd.transpose(-2, -1) / math.sqrt(hs)
        weights = scores.masked_fill(future, -math.inf).softmax(dim=-1)
        return [
            (
                "Your output matches masking the future scores with a finite number such as "
                "-1e9: when every visible score is below it, the future keys outweigh them. "
                "Fill with float('-inf'), which is below every score.",
                lambda: (
                    scores.masked_fill(future, -1e9).softmax(dim=-1) @ vd
                    if scores.max() < -1e9
                    else None
                ),
            ),
            (
                "Your output matches attention without the mask: set the scores of future keys "
                "to -inf before the softmax.",
                lambda: scores.softmax(dim=-1) @ vd,
            ),
            (
                RENORMALISED_HINT.format("Your output matches"),
                lambda: (
                    _renormalised(q @ k.transpose(-2, -1) / math.sqrt(hs), ~future).to(v.dtype) @ v
                ),
            ),
            (
                "Your output matches masking future scores with 0: a score of 0 still gets a "
                "weight; use -inf.",
                lambda: scores.masked_fill(future, 0.0).softmax(dim=-1) @ vd,
            ),
            (
                "Your output matches a softmax over the queries (dim=-2): take it over the keys, "
                "the last dimension of the scores (dim=-1).",
                lambda: scores.masked_fill(future, -math.inf).softmax(dim=-2) @ vd,
            ),
            (
                "Your output matches weights @ k: the weights average the values, weights @ v.",
                lambda: weights @ kd,
            ),
            (
                "Your output matches dividing by sqrt(d_k) after the softmax: scale the "
                "scores before it.",
                lambda: weights / math.sqrt(hs) @ vd,
            ),
            (
                "Your output matches k @ q^T as the scores: queries index the rows, "
                "q @ k.transpose(-2, -1).",
                lambda: (scores.transpose(-2, -1)).masked_fill(future, -math.inf).softmax(-1) @ vd,
            ),
            (
                "Your output matches a mask that hides the diagonal too: token t may attend to "
                "itself (mask only the keys after t).",
                lambda: (
                    scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(-1), -math.inf)
                    .softmax(dim=-1)
                    .nan_to_num()
                    @ vd
                ),
            ),
            (
                f"Your output matches no scaling: divide the scores by sqrt(d_k) = sqrt({hs}).",
                lambda: _causal_sdpa(q, k, v, is_causal=True, scale=1.0),
            ),
            (
                "Your output matches dividing by head_size: divide the scores by "
                f"sqrt(d_k) = sqrt({hs}) instead.",
                lambda: _causal_sdpa(q, k, v, is_causal=True, scale=1.0 / hs),
            ),
            (
                f"Your output matches dividing by sqrt(d_v) = sqrt({d_v}), the values' size: "
                f"the scale belongs to the scores, sqrt(d_k) = sqrt(q.shape[-1]) = sqrt({hs}).",
                lambda: (
                    _causal_sdpa(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d_v))
                    if d_v != hs
                    else None
                ),
            ),
        ]

    def shape(s: _Session) -> None:
        for size, seed, scale, kind in cases["shape"]:
            q, k, v = qkv(size, seed, scale, kind)
            out = s.call(fn, q, k, v, input=describe(size, seed, scale, kind))
            _tensor_out(out, size, dtype=q.dtype)

    def weights_sum(s: _Session) -> None:
        for size, seed, scale in cases["weights_sum"]:
            q, k, _ = qkv(size, seed, scale)
            u = _randn(size[0], 1, size[2], seed=seed + 50)
            v = u.expand(size).contiguous()
            large = {
                0.0: ", q and k all zeros (every score exactly 0)",
                8.0: ", q and k scaled by 8",
            }
            large = large.get(scale, "")
            what = (
                f"q, k of shape {_shape(size)}, seed {seed}{large}; v: the same vector at every "
                "position"
            )
            out = s.call(fn, q, k, v, input=what)
            out = _tensor_out(out, size, mistakes=mistakes(q, k, v))
            _expect_close(
                out,
                v,
                "that vector at every position (weights summing to 1)",
                mistakes=mistakes(q, k, v),
            )

    def causal(s: _Session) -> None:
        size, seed = (2, 9, 8), 5
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
                hint = _mistake_hint(out2, mistakes(*changed), None)
                raise _Mismatch(
                    f"{rows} the same as before the change", f"in {rows}: {problem}", hint
                )

    def matches_torch(s: _Session) -> None:
        for number, (size, seed, scale, kind) in enumerate(cases["matches_torch"]):
            q, k, v = qkv(size, seed, scale, kind)
            with torch.enable_grad():
                grad = number == len(cases["matches_torch"]) - 1  # the last call: gradients on
                for t in (q, k, v):
                    t.requires_grad_(grad)
                out = s.call(fn, q, k, v, input=describe(size, seed, scale, kind))
                out = _tensor_out(out, tuple(v.shape), dtype=q.dtype)
                expected = _causal_sdpa(q, k, v, is_causal=True)
                plain = [t.detach() for t in (q, k, v)]
                _expect_close(
                    out,
                    expected,
                    "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                    mistakes=mistakes(*plain),
                    dtype=q.dtype,
                )
                if grad:
                    _expect_gradients(out, expected, [("q", q), ("k", k), ("v", v)])

    return _run(
        "check_causal_attention",
        [
            _Property(
                "shape",
                "output shape (B, T, d_v)",
                "Return weights @ v, one tensor: (B, T, T) @ (B, T, d_v).",
                shape,
            ),
            _Property(
                "weights_sum",
                "each query's weights sum to 1 (equal values come back unchanged)",
                "Each query's weights over the keys sum to 1, so equal values come back unchanged.",
                weights_sum,
            ),
            _Property(
                "causal",
                "the output at t ignores the tokens after t",
                "The output at t may depend only on the queries, keys and values of tokens 0..t.",
                causal,
            ),
            _Property(
                "matches_torch",
                "equals F.scaled_dot_product_attention(is_causal=True)",
                "scores = q @ k.transpose(-2, -1) / sqrt(d_k), masked, softmaxed, @ v.",
                matches_torch,
            ),
        ],
        note=SDPA_NOTE if _calls_torch_sdpa(fn) else None,
    )
