"""The exercise checker of chapter 1: the running average (``check_running_average``).

Defined in chapter 1, "The averaging trick".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.checking._core import (
    VARIANTS,
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
    _variant,
)


def _running_mean(x: torch.Tensor) -> torch.Tensor:
    """The running mean in float64."""
    counts = torch.arange(1, x.shape[1] + 1, dtype=torch.float64)[None, :, None]
    return x.double().cumsum(dim=1) / counts


def check_running_average(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's running average (chapter 1, "The averaging trick").

    The reader writes ``fn(x)``: ``x`` is a ``(B, T, C)`` float tensor; it returns a ``(B, T, C)``
    tensor whose row ``t`` is the mean of ``x[:, :t+1]`` (tokens ``0..t`` of each sequence).

    Properties: the output has the input's shape; row ``t`` does not change when tokens after
    ``t`` change; the sequences of a batch are averaged independently; a constant sequence comes
    back unchanged; row ``t`` equals the mean of tokens ``0..t``.
    """
    # Every property draws its own inputs: no (shape, seed) pair is used by two properties, and
    # the last property reuses the first one's shapes with other data (an output remembered by
    # shape fails), in float64, bfloat16 and a non-contiguous layout. T = 300 is longer than any
    # sequence in the chapter (and than a table of weights built in advance for it).
    cases = [((2, 5, 3), 1), ((1, 1, 4), 2), ((3, 8, 1), 3), ((4, 16, 8), 4)]
    final = [
        ((2, 5, 3), 21, "float64"),
        ((1, 1, 4), 22, ""),
        ((3, 8, 1), 23, "bfloat16"),
        ((4, 16, 8), 24, "strided"),
        ((2, 300, 3), 25, ""),
    ]

    def mistakes(x: torch.Tensor) -> list[tuple[str, Callable[[], torch.Tensor]]]:
        T = x.shape[1]
        counts = torch.arange(1, T + 1, dtype=torch.float64)[None, :, None]
        xd = x.double()
        return [
            (
                "Your rows match the mean over all T tokens: row t may only average x[:, :t+1].",
                lambda: xd.mean(dim=1, keepdim=True).expand_as(xd),
            ),
            (
                "Your rows match the running sum divided by T: divide the sum of tokens 0..t by "
                "t + 1, the number of tokens it adds up.",
                lambda: xd.cumsum(dim=1) / T,
            ),
            (
                "Your rows match the running sum, not the mean: divide the sum of tokens 0..t by "
                "t + 1.",
                lambda: xd.cumsum(dim=1),
            ),
            (
                "Your rows match the mean of the tokens before t, without t itself: row t "
                "averages tokens 0..t, t included.",
                lambda: torch.cat(
                    [torch.zeros_like(xd[:, :1]), (xd.cumsum(1) / counts)[:, :-1]], 1
                ),
            ),
            (
                "Your rows match a running mean over the batch (dim=0): average along time "
                "(dim=1), each sequence on its own.",
                lambda: (
                    xd.cumsum(dim=0)
                    / torch.arange(1, x.shape[0] + 1, dtype=torch.float64)[:, None, None]
                ),
            ),
        ]

    def shape(s: _Session) -> None:
        for size, seed in cases:
            x = _randn(*size, seed=seed)
            out = s.call(fn, x, input=f"x of shape {_shape(size)}, seed {seed}")
            _tensor_out(out, size)

    def causal(s: _Session) -> None:
        x = _randn(2, 6, 3, seed=11)
        out = _tensor_out(s.call(fn, x, input="x of shape (2, 6, 3), seed 11"), x.shape)
        for t in (0, 2, 4):
            changed = x.clone()
            changed[:, t + 1 :] = _randn(2, 5 - t, 3, seed=100 + t, scale=5.0)
            what = f"x of shape (2, 6, 3), seed 11, with the tokens after t = {t} changed"
            out2 = _tensor_out(s.call(fn, changed, input=what), x.shape)
            problem = _differ(out2[:, : t + 1], out[:, : t + 1])
            if problem is not None:
                rows = "row 0" if t == 0 else f"rows 0..{t}"
                hint = _mistake_hint(out2, mistakes(changed)[:1], None)
                raise _Mismatch(
                    f"{rows} the same as before the change", f"in {rows}: {problem}", hint
                )

    def batch(s: _Session) -> None:
        x = _randn(3, 5, 2, seed=12)
        out = _tensor_out(s.call(fn, x, input="x of shape (3, 5, 2), seed 12"), x.shape)
        changed = x.clone()
        changed[1] = _randn(5, 2, seed=13, scale=5.0)
        what = "x of shape (3, 5, 2), seed 12, with sequence 1 changed"
        out2 = _tensor_out(s.call(fn, changed, input=what), x.shape)
        for b in (0, 2):
            problem = _differ(out2[b], out[b])
            if problem is not None:
                hint = _mistake_hint(out2, mistakes(changed)[4:], None)
                raise _Mismatch(
                    f"sequence {b} the same as before", f"in sequence {b}: {problem}", hint
                )

    def constant(s: _Session) -> None:
        for T in (1, 7):
            x = _randn(2, 1, 3, seed=14).expand(2, T, 3).contiguous()
            what = f"a constant sequence: x of shape (2, {T}, 3), every token the same (seed 14)"
            out = _tensor_out(s.call(fn, x, input=what), x.shape)
            _expect_close(out, x, "every row equal to that token", mistakes=mistakes(x))

    def mean(s: _Session) -> None:
        for number, (size, seed, kind) in enumerate(final):
            x = _variant(_randn(*size, seed=seed, scale=3.0), kind)
            with torch.enable_grad():
                x.requires_grad_(number == len(final) - 1)  # the last call with gradients on
                out = s.call(
                    fn, x, input=f"x of shape {_shape(size)}, seed {seed}{VARIANTS.get(kind, '')}"
                )
                out = _tensor_out(out, size, dtype=x.dtype)
                _expect_close(
                    out,
                    _running_mean(x.detach()),
                    "the running mean",
                    mistakes=mistakes(x.detach()),
                    dtype=x.dtype,
                )
                if x.requires_grad:
                    _expect_gradients(out, _running_mean(x), [("x", x)])

    divide_hint = "Row t is the mean of tokens 0..t of its sequence: their sum divided by t + 1."
    return _run(
        "check_running_average",
        [
            _Property("shape", "output shape (B, T, C)", "Return one tensor shaped like x.", shape),
            _Property(
                "causal",
                "row t ignores the tokens after t",
                "Row t may only use x[:, :t+1], the tokens up to and including t.",
                causal,
            ),
            _Property(
                "batch",
                "each sequence averaged on its own",
                "Each sequence x[b] is averaged on its own: nothing mixes the rows of the batch.",
                batch,
            ),
            _Property(
                "constant", "a constant sequence comes back unchanged", divide_hint, constant
            ),
            _Property("mean", "row t is the mean of tokens 0..t", divide_hint, mean),
        ],
    )
