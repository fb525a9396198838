"""The exercise checker of chapter 10: rotary position embeddings (``check_rope``).

Defined in chapter 10, "From GPT-2 to a modern transformer".
"""

from __future__ import annotations

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
    _nums,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
)


def _rope_reference(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE written out in float64: pair ``(2i, 2i+1)`` turned by ``pos * 10000**(-2i/hs)``."""
    hs = x.shape[-1]
    freqs = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    angle = positions.to(torch.float64)[:, None] * freqs  # (T, hs / 2)
    cos, sin = angle.cos(), angle.sin()
    even, odd = x.double()[..., 0::2], x.double()[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def check_rope(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's rotary position embedding (chapter 10, "From GPT-2 to a modern
    transformer").

    The reader writes ``fn(x, positions)``: ``x`` is a ``(..., T, head_size)`` tensor of queries
    or keys and ``positions`` a ``(T,)`` integer tensor; it returns ``x`` with each pair of
    dimensions ``(2i, 2i + 1)`` of the row at position ``pos`` rotated by the angle
    ``pos * base ** (-2i / head_size)``, ``base = 10000``:
    ``x'[2i] = x[2i] cos - x[2i+1] sin`` and ``x'[2i+1] = x[2i] sin + x[2i+1] cos``.

    Properties: the output has ``x``'s shape; position 0 leaves a vector unchanged; every
    vector keeps its length; each pair ``(2i, 2i + 1)`` keeps its own length (the pairs are
    adjacent dimensions); the scores ``q . k`` after rotation depend only on the offset between
    the positions (shifting every position by a constant changes nothing); the angles are
    ``pos * 10000 ** (-2i / head_size)`` (compared with a reference written out in the checker),
    also for bfloat16 and non-contiguous inputs, and for float64 ones at positions in the
    thousands, to float64 precision; the output has the input's dtype.
    """
    g_pos = torch.Generator().manual_seed(7)
    cases = [
        ((5, 8), torch.arange(5), "positions 0..4"),
        ((2, 6, 16), torch.arange(6) + 7, "positions 7..12"),
        ((2, 3, 4, 8), torch.randint(0, 100, (4,), generator=g_pos), "random positions < 100"),
        ((1, 2), torch.tensor([3]), "T = 1, head_size = 2, position 3"),
    ]

    # Each property has its own seeds; the reference is also checked in bfloat16, on a
    # non-contiguous x, and in float64 (to float64 precision) on T = 80, head_size = 96, beyond
    # the chapter's 64, at positions 4000..4079, past a table of angles built in advance for
    # the chapter's contexts.
    final = [
        (*cases[0], "bfloat16"),
        (*cases[1], "strided"),
        (*cases[2], ""),
        ((2, 80, 96), torch.arange(80) + 4000, "positions 4000..4079", "float64"),
    ]
    kinds = {"": "", "bfloat16": ", bfloat16", "float64": ", float64"}
    kinds["strided"] = ", non-contiguous (a transposed view, as inside a model)"

    def rope(x: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor, sign: float = 1.0) -> Any:
        angle = pos.to(torch.float64)[:, None] * freqs
        cos, sin = angle.cos(), sign * angle.sin()
        even, odd = x.double()[..., 0::2], x.double()[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def freqs(hs: int, base: float = 10000.0, exponent: float = 2.0) -> torch.Tensor:
        return base ** (-exponent * torch.arange(hs // 2, dtype=torch.float64) / hs)

    def mistakes(x: torch.Tensor, pos: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        from helpers.positional import sinusoidal_encoding

        hs, T = x.shape[-1], x.shape[-2]

        def halves() -> torch.Tensor:
            angle = pos.to(torch.float64)[:, None] * freqs(hs)
            a, b = x.double().chunk(2, dim=-1)
            return torch.cat(
                [a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1
            )

        return [
            (
                "Your output matches adding the sinusoidal encoding: rotate, do not add. Each "
                "pair turns by the angle pos * frequency, and at position 0 nothing turns.",
                lambda: (
                    x.double()
                    + sinusoidal_encoding(int(pos.max()) + 1, hs, dtype=torch.float64)[pos]
                ),
            ),
            (
                "Your output matches positions 0..T-1: turn row t by the position passed in, "
                "positions[t].",
                lambda: rope(x, torch.arange(T), freqs(hs)),
            ),
            (
                "Your output matches cos on both dimensions of each pair (a scaling): rotate, "
                "x'[2i] = x[2i] cos - x[2i+1] sin and x'[2i+1] = x[2i] sin + x[2i+1] cos.",
                lambda: (
                    x.double() * (pos.double()[:, None] * freqs(hs)).cos().repeat_interleave(2, -1)
                ),
            ),
            (
                "Your output matches pairing dimension i with i + head_size/2 (the two halves): "
                "this exercise pairs adjacent dimensions, x[..., 0::2] with x[..., 1::2].",
                halves,
            ),
            (
                "Your output matches base 1000: the frequencies are 10000**(-2i/head_size).",
                lambda: rope(x, pos, freqs(hs, base=1000.0)),
            ),
            (
                "Your output matches the exponent -i/head_size: the frequencies are "
                "10000**(-2i/head_size), i = 0 .. head_size/2 - 1.",
                lambda: rope(x, pos, freqs(hs, exponent=1.0)),
            ),
            (
                "Your output matches turning the other way: x'[2i] = x[2i] cos - x[2i+1] sin, "
                "x'[2i+1] = x[2i] sin + x[2i+1] cos.",
                lambda: rope(x, pos, freqs(hs), sign=-1.0),
            ),
            (
                "Your output matches one frequency for every pair: pair i turns at "
                "10000**(-2i/head_size).",
                lambda: rope(x, pos, torch.ones(hs // 2, dtype=torch.float64)),
            ),
        ]

    def call(s: _Session, x: torch.Tensor, positions: torch.Tensor, what: str) -> torch.Tensor:
        out = s.call(fn, x, positions, input=what)
        return _tensor_out(out, x.shape)

    def describe(size: tuple[int, ...], seed: int, where: str) -> str:
        return f"x of shape {_shape(size)}, seed {seed}, {where}"

    def shape(s: _Session) -> None:
        for seed, (size, positions, where) in enumerate(cases, start=1):
            call(s, _randn(*size, seed=seed), positions, describe(size, seed, where))

    def identity(s: _Session) -> None:
        for seed, size in enumerate([(5, 8), (2, 3, 16)], start=10):
            x = _randn(*size, seed=seed)
            positions = torch.zeros(size[-2], dtype=torch.long)
            out = call(s, x, positions, describe(size, seed, "every position 0"))
            _expect_close(
                out, x, "x unchanged (a rotation by angle 0)", mistakes=mistakes(x, positions)
            )

    def norms(s: _Session) -> None:
        for seed, (size, positions, where) in enumerate(cases, start=20):
            x = _randn(*size, seed=seed)
            out = call(s, x, positions, describe(size, seed, where))
            norms = out.double().norm(dim=-1)
            problem = _differ(norms, x.double().norm(dim=-1))
            if problem is not None:
                hint = _mistake_hint(out, mistakes(x, positions), None)
                raise _Mismatch("the length of every vector", problem, hint)

    def pairs(s: _Session) -> None:
        for seed, (size, positions, where) in enumerate(cases, start=30):
            x = _randn(*size, seed=seed)
            out = call(s, x, positions, describe(size, seed, where))
            pair_norm = out.double().unflatten(-1, (-1, 2)).norm(dim=-1)
            problem = _differ(pair_norm, x.double().unflatten(-1, (-1, 2)).norm(dim=-1))
            if problem is not None:
                hint = _mistake_hint(out, mistakes(x, positions), None)
                raise _Mismatch("the length of every pair (x[2i], x[2i+1])", problem, hint)

    def relative(s: _Session) -> None:
        for seed, (T, hs, shift) in enumerate([(6, 8, 5), (4, 16, 40)], start=40):
            x = _randn(2, T, hs, seed=seed)
            q, k = x[0], x[1]
            base = torch.randint(0, 20, (T,), generator=torch.Generator().manual_seed(seed))
            scores = []
            for offset in (0, shift):
                where = f"positions {_nums(base + offset, 6)}"
                qr = call(
                    s, q, base + offset, f"q of shape {_shape(q.shape)}, seed {seed}, {where}"
                )
                kr = call(
                    s, k, base + offset, f"k of shape {_shape(k.shape)}, seed {seed}, {where}"
                )
                scores.append(qr.double() @ kr.double().T)
            _expect_close(
                scores[1],
                scores[0],
                f"the same scores q . k when every position moves by {shift}",
                atol=1e-4,
            )

    def reference(s: _Session) -> None:
        for seed, (size, positions, where, kind) in enumerate(final, start=50):
            x = _variant(_randn(*size, seed=seed), kind)
            grad = seed == 50 + len(final) - 1  # the last call with gradients on
            with torch.enable_grad():
                x.requires_grad_(grad)
                out = s.call(fn, x, positions, input=describe(size, seed, where) + kinds[kind])
                out = _tensor_out(out, x.shape, dtype=x.dtype)
                expected = _rope_reference(x, positions)
                _expect_close(
                    out,
                    expected,
                    "pair i turned by pos * 10000**(-2i/head_size): "
                    "(x[2i] cos - x[2i+1] sin, x[2i] sin + x[2i+1] cos)",
                    atol=1e-5,
                    mistakes=mistakes(x.detach(), positions),
                    dtype=x.dtype,
                )
                if grad:
                    _expect_gradients(out, expected, [("x", x)])

    return _run(
        "check_rope",
        [
            _Property("shape", "output shaped like x", "Return one tensor shaped like x.", shape),
            _Property(
                "identity",
                "position 0 is the identity",
                "At position 0 every angle is 0: each vector comes back unchanged.",
                identity,
            ),
            _Property(
                "norms",
                "every vector keeps its length",
                "A rotation keeps the length of every vector.",
                norms,
            ),
            _Property(
                "pairs",
                "each pair (2i, 2i+1) keeps its length",
                "Each pair (x[2i], x[2i+1]) turns in its own plane, so its length stays the same.",
                pairs,
            ),
            _Property(
                "relative",
                "scores q . k depend only on the offset between positions",
                "Rotate q and k by angles proportional to their positions, the same frequencies.",
                relative,
            ),
            _Property(
                "reference",
                "pair i turns by pos * 10000**(-2i/head_size)",
                "Pair i of the row at position pos turns by pos * 10000**(-2i/head_size).",
                reference,
            ),
        ],
    )
