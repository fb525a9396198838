"""The exercise checker of the tiled-attention section: merging two partial softmax results
(``check_merge_partials``).

Defined in chapter 9's section "Tiled attention: the online softmax".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from helpers.checking._core import (
    CheckResult,
    _differ,
    _dtype,
    _dtype_hint,
    _Mismatch,
    _num,
    _Property,
    _randn,
    _ReturnedNaN,
    _run,
    _Session,
    _shape,
    _WrongDtype,
)

Tensor = torch.Tensor
Partial = tuple[Tensor, Tensor, Tensor]
NEG_INF = float("-inf")


def _safe(m: Tensor) -> Tensor:
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def _partial(scores: Tensor, v: Tensor) -> Partial:
    """The partial result (m, l, acc) of scores (..., T_q, n) against values (..., n, hs)."""
    m = scores.amax(dim=-1)
    p = torch.exp(scores - _safe(m)[..., None])
    return m, p.sum(dim=-1), p @ v


def _merge(a: Partial, b: Partial) -> Partial:
    m = torch.maximum(a[0], b[0])
    x, y = torch.exp(a[0] - _safe(m)), torch.exp(b[0] - _safe(m))
    return m, x * a[1] + y * b[1], x[..., None] * a[2] + y[..., None] * b[2]


# Plausible mistakes, each reproduced so that a hint names it only when the reader's output is
# exactly what that mistake gives on the same input.
def _no_rescale_l(a: Partial, b: Partial) -> Partial:
    m, _, acc = _merge(a, b)
    return m, a[1] + b[1], acc


def _no_rescale_acc(a: Partial, b: Partial) -> Partial:
    m, l, _ = _merge(a, b)
    return m, l, a[2] + b[2]


def _no_rescale_either(a: Partial, b: Partial) -> Partial:
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def _old_side_only(a: Partial, b: Partial) -> Partial:
    m = torch.maximum(a[0], b[0])
    x = torch.exp(a[0] - _safe(m))
    return m, x * a[1] + b[1], x[..., None] * a[2] + b[2]


def _new_maximum_only(a: Partial, b: Partial) -> Partial:
    m = b[0]
    x = torch.exp(a[0] - _safe(m))
    return m, x * a[1] + b[1], x[..., None] * a[2] + b[2]


def _nan_for_empty_rows(a: Partial, b: Partial) -> Partial:
    m = torch.maximum(a[0], b[0])
    x, y = torch.exp(a[0] - m), torch.exp(b[0] - m)
    return m, x * a[1] + y * b[1], x[..., None] * a[2] + y[..., None] * b[2]


_MISTAKES: list[tuple[Callable[[Partial, Partial], Partial], str]] = [
    (
        _no_rescale_either,
        "Your l and acc are l_a + l_b and acc_a + acc_b: each side's sums are relative to its own "
        "maximum. Multiply side a's by exp(m_a - m) and side b's by exp(m_b - m).",
    ),
    (
        _no_rescale_l,
        "Your acc is right but l is l_a + l_b: rescale the sums too, "
        "l = exp(m_a - m) * l_a + exp(m_b - m) * l_b.",
    ),
    (
        _no_rescale_acc,
        "Your l is right but acc is acc_a + acc_b: rescale the outputs with the same factors, "
        "exp(m_a - m)[..., None] * acc_a + exp(m_b - m)[..., None] * acc_b.",
    ),
    (
        _new_maximum_only,
        "Your m is m_b, the new block's maximum: the merged maximum is max(m_a, m_b), and both "
        "sides must be rescaled to it.",
    ),
    (
        _old_side_only,
        "You rescale only side a: side b's sums are relative to m_b, so they need the factor "
        "exp(m_b - m) as well (it is 1 only when m_b is the larger maximum).",
    ),
]

_EMPTY_HINT = (
    "A row whose every score is -inf has m = -inf, and exp(-inf - (-inf)) is nan: subtract 0 "
    "instead where the merged maximum is -inf (torch.where), so that such a row stays m = -inf, "
    "l = 0, acc = 0."
)


def _tensor(out: Any, like: Tensor, name: str) -> Tensor:
    """Check that ``out`` is a floating-point tensor shaped like ``like``, of its dtype (``-inf``
    allowed: it is the maximum of a row that saw no key)."""
    want = f"{name}: a tensor of shape {_shape(like.shape)}"
    if not isinstance(out, torch.Tensor):
        raise _Mismatch(want, f"an object of type {type(out).__name__}", "Return torch.Tensors.")
    if tuple(out.shape) != tuple(like.shape):
        raise _Mismatch(
            want,
            f"shape {_shape(out.shape)}",
            "m and l have the shape of m_a, acc that of acc_a: combine the two sides entry by "
            "entry (broadcast the factors over head_size with [..., None]).",
        )
    if not out.is_floating_point():
        raise _Mismatch(want + " of floats", f"dtype {out.dtype}")
    if out.dtype != like.dtype:
        raise _WrongDtype(
            want + f" of dtype {_dtype(like.dtype)}, the input's",
            f"dtype {_dtype(out.dtype)}",
            _dtype_hint(out.dtype, like.dtype),
        )
    return out


_FLOAT32_INSIDE_HINT = (
    "Your result for this float64 input is close to the answer but right only to about float32 "
    "precision: some step runs in float32 (.float(), a constant tensor made without "
    "dtype=m_a.dtype). Compute in the input's dtype, so that float64 gives float64 precision."
)

_NAN_HINT = (
    "nan appears where the right merge has a number: look for exp(-inf - (-inf)), inf - inf or "
    "0 * inf in your formula."
)


def _same(got: Partial, want: Partial) -> bool:
    return all(
        g.shape == w.shape
        and torch.allclose(g.double(), w.double(), rtol=1e-4, atol=1e-6, equal_nan=True)
        for g, w in zip(got, want, strict=True)
    )


def _diagnose(got: Partial, a: Partial, b: Partial) -> str | None:
    """The hint of the first known mistake whose output equals ``got`` on these inputs."""
    if _same(got, _nan_for_empty_rows(a, b)) and any(t.isnan().any() for t in got):
        return _EMPTY_HINT
    for mistake, hint in _MISTAKES:
        if _same(got, mistake(a, b)):
            return hint
    return None


def check_merge_partials(
    fn: Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Any],
) -> CheckResult:
    """Check the reader's merge of two partial softmax results (chapter 9's section "Tiled
    attention: the online softmax").

    The reader writes ``fn(m_a, l_a, acc_a, m_b, l_b, acc_b) -> (m, l, acc)``. Side ``a`` summarises
    some keys, side ``b`` others: ``m`` (shape ``(..., T_q)``) is the largest score of each query
    row, ``l`` (``(..., T_q)``) the sum of ``exp(score - m)``, ``acc`` (``(..., T_q, head_size)``)
    the sum of ``exp(score - m) * value``. The result is the same summary of both sets of keys
    together. A row where neither side saw a key (``m = -inf``, ``l = 0``, ``acc = 0``) stays so.

    Properties: three tensors of the input shapes; the merged maximum is ``max(m_a, m_b)``; two
    halves merge into the softmax-weighted average over all keys (fresh shapes larger than the
    section's, scores of size 1000, exact zeros and ties, float64 and bfloat16 partials in
    their own dtype and precision); folding many blocks one at a time in either order gives
    the same result; rows whose every score is ``-inf`` give no ``nan``.
    """

    def call(s: _Session, a: Partial, b: Partial, what: str) -> Partial:
        out = s.call(fn, *a, *b, input=what)
        if not isinstance(out, tuple | list) or len(out) != 3:
            kind = type(out).__name__
            raise _Mismatch(
                "a tuple (m, l, acc) of three tensors",
                f"a {kind} of {len(out)} items" if isinstance(out, tuple | list) else kind,
                "Return the three tensors m, l and acc, in that order.",
            )
        return _tensor(out[0], a[0], "m"), _tensor(out[1], a[1], "l"), _tensor(out[2], a[2], "acc")

    def compare(got: Partial, a: Partial, b: Partial, what: str) -> None:
        dtype = a[0].dtype
        # The reference in float64; bfloat16 holds 3 digits, float64 must give float64's 16.
        atol, rtol = {torch.float64: (1e-9, 1e-9), torch.bfloat16: (3e-2, 3e-2)}.get(
            dtype, (1e-6, 1e-4)
        )
        a64, b64 = (tuple(t.double() for t in side) for side in (a, b))
        want = _merge(a64, b64)  # type: ignore[arg-type]
        for name, g, w in zip(("m", "l", "acc"), got, want, strict=True):
            nan = g.isnan() & ~w.isnan()
            if nan.any():
                raise _ReturnedNaN(
                    f"{name} without nan",
                    f"nan in {int(nan.sum())} of {g.numel()} entries of {name}",
                    _diagnose(got, a, b) or _NAN_HINT,
                )
            problem = _differ(g, w, atol=atol, rtol=rtol)
            if problem is not None and dtype == torch.float64 and _differ(g, w) is None:
                raise _Mismatch(
                    f"{name} of the merged result (to float64 precision, 1e-9)",
                    f"{name} = {problem}",
                    _FLOAT32_INSIDE_HINT,
                )
            if problem is not None:
                raise _Mismatch(
                    f"{name} of the merged result",
                    f"{name} = {problem}",
                    _diagnose(got, a, b),
                )

    def halves(
        shape: tuple[int, ...], n_keys: int, split: int, seed: int, scale: float
    ) -> tuple[Tensor, Tensor, Partial, Partial]:
        *lead, hs = shape
        scores = _randn(*lead, n_keys, seed=seed, scale=scale)
        v = _randn(*lead[:-1], n_keys, hs, seed=seed + 1000)
        a = _partial(scores[..., :split], v[..., :split, :])
        b = _partial(scores[..., split:], v[..., split:, :])
        return scores, v, a, b

    def describe(shape: tuple[int, ...], n_keys: int, split: int, seed: int, note: str) -> str:
        return (
            f"partial results of query rows {_shape(shape[:-1])} with head_size {shape[-1]}: side "
            f"a over keys 0..{split - 1}, side b over keys {split}..{n_keys - 1} of {n_keys} "
            f"({note}, seed {seed})"
        )

    def shapes(s: _Session) -> None:
        _, _, a, b = halves((2, 3, 4), 6, 3, seed=1, scale=1.0)
        call(s, a, b, describe((2, 3, 4), 6, 3, 1, "scores of size about 1"))

    def maximum(s: _Session) -> None:
        for seed, (shape, n, split, scale) in enumerate(
            [((3, 5, 2), 8, 4, 3.0), ((2, 7, 3), 10, 2, 50.0)], start=10
        ):
            _, _, a, b = halves(shape, n, split, seed=seed, scale=scale)
            what = describe(shape, n, split, seed, f"scores of size about {_num(scale)}")
            got = call(s, a, b, what)
            want = torch.maximum(a[0], b[0])
            problem = _differ(got[0], want, atol=0.0, rtol=0.0)
            if problem is not None:
                raise _Mismatch(
                    "m = max(m_a, m_b), the larger of the two maxima",
                    f"m = {problem}",
                    _diagnose(got, a, b) or "The merged maximum is torch.maximum(m_a, m_b).",
                )

    def two_halves(s: _Session) -> None:
        cases = [
            ((4, 6, 8), 12, 5, 20, 2.0, "scores of size about 2"),
            ((2, 3, 40, 16), 64, 17, 21, 1000.0, "scores of size about 1000"),
            ((3, 9, 8), 9, 1, 22, 10.0, "one key on side a"),
        ]
        for shape, n, split, seed, scale, note in cases:
            scores, v, a, b = halves(shape, n, split, seed=seed, scale=scale)
            what = describe(shape, n, split, seed, note)
            compare(call(s, a, b, what), a, b, what)
        # The input's dtype kept, and its precision: float64 and bfloat16 partials.
        for dtype, seed, shape in ((torch.float64, 24, (3, 5, 6)), (torch.bfloat16, 25, (2, 4, 6))):
            _, _, a, b = halves(shape, 10, 4, seed=seed, scale=2.0)
            a = tuple(t.to(dtype) for t in a)  # type: ignore[assignment]
            b = tuple(t.to(dtype) for t in b)  # type: ignore[assignment]
            what = describe(shape, 10, 4, seed, f"scores of size about 2, {_dtype(dtype)}")
            compare(call(s, a, b, what), a, b, what)
        # Exact zeros and ties: every score 0 on both sides (equal maxima, uniform weights).
        v = _randn(3, 6, 5, seed=23)
        zeros = torch.zeros(3, 2, 6)
        a, b = _partial(zeros[..., :2], v[:, :2]), _partial(zeros[..., 2:], v[:, 2:])
        what = "every score exactly 0 (equal maxima m_a = m_b = 0), rows (3, 2), head_size 5"
        compare(call(s, a, b, what), a, b, what)

    def folding(s: _Session) -> None:
        T_q, n_keys, hs, block = 5, 300, 16, 37  # a long row, blocks that do not divide it
        scores = _randn(2, T_q, n_keys, seed=30, scale=8.0)
        scores[..., 100:140] += 40.0  # a late block raises the maximum
        v = _randn(2, n_keys, hs, seed=31)
        want = torch.softmax(scores, dim=-1) @ v
        for order in ("left to right", "right to left"):
            starts = list(range(0, n_keys, block))
            if order == "right to left":
                starts.reverse()
            state: Partial | None = None
            for j in starts:
                part = _partial(scores[..., j : j + block], v[:, j : j + block])
                if state is None:
                    state = part
                    continue
                what = (
                    f"folding {len(starts)} blocks of {block} keys ({n_keys} keys, rows (2, "
                    f"{T_q}), head_size {hs}, seed 30) {order}: merging the block at key {j} "
                    "into the result so far"
                )
                got = call(s, state, part, what)
                compare(got, state, part, what)
                state = got
            assert state is not None
            out = state[2] / state[1][..., None]
            problem = _differ(out, want, atol=1e-5, rtol=1e-4)
            if problem is not None:
                raise _Mismatch("acc / l = softmax(scores) @ v over all keys", problem)

    def empty_rows(s: _Session) -> None:
        v = _randn(3, 8, 4, seed=40)
        scores = _randn(3, 4, 8, seed=41, scale=3.0)
        scores[0] = NEG_INF  # every row of the first batch entry: no key visible at all
        scores[1, :, :5] = NEG_INF  # side a empty, side b not
        scores[2, 1:, 5:] = NEG_INF  # side b empty for three rows
        a, b = _partial(scores[..., :5], v[:, :5]), _partial(scores[..., 5:], v[:, 5:])
        what = (
            "rows (3, 4), head_size 4, keys 0..4 on side a and 5..7 on side b, seed 41; in batch "
            "entry 0 every score is -inf on both sides, in entry 1 every score of side a, in "
            "entry 2 every score of side b for rows 1..3"
        )
        compare(call(s, a, b, what), a, b, what)

    neutral = (
        "m = max(m_a, m_b); rescale each side to it: l = exp(m_a - m) * l_a + exp(m_b - m) * l_b, "
        "and acc the same way with the factors unsqueezed to (..., T_q, 1)."
    )
    return _run(
        "check_merge_partials",
        [
            _Property(
                "shapes",
                "returns (m, l, acc) of the input shapes",
                "Return three tensors: m and l like m_a, acc like acc_a.",
                shapes,
            ),
            _Property("maximum", "the merged maximum is max(m_a, m_b)", neutral, maximum),
            _Property(
                "two_halves",
                "two halves merge into the summary of all keys (sizes up to 1000, zeros, ties)",
                neutral,
                two_halves,
            ),
            _Property(
                "folding",
                "folding many blocks one at a time gives softmax @ v, in either order",
                neutral,
                folding,
            ),
            _Property(
                "empty_rows",
                "rows whose every score is -inf stay empty, without nan",
                "A row that saw no key is m = -inf, l = 0, acc = 0, and merging it with another "
                "side must give that side back unchanged.",
                empty_rows,
            ),
        ],
    )
