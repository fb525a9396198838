"""The exercise checker of chapter 6: the sinusoidal encoding (``check_sinusoidal_encoding``).

Defined in chapter 6, "Positional encoding".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from helpers.checking._core import (
    CheckResult,
    _differ,
    _expect_close,
    _Mismatch,
    _mistake_hint,
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

    Properties: the shape is ``(T, d_model)``; every value lies in ``[-1, 1]`` (up to
    ``T = 10000``, beyond a table built in advance for 5000 positions); distinct
    positions get distinct rows; shifting by ``k`` positions is a rotation,
    ``PE[pos + k] = M_k PE[pos]`` with ``M_k`` from ``helpers.positional.sinusoidal_shift_matrix``
    (for the ``base`` passed in); with the default base the encoding equals the formula with
    base 10000.
    """
    from helpers.positional import sinusoidal_encoding, sinusoidal_shift_matrix

    # Each property has its own sizes (a pure function of T and d_model has no seed), up to
    # T = 10000 (longer than a table built in advance for max_len = 5000 and sliced to [:T])
    # and d_model = 130, beyond the chapter's 128.
    cases = [(1, 2), (10, 8), (50, 16), (64, 32)]
    bounded_cases = [(3, 4), (17, 6), (100, 130), (10000, 10)]
    formula_cases = [(2, 2), (11, 8), (50, 18), (128, 64)]

    def layout(T: int, d: int, base: float, *, two_i_all: bool) -> torch.Tensor:
        """The pitfall: sin for even positions, cos for odd ones (one row each)."""
        n = T + T % 2
        two_i = 2 * torch.arange(0, d, dtype=torch.float64) if two_i_all else None
        if two_i is None:
            two_i = torch.arange(0, d, dtype=torch.float64).div(2).floor().mul(2)
        denom = base ** (two_i / d)
        even = torch.arange(0, n, 2, dtype=torch.float64)[:, None]
        odd = torch.arange(1, n, 2, dtype=torch.float64)[:, None]
        rows = torch.stack([torch.sin(even / denom), torch.cos(odd / denom)], dim=1)
        return rows.reshape(n, d)[:T]

    def encoding(T: int, d: int, base: float, start: int = 0, exponent: float = 2.0) -> Any:
        pos = torch.arange(start, start + T, dtype=torch.float64)[:, None]
        omega = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
        return torch.stack([(pos * omega).sin(), (pos * omega).cos()], -1).reshape(T, d)

    def halves(T: int, d: int, base: float) -> torch.Tensor:
        pe = encoding(T, d, base)
        return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=-1)

    def mistakes(T: int, d: int, base: float) -> list[tuple[str, Callable[[], Any]]]:
        return [
            (layout_hint, lambda: layout(T, d, 1000.0, two_i_all=True)),
            (layout_hint, lambda: layout(T, d, base, two_i_all=False)),
            (
                "Your encoding puts every sine first and every cosine after it: interleave them, "
                "sin in column 2i and cos in column 2i+1.",
                lambda: halves(T, d, base),
            ),
            (
                "Your rows match positions 1..T: the first row is position 0 (sin 0 = 0, "
                "cos 0 = 1).",
                lambda: encoding(T, d, base, start=1),
            ),
            (
                "Your frequencies match base**(-i/d_model) for column pair i: the exponent is "
                "-2i/d_model.",
                lambda: encoding(T, d, base, exponent=1.0),
            ),
            (
                "Your encoding ignores the base argument: use it in the frequencies, "
                "base**(-2i/d_model).",
                lambda: encoding(T, d, 10000.0) if base != 10000.0 else None,
            ),
            (
                "The default base is 10000 (def fn(T, d_model, base=10000.0)), as in the paper; "
                "your encoding matches base 1000.",
                lambda: encoding(T, d, 1000.0),
            ),
        ]

    def call(s: _Session, T: int, d: int, base: float | None = None) -> torch.Tensor:
        if base is None:
            out = s.call(fn, T, d, input=f"T = {T}, d_model = {d} (default base)")
        else:
            out = s.call(fn, T, d, base=base, input=f"T = {T}, d_model = {d}, base = {base}")
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[1] == d:
            if out.shape[0] < T:
                raise _Mismatch(
                    f"the encodings: a tensor of shape ({T}, {d})",
                    f"shape ({out.shape[0]}, {d}): only {out.shape[0]} rows for T = {T}",
                    f"Your function returns {out.shape[0]} rows when asked for {T}: a table of "
                    f"positions computed in advance (for {out.shape[0]} positions) and sliced "
                    "with [:T] has no more rows than that. Compute the rows of positions "
                    "0..T-1, however large T is.",
                )
        return _tensor_out(out, (T, d), "the encodings")

    def shape(s: _Session) -> None:
        for T, d in cases:
            call(s, T, d)

    def bounded(s: _Session) -> None:
        for T, d in bounded_cases:
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
                _mistake_hint(pe, mistakes(T, d, 10000.0), None),
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
                            _mistake_hint(pe, mistakes(T, d, base), None),
                        )

    def formula(s: _Session) -> None:
        for T, d in formula_cases:
            pe = call(s, T, d)
            _expect_close(
                pe,
                sinusoidal_encoding(T, d, dtype=torch.float64),
                "sin / cos(pos / 10000**(2i / d_model)) in columns 2i / 2i+1",
                atol=1e-5,
                mistakes=mistakes(T, d, 10000.0),
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
            _Property(
                "distinct",
                "distinct positions get distinct rows",
                "Row pos holds the angles pos * base**(-2i/d_model): each position its own row.",
                distinct,
            ),
            _Property(
                "shift",
                "shifting by k positions is a rotation: PE[pos + k] = M_k PE[pos]",
                "Column 2i = sin(pos * w_i), column 2i+1 = cos(pos * w_i), w_i = "
                "base**(-2i/d_model), for every position and the base passed in.",
                shift,
            ),
            _Property(
                "formula",
                "with the default base, equals the formula with base 10000",
                "Column 2i = sin(pos * w_i), column 2i+1 = cos(pos * w_i), w_i = "
                "10000**(-2i/d_model), for positions 0..T-1.",
                formula,
            ),
        ],
    )
