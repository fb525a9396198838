"""The exercise checker of chapter 6: the sinusoidal encoding (``check_sinusoidal_encoding``).

Defined in chapter 6, "Positional encoding".
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from helpers.checking._core import (
    CheckResult,
    _differ,
    _expect_close,
    _Mismatch,
    _num,
    _nums,
    _Property,
    _run,
    _Session,
    _tensor_out,
)


def check_sinusoidal_encoding(fn: Callable[..., torch.Tensor]) -> CheckResult:
    """Check the reader's sinusoidal position encoding (chapter 6, "Positional encoding").

    The reader writes ``fn(T, d_model, base=10000.0)``; it returns the ``(T, d_model)`` encodings
    of positions ``0 .. T-1``: ``PE[pos, 2i] = sin(pos / base**(2i / d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / base**(2i / d_model))`` (sine and cosine interleaved over the
    dimensions, as ``helpers.positional.sinusoidal_encoding``).

    Properties: the shape is ``(T, d_model)``; every value lies in ``[-1, 1]``; distinct
    positions get distinct rows; shifting by ``k`` positions is a rotation,
    ``PE[pos + k] = M_k PE[pos]`` with ``M_k`` from ``helpers.positional.sinusoidal_shift_matrix``
    (for the ``base`` passed in); with the default base the encoding equals the formula with
    base 10000.
    """
    from helpers.positional import sinusoidal_encoding, sinusoidal_shift_matrix

    cases = [(1, 2), (10, 8), (50, 16), (64, 32)]

    def call(s: _Session, T: int, d: int, base: float | None = None) -> torch.Tensor:
        if base is None:
            out = s.call(fn, T, d, input=f"T = {T}, d_model = {d} (default base)")
        else:
            out = s.call(fn, T, d, base=base, input=f"T = {T}, d_model = {d}, base = {base}")
        return _tensor_out(out, (T, d), "the encodings")

    def shape(s: _Session) -> None:
        for T, d in cases:
            call(s, T, d)

    def bounded(s: _Session) -> None:
        for T, d in cases:
            pe = call(s, T, d)
            if not (pe.abs() <= 1 + 1e-6).all() or not torch.isfinite(pe).all():
                bad = pe[~(pe.abs() <= 1 + 1e-6)]
                raise _Mismatch("every value in [-1, 1] (sines and cosines)", f"{_nums(bad)}")

    def distinct(s: _Session) -> None:
        T, d = 64, 16
        pe = call(s, T, d).double()
        gaps = torch.cdist(pe, pe) + torch.eye(T) * 1e9
        closest = gaps.min()
        if closest < 1e-3:
            i, j = (int(n) for n in torch.unravel_index(gaps.argmin(), gaps.shape))
            raise _Mismatch(
                "a different row for every position",
                f"rows {i} and {j} differ by only {_num(closest.item())} (Euclidean distance)",
                "Multiply each frequency by the position: the angle is pos * base**(-2i/d_model).",
            )

    def shift(s: _Session) -> None:
        for base in (10000.0, 100.0):
            for T, d in ((20, 8), (40, 16)):
                pe = call(s, T, d, base).double()
                for k in (1, 3, 7):
                    m = sinusoidal_shift_matrix(k, d, base, dtype=torch.float64)
                    problem = _differ(pe[k:], pe[:-k] @ m.T, atol=1e-5)
                    if problem is not None:
                        raise _Mismatch(
                            f"PE[pos + {k}] = M_{k} PE[pos] for every pos",
                            f"PE[pos + {k}] differs: {problem}",
                        )

    def formula(s: _Session) -> None:
        for T, d in cases:
            pe = call(s, T, d)
            _expect_close(
                pe,
                sinusoidal_encoding(T, d, dtype=torch.float64),
                "sin / cos(pos / 10000**(2i / d_model)) in columns 2i / 2i+1",
                atol=1e-5,
            )

    layout_hint = (
        "Interleave over the dimensions: column 2i = sin(pos * w_i), column 2i+1 = cos(pos * w_i) "
        "with w_i = base**(-2i/d_model), for every position (not sin for even positions)."
    )
    return _run(
        "check_sinusoidal_encoding",
        [
            _Property("shape", "shape (T, d_model)", "Return one (T, d_model) tensor.", shape),
            _Property(
                "bounded",
                "values in [-1, 1]",
                "Every entry is a sine or a cosine of an angle.",
                bounded,
            ),
            _Property("distinct", "distinct positions get distinct rows", layout_hint, distinct),
            _Property(
                "shift",
                "shifting by k positions is a rotation: PE[pos + k] = M_k PE[pos]",
                layout_hint,
                shift,
            ),
            _Property(
                "formula",
                "with the default base, equals the formula with base 10000",
                "The default base is 10000 (def fn(T, d_model, base=10000.0)), as in the paper.",
                formula,
            ),
        ],
    )
