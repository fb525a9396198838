"""Checkers for the exercises where the reader writes a function and the book checks it.

Used by the exercises of every chapter.

Each ``check_*`` function takes the reader's function,
runs it on seeded random inputs and edge cases, and tests the properties that define the concept
(causality, rows of probabilities, a rotation, agreement with PyTorch's own implementation, ...)
rather than one magic output. It prints a short report and returns a :class:`CheckResult`, which
is truthy only when every property holds:

* all properties hold: one line listing them;
* a property fails: its name, the input it failed on (shape, seed or edge case), expected vs got
  (a few numbers, never a whole tensor) and a one-line hint;
* the function raises ``NotImplementedError`` (the exercise's empty stub): a one-line reminder.

A checker never raises and never prints a traceback: whatever the reader's code raises becomes
part of the report. Random draws use their own seeded generators (the global random state is
saved and restored), so the report is the same text on every run.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

NOT_IMPLEMENTED_MESSAGE = (
    "Not implemented yet: fill in the function above, then run this cell again."
)
_WIDTH = 100  # report lines are wrapped to this width


# --------------------------------------------------------------------------------------------
# The shared core: a result, properties, and a session that calls the reader's function.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """What a checker found. Truthy only when every property held.

    Attributes:
        checker: the checker's name, e.g. ``"check_causal_softmax"``.
        properties: the names of all the properties the checker tests, in order.
        property_keys: a short stable identifier for each of them (used by the tests).
        passed: the names of the properties that held (before the first failure).
        failed: the name of the first property that failed, or ``None``.
        failed_key: the identifier of that property, or ``None``.
        not_implemented: the function raised ``NotImplementedError``.
        n_calls: how many times the reader's function was called.
        report: the text the checker printed.
    """

    checker: str
    properties: tuple[str, ...]
    property_keys: tuple[str, ...]
    passed: tuple[str, ...]
    failed: str | None
    failed_key: str | None
    not_implemented: bool
    n_calls: int
    report: str

    def __bool__(self) -> bool:
        return self.failed is None and not self.not_implemented

    def __str__(self) -> str:
        return self.report

    def __repr__(self) -> str:
        if self.not_implemented:
            status = "not implemented yet"
        elif self.failed is not None:
            status = f"failed: {self.failed}"
        else:
            status = f"all {len(self.properties)} properties hold"
        return f"CheckResult({self.checker}: {status})"

    def _ipython_display_(self) -> None:
        """Show nothing in Jupyter: the checker has already printed the report."""


class _Mismatch(Exception):
    """A property does not hold: what was expected and what the reader's function gave."""

    def __init__(self, expected: str, got: str, hint: str | None = None) -> None:
        super().__init__(got)
        self.expected, self.got, self.hint = expected, got, hint


class _ReaderRaised(Exception):
    """The reader's function raised ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _ReaderNotImplemented(Exception):
    """The reader's function raised ``NotImplementedError``."""


@dataclass(frozen=True)
class _Property:
    key: str
    name: str
    hint: str
    test: Callable[[_Session], None]


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    return value


class _Session:
    """Calls the reader's function, remembering the input the current property is using."""

    def __init__(self) -> None:
        self.n_calls = 0
        self.input = "(before the first call)"

    def call(self, fn: Callable[..., Any], *args: Any, input: str, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on copies of the arguments (an in-place edit by the reader's
        code cannot change the checker's reference); ``input`` describes them for the report."""
        self.input = input
        self.n_calls += 1
        args = tuple(_clone(a) for a in args)
        kwargs = {name: _clone(value) for name, value in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except NotImplementedError as err:
            raise _ReaderNotImplemented from err
        except Exception as err:  # the reader's bug becomes part of the report
            raise _ReaderRaised(err) from err


def _error_text(error: BaseException) -> str:
    """``TypeName: first line of the message``, without memory addresses, at most 200 chars."""
    lines = str(error).strip().splitlines()
    message = re.sub(r" at 0x[0-9a-fA-F]+", "", lines[0] if lines else "")
    message = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", message)
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _wrap(label: str, text: str) -> str:
    return textwrap.fill(
        text,
        width=_WIDTH,
        initial_indent=f"  {label:<9} ",
        subsequent_indent=" " * 12,
        break_on_hyphens=False,
    )


@contextlib.contextmanager
def _restore_threads(threads: int) -> Iterator[None]:
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _run(checker: str, properties: Sequence[_Property]) -> CheckResult:
    """Run ``properties`` in order, stop at the first failure, print and return the report."""
    session = _Session()
    names = tuple(p.name for p in properties)
    passed: list[str] = []
    failed: _Property | None = None
    not_implemented = False
    lines: list[str] = []
    threads = torch.get_num_threads()
    # The inputs are tiny: one thread is fastest and does not wait on a busy machine's cores.
    torch.set_num_threads(1)
    with (
        warnings.catch_warnings(),
        torch.random.fork_rng(devices=[]),
        torch.no_grad(),
        _restore_threads(threads),
    ):
        warnings.simplefilter("ignore")  # a reader's deprecation warning is not the lesson
        torch.manual_seed(0)  # a function that draws from the global stream stays reproducible
        for number, prop in enumerate(properties, start=1):
            expected: str | None = None
            hint = prop.hint
            try:
                prop.test(session)
            except _ReaderNotImplemented:
                not_implemented = True
                break
            except _ReaderRaised as err:
                got = f"your function raised {_error_text(err.error)}"
            except _Mismatch as mismatch:
                expected, got = mismatch.expected, mismatch.got
                hint = mismatch.hint or hint
            except Exception as err:  # what the function returned broke the check itself
                got = f"an output the check could not use ({_error_text(err)})"
            else:
                passed.append(prop.name)
                continue
            failed = prop
            lines.append(f"Property {number} of {len(properties)} failed: {prop.name}")
            lines.append(_wrap("input:", session.input))
            if expected is not None:
                lines.append(_wrap("expected:", expected))
            lines.append(_wrap("got:", got))
            lines.append(_wrap("hint:", hint))
            if passed:
                lines.append(_wrap("held:", "; ".join(passed)))
            break
    if not_implemented:
        report = NOT_IMPLEMENTED_MESSAGE
    elif failed is None:
        report = textwrap.fill(
            f"All {len(properties)} properties hold: {'; '.join(names)} (checked on "
            f"{session.n_calls} seeded inputs and edge cases).",
            width=_WIDTH,
            break_on_hyphens=False,
        )
    else:
        report = "\n".join(lines)
    print(report)
    return CheckResult(
        checker=checker,
        properties=names,
        property_keys=tuple(p.key for p in properties),
        passed=tuple(passed),
        failed=None if failed is None else failed.name,
        failed_key=None if failed is None else failed.key,
        not_implemented=not_implemented,
        n_calls=session.n_calls,
        report=report,
    )


# --------------------------------------------------------------------------------------------
# Small tools the properties share: seeded inputs, output checks, comparisons.
# --------------------------------------------------------------------------------------------


def _randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def _num(x: float) -> str:
    """A number at 4 significant digits (``nan`` and ``inf`` as such)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.4g}"
    return "0" if text == "-0" else text


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def _index(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _nums(values: torch.Tensor, limit: int = 4) -> str:
    flat = values.detach().flatten().double().tolist()
    shown = ", ".join(_num(v) for v in flat[:limit])
    return f"[{shown}{', ...' if len(flat) > limit else ''}]"


def _tensor_out(out: Any, shape: Sequence[int], what: str = "the output") -> torch.Tensor:
    """Check that the reader returned one floating-point tensor of ``shape``."""
    want = f"{what}: a tensor of shape {_shape(shape)}"
    if isinstance(out, tuple | list):
        raise _Mismatch(
            want,
            f"a {type(out).__name__} of {len(out)} items",
            "Return only the tensor asked for (not a tuple, e.g. not (output, weights)).",
        )
    if not isinstance(out, torch.Tensor):
        raise _Mismatch(want, f"an object of type {type(out).__name__}", "Return a torch.Tensor.")
    if tuple(out.shape) != tuple(shape):
        raise _Mismatch(want, f"shape {_shape(out.shape)}")
    if not out.is_floating_point():
        raise _Mismatch(want + " of floats", f"dtype {out.dtype}")
    return out


def _differ(
    got: torch.Tensor, expected: torch.Tensor, *, atol: float = 1e-5, rtol: float = 1e-4
) -> str | None:
    """``None`` if ``got`` is close to ``expected`` (same shape), else the first entry that
    differs (its index, both values at 4 significant digits) and how many entries differ."""
    g, e = got.detach().double(), expected.detach().double()
    bad = ~torch.isclose(g, e, rtol=rtol, atol=atol)
    if not bad.any():
        return None
    # The first differing entry (in memory order): unlike the largest difference, it does not
    # move when rounding differs slightly between machines.
    first = int(bad.flatten().nonzero()[0, 0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), g.shape))
    n_bad = int(bad.sum())
    where = f"at index {_index(index)}" if index else "at the single entry"
    return (
        f"{_num(g[index].item())} {where} where {_num(e[index].item())} is expected "
        f"({n_bad} of {g.numel()} entries differ)"
    )


def _expect_close(
    got: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    hint: str | None = None,
) -> None:
    problem = _differ(got, expected, atol=atol, rtol=rtol)
    if problem is not None:
        raise _Mismatch(what, problem, hint)


# --------------------------------------------------------------------------------------------
# Chapter 1, "The averaging trick"
# --------------------------------------------------------------------------------------------


def _running_mean(x: torch.Tensor) -> torch.Tensor:
    counts = torch.arange(1, x.shape[1] + 1, dtype=torch.float64)[None, :, None]
    return (x.double().cumsum(dim=1) / counts).to(x.dtype)


def check_running_average(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's running average (chapter 1, "The averaging trick").

    The reader writes ``fn(x)``: ``x`` is a ``(B, T, C)`` float tensor; it returns a ``(B, T, C)``
    tensor whose row ``t`` is the mean of ``x[:, :t+1]`` (tokens ``0..t`` of each sequence).

    Properties: the output has the input's shape; row ``t`` does not change when tokens after
    ``t`` change; the sequences of a batch are averaged independently; a constant sequence comes
    back unchanged; row ``t`` equals the mean of tokens ``0..t``.
    """
    cases = [((2, 5, 3), 1), ((1, 1, 4), 2), ((3, 8, 1), 3), ((4, 16, 8), 4)]

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
                raise _Mismatch(f"{rows} the same as before the change", f"in {rows}: {problem}")

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
                raise _Mismatch(f"sequence {b} the same as before", f"in sequence {b}: {problem}")

    def constant(s: _Session) -> None:
        for T in (1, 7):
            x = _randn(2, 1, 3, seed=14).expand(2, T, 3).contiguous()
            what = f"a constant sequence: x of shape (2, {T}, 3), every token the same (seed 14)"
            out = _tensor_out(s.call(fn, x, input=what), x.shape)
            _expect_close(out, x, "every row equal to that token")

    def mean(s: _Session) -> None:
        for size, seed in [*cases, ((2, 9, 5), 15)]:
            x = _randn(*size, seed=seed, scale=3.0)
            out = s.call(fn, x, input=f"x of shape {_shape(size)}, seed {seed}")
            _expect_close(_tensor_out(out, size), _running_mean(x), "the running mean")

    divide_hint = "Divide the sum of tokens 0..t by t + 1, the number of tokens it adds up."
    return _run(
        "check_running_average",
        [
            _Property("shape", "output shape (B, T, C)", "Return one tensor shaped like x.", shape),
            _Property(
                "causal",
                "row t ignores the tokens after t",
                "Row t may only use x[:, :t+1]; a mean over all T tokens sees the future.",
                causal,
            ),
            _Property(
                "batch",
                "each sequence averaged on its own",
                "Average along the time dimension (dim=1), never across the batch (dim=0).",
                batch,
            ),
            _Property(
                "constant", "a constant sequence comes back unchanged", divide_hint, constant
            ),
            _Property("mean", "row t is the mean of tokens 0..t", divide_hint, mean),
        ],
    )


# --------------------------------------------------------------------------------------------
# Chapter 2, "Causal masking"
# --------------------------------------------------------------------------------------------


def check_causal_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's causal softmax (chapter 2, "Causal masking").

    The reader writes ``fn(scores)``: ``scores`` is a ``(..., T, T)`` float tensor (query ``i``
    in row ``i``, key ``j`` in column ``j``); it returns the causal attention weights of the same
    shape: keys after the query get weight exactly 0, and each row is the softmax of the scores
    of the keys it may see.

    Properties: the weights have the scores' shape (with and without batch dimensions, and for
    ``T = 1``); future keys get weight exactly 0; every row is a probability distribution;
    every row equals the softmax over its visible keys.
    """
    cases = [((5, 5), 1), ((2, 6, 6), 2), ((2, 3, 4, 4), 3), ((1, 1), 4), ((3, 1, 1), 5)]

    def weights(s: _Session, size: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
        scores = _randn(*size, seed=seed, scale=3.0)
        what = f"scores of shape {_shape(size)}, seed {seed}"
        return scores, _tensor_out(s.call(fn, scores, input=what), size, "the weights")

    def shape(s: _Session) -> None:
        for size, seed in cases:
            weights(s, size, seed)

    def future(s: _Session) -> None:
        for size, seed in cases:
            _, w = weights(s, size, seed)
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
                    "Set the future scores to -inf BEFORE the softmax: exp(-inf) = 0, while a "
                    "score of 0 still gets a weight.",
                )

    def rows(s: _Session) -> None:
        for size, seed in cases:
            _, w = weights(s, size, seed)
            if (w < 0).any() or not torch.isfinite(w).all():
                bad = w[(w < 0) | ~torch.isfinite(w)]
                raise _Mismatch("weights in [0, 1]", f"weights such as {_nums(bad)}")
            totals = w.double().sum(dim=-1)
            problem = _differ(totals, torch.ones_like(totals))
            if problem is not None:
                raise _Mismatch("every row sums to 1", f"row sum {problem}")

    def softmax(s: _Session) -> None:
        for size, seed in cases:
            scores, w = weights(s, size, seed)
            T = size[-1]
            allowed = torch.ones(T, T, dtype=torch.bool).tril()
            expected = scores.double().masked_fill(~allowed, -math.inf).softmax(dim=-1)
            _expect_close(w, expected, "the softmax over keys 0..i in row i", atol=1e-6)

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
                "Set the scores above the diagonal to -inf before the softmax.",
                future,
            ),
            _Property(
                "rows",
                "each row is a probability distribution (sums to 1)",
                "Mask, then take the softmax over the keys (dim=-1, not over the queries); "
                "zeroing weights after the softmax leaves the rows short of 1.",
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


# --------------------------------------------------------------------------------------------
# Chapter 3, "Queries, keys and values"
# --------------------------------------------------------------------------------------------


def _causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


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


# --------------------------------------------------------------------------------------------
# Chapter 4, "Scaling and softmax peakiness"
# --------------------------------------------------------------------------------------------


def check_scaled_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's scaled attention scores (chapter 4, "Scaling and softmax peakiness").

    The reader writes ``fn(q, k)``: ``q`` and ``k`` are ``(B, T, head_size)`` tensors; it returns
    the ``(B, T, T)`` scores ``q @ k^T / sqrt(head_size)`` (query ``i`` in row ``i``, key ``j``
    in column ``j``).

    Properties: the scores have shape ``(B, T, T)``; row ``i`` belongs to query ``i`` and column
    ``j`` to key ``j``; for unit-variance ``q`` and ``k`` the scores have variance close to 1 for
    every head size from 16 to 1024; the scores equal ``q @ k^T / sqrt(head_size)``.
    """
    cases = [((2, 5, 8), 1), ((1, 1, 4), 2), ((3, 6, 16), 3), ((2, 4, 64), 4)]

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
                raise _Mismatch(f"only {line} changes", f"other entries changed: {problem}")

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
            _, _, out = call(s, size, seed, what)
            var = out.double().pow(2).mean().item()
            if not 0.8 <= var <= 1.25:
                raise _Mismatch(
                    "variance of the scores between 0.8 and 1.25 (1 in theory)",
                    f"variance {_num(var)}",
                )

    def formula(s: _Session) -> None:
        for size, seed in cases:
            q, k, out = call(s, size, seed)
            expected = q.double() @ k.double().transpose(-2, -1) / math.sqrt(size[-1])
            _expect_close(out, expected, "q @ k.transpose(-2, -1) / sqrt(head_size)")

    scale_hint = (
        "Divide q @ k.transpose(-2, -1) by sqrt(head_size), with head_size = q.shape[-1] "
        "(not by head_size, and not by a fixed number such as sqrt(C))."
    )
    return _run(
        "check_scaled_scores",
        [
            _Property(
                "shape",
                "scores shape (B, T, T)",
                "Transpose only the last two dimensions of k: k.transpose(-2, -1).",
                shape,
            ),
            _Property(
                "rows_and_columns",
                "row i holds query i's scores, column j key j's",
                "Compute q @ k^T, not k @ q^T: queries index the rows.",
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


# --------------------------------------------------------------------------------------------
# Chapter 5, "Multi-head and cross-attention"
# --------------------------------------------------------------------------------------------


def check_split_heads(
    split_heads: Callable[[torch.Tensor, int], torch.Tensor],
    merge_heads: Callable[[torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's head splitting and merging (chapter 5, "Multi-head and cross-attention").

    The reader writes ``split_heads(x, n_head)``: ``x`` is ``(B, T, C)``; it returns
    ``(B, n_head, T, head_size)`` with ``head_size = C // n_head``, head ``h`` holding channels
    ``h * head_size`` to ``(h + 1) * head_size - 1``; and ``merge_heads(y)``: ``y`` is
    ``(B, n_head, T, head_size)``; it returns the ``(B, T, C)`` tensor that undoes the split.

    Properties: ``split_heads`` has shape ``(B, n_head, T, head_size)``; head ``h`` of the split
    is ``x[..., h * head_size:(h + 1) * head_size]``; ``merge_heads`` puts head ``h`` back in
    those channels (shape ``(B, T, C)``); ``merge_heads(split_heads(x))`` is ``x``; attention
    computed with the two functions equals a loop over separate heads with copied weights.
    """
    # (B, T, C, n_head): several heads, T = 1, a single head, head_size = 1, a larger case.
    cases = [(2, 5, 12, 3), (1, 1, 8, 2), (2, 3, 6, 1), (1, 4, 4, 4), (3, 7, 16, 4)]

    def describe(B: int, T: int, C: int, n_head: int, seed: int) -> str:
        return f"x of shape {_shape((B, T, C))}, n_head = {n_head}, seed {seed}"

    def split(s: _Session, B: int, T: int, C: int, n_head: int, seed: int) -> tuple[Any, ...]:
        x = _randn(B, T, C, seed=seed)
        what = "split_heads(x, n_head) with " + describe(B, T, C, n_head, seed)
        y = s.call(split_heads, x, n_head, input=what)
        return x, _tensor_out(y, (B, n_head, T, C // n_head), "split_heads's output")

    def split_shape(s: _Session) -> None:
        for seed, case in enumerate(cases, start=1):
            split(s, *case, seed)

    def split_heads_are_slices(s: _Session) -> None:
        for seed, (B, T, C, n_head) in enumerate(cases, start=1):
            x, y = split(s, B, T, C, n_head, seed)
            hs = C // n_head
            for h in range(n_head):
                problem = _differ(y[:, h], x[..., h * hs : (h + 1) * hs], atol=0, rtol=0)
                if problem is not None:
                    raise _Mismatch(
                        f"head {h} = x[..., {h * hs}:{(h + 1) * hs}] (channels of every token)",
                        f"head {h}: {problem}",
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
                    )

    def round_trip(s: _Session) -> None:
        for seed, (B, T, C, n_head) in enumerate(cases, start=1):
            x, y = split(s, B, T, C, n_head, seed)
            what = "merge_heads(split_heads(x, n_head)) with " + describe(B, T, C, n_head, seed)
            back = s.call(merge_heads, y, input=what)
            _expect_close(_tensor_out(back, (B, T, C), "merge_heads's output"), x, "x", atol=0)

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
            q, k, v = fused.c_attn(x).split(C, dim=2)  # (B, T, C) each, as in the layer
            where = f"one attention layer, {describe(B, T, C, n_head, seed)}"
            heads = []
            for name, t in (("q", q), ("k", k), ("v", v)):
                what = f"split_heads({name}, n_head) in {where}"
                out = s.call(split_heads, t, n_head, input=what)
                heads.append(_tensor_out(out, (B, n_head, T, C // n_head), "split_heads's output"))
            y = F.scaled_dot_product_attention(*heads, is_causal=True)  # (B, n_head, T, hs)
            merged = s.call(merge_heads, y, input=f"merge_heads(attention output) in {where}")
            out = fused.c_proj(_tensor_out(merged, (B, T, C), "merge_heads's output"))
            _expect_close(
                out,
                looped(x),
                "the output of the same heads run one by one (MultiHeadAttentionConcat)",
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
                split_hint,
                split_shape,
            ),
            _Property(
                "split_slices",
                "head h of split_heads(x) is x[..., h*head_size:(h+1)*head_size]",
                split_hint,
                split_heads_are_slices,
            ),
            _Property("merge", "merge_heads puts head h back in its channels", merge_hint, merge),
            _Property(
                "round_trip",
                "merge_heads(split_heads(x)) == x",
                "merge_heads must undo split_heads exactly: " + merge_hint,
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


# --------------------------------------------------------------------------------------------
# Chapter 6, "Positional encoding"
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Chapter 7, "Tiny Shakespeare and a bigram model"
# --------------------------------------------------------------------------------------------


def check_get_batch(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> CheckResult:
    """Check the reader's batch sampler (chapter 7, "Tiny Shakespeare and a bigram model").

    The reader writes ``fn(data, block_size, batch_size, generator)``: ``data`` is a 1-D tensor of
    token ids and ``generator`` a ``torch.Generator``; it returns ``(x, y)``, both
    ``(batch_size, block_size)`` with the dtype of ``data``: each row of ``x`` is a window of
    ``block_size`` consecutive tokens starting at a random position drawn with ``generator``, and
    ``y`` holds the next token for each of them (the same window, one position later in the data).

    Properties: shapes and dtype; every window, targets included, lies inside the data; ``y`` is
    the window shifted by one in the data; the same generator seed gives the same batch (whatever
    the global random state); window starts cover every valid position, first and last included.
    The check's data are distinct token ids, so each window's start can be located in the data.
    """

    def data_of(n: int, seed: int) -> torch.Tensor:
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed))

    def call(
        s: _Session, data: torch.Tensor, block: int, batch: int, seed: int, what: str = ""
    ) -> tuple[torch.Tensor, torch.Tensor]:
        text = what or (
            f"data of {len(data)} tokens, block_size = {block}, batch_size = {batch}, "
            f"generator seeded with {seed}"
        )
        g = torch.Generator().manual_seed(seed)
        out = s.call(fn, data, block, batch, generator=g, input=text)
        if not isinstance(out, tuple | list) or len(out) != 2:
            got = f"a {type(out).__name__}"
            if isinstance(out, tuple | list):
                got += f" of {len(out)} items"
            raise _Mismatch("a pair (x, y)", got, "Return x, y.")
        for name, t in zip("xy", out, strict=True):
            if not isinstance(t, torch.Tensor):
                raise _Mismatch(f"{name}: a tensor", f"a {type(t).__name__}", "Return tensors.")
            if tuple(t.shape) != (batch, block):
                raise _Mismatch(
                    f"{name} of shape {_shape((batch, block))} (batch_size, block_size)",
                    f"shape {_shape(t.shape)}",
                )
            if t.dtype != data.dtype:
                raise _Mismatch(f"{name} of dtype {data.dtype} (token ids)", f"dtype {t.dtype}")
        return out[0], out[1]

    def starts(data: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        position = torch.empty_like(data)
        position[data] = torch.arange(len(data))
        return position[x[:, 0]]

    def shape(s: _Session) -> None:
        for n, block, batch, seed in ((1000, 8, 4, 1), (1000, 1, 1, 2), (500, 16, 3, 3)):
            call(s, data_of(n, seed), block, batch, seed)

    def inside(s: _Session) -> None:
        block = 6
        for n, seed in ((block + 3, 4), (block + 4, 5), (200, 6)):
            data = data_of(n, seed)
            x, y = call(s, data, block, 64, seed)
            x0 = starts(data, x)
            for b in range(64):
                first = int(x0[b])
                if not torch.equal(x[b], data[first : first + block]):
                    raise _Mismatch(
                        f"each row of x a stretch data[s : s + {block}] of the data",
                        f"row {b} of x is {_nums(x[b], block)}: it starts like data[{first}:] "
                        f"but data[{first}:{first + block}] is {_nums(data[first:], block)}",
                        "Each row of x is block_size consecutive tokens: data[s : s + block_size].",
                    )
                if first + block > n - 1:
                    raise _Mismatch(
                        f"every window start s <= {n - block - 1} (len(data) - block_size - 1), "
                        f"so that the target of its last token, data[s + {block}], exists",
                        f"row {b} of x starts at data[{first}]: its last target would be "
                        f"data[{first + block}], past the end of the {n} tokens",
                    )

    def shifted(s: _Session) -> None:
        for n, block, batch, seed in ((1000, 8, 4, 7), (300, 16, 8, 8)):
            data = data_of(n, seed)
            x, y = call(s, data, block, batch, seed)
            x0 = starts(data, x)
            for b in range(batch):
                first = int(x0[b])
                want = data[first + 1 : first + block + 1]
                if not torch.equal(y[b], want):
                    t = int((y[b] != want).nonzero()[0, 0])
                    raise _Mismatch(
                        f"y[{b}, {t}] = data[{first + 1 + t}] = {int(want[t])}, the token after "
                        f"x[{b}, {t}] = data[{first + t}] (row {b} of x starts at data[{first}])",
                        f"y[{b}, {t}] = {int(y[b, t])}; row {b} of y is {_nums(y[b], 5)}",
                    )

    def reproducible(s: _Session) -> None:
        data = data_of(1000, 9)
        batches = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            what = (
                "data of 1000 tokens, block_size = 8, batch_size = 4, a generator seeded with 9, "
                f"global seed {global_seed}"
            )
            batches.append(call(s, data, 8, 4, 9, what))
        torch.manual_seed(0)
        for name, a, b in zip("xy", batches[0], batches[1], strict=True):
            if not torch.equal(a, b):
                raise _Mismatch(
                    f"the same {name} from two generators seeded alike",
                    f"{_nums(a[0], 5)} the first time, {_nums(b[0], 5)} the second (row 0)",
                )

    def spread(s: _Session) -> None:
        block = 6
        for n in (block + 3, block + 2, 1000):
            data = data_of(n, 10)
            x, _ = call(s, data, block, 256, 10)
            seen = starts(data, x)
            last = n - block - 1
            if n < 100:
                missing = sorted(set(range(last + 1)) - set(seen.tolist()))
                if missing:
                    raise _Mismatch(
                        f"every start 0..{last} drawn at least once in 256 windows",
                        f"start {missing[0]} never drawn (starts drawn: "
                        f"{sorted(set(seen.tolist()))})",
                    )
            elif seen.min() > 50 or seen.max() < last - 50:
                raise _Mismatch(
                    f"starts spread over 0..{last} (the smallest below 50, the largest above "
                    f"{last - 50})",
                    f"starts from {int(seen.min())} to {int(seen.max())}",
                )

    range_hint = (
        "Draw the starts with torch.randint(len(data) - block_size, (batch_size,), "
        "generator=generator): s + block_size must still be a position in the data."
    )
    return _run(
        "check_get_batch",
        [
            _Property(
                "shape",
                "x and y are (batch_size, block_size) token ids",
                "Stack the windows: torch.stack([data[s : s + block_size] for s in starts]).",
                shape,
            ),
            _Property(
                "inside",
                "every window, with its targets, lies inside the data",
                range_hint,
                inside,
            ),
            _Property(
                "shifted",
                "y is x shifted by one position in the data",
                "y[b] = data[s + 1 : s + block_size + 1]: every target is the next token.",
                shifted,
            ),
            _Property(
                "reproducible",
                "the same generator seed gives the same batch",
                "Pass generator=generator to torch.randint, so the global random state is unused.",
                reproducible,
            ),
            _Property(
                "spread",
                "starts cover every valid position, the last one included",
                range_hint,
                spread,
            ),
        ],
    )


# --------------------------------------------------------------------------------------------
# Chapter 8, "Building and training a GPT"
# --------------------------------------------------------------------------------------------


def check_block_forward(fn: Callable[[Any, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check the reader's transformer block (chapter 8, "Building and training a GPT").

    The reader writes ``fn(block, x)``: ``block`` is a ``helpers.model.Block`` (use its ``ln_1``,
    ``attn``, ``ln_2`` and ``mlp``) and ``x`` a ``(B, T, C)`` tensor; it returns the ``(B, T, C)``
    output of the pre-LN block: ``x + attn(ln_1(x))``, then that plus ``mlp(ln_2(...))`` of it.

    Properties: the output has shape ``(B, T, C)``; with both branches switched off (their output
    projections zeroed) the input still reaches the output (residual connections); the residual
    stream itself is not normalised, so with both branches off the block returns ``x`` exactly
    (pre-LN, not post-LN); the output equals ``Block.forward`` with the same weights over several
    seeds, with and without biases.
    """
    from helpers.model import Block, GPTConfig

    configs = [(16, 2, False), (12, 3, True)]  # (n_embd, n_head, bias)
    sizes = [(2, 5), (1, 1), (3, 8)]  # (B, T)

    def make_block(n_embd: int, n_head: int, bias: bool, seed: int) -> Block:
        torch.manual_seed(seed)
        cfg = GPTConfig(
            vocab_size=8, block_size=16, n_layer=1, n_head=n_head, n_embd=n_embd, bias=bias
        )
        block = Block(cfg).eval()
        g = torch.Generator().manual_seed(seed)
        for ln in (block.ln_1, block.ln_2):  # LayerNorm weights that are not all ones
            ln.weight.copy_(1 + 0.3 * torch.randn(ln.weight.shape, generator=g))
            if ln.bias is not None:
                ln.bias.copy_(0.2 * torch.randn(ln.bias.shape, generator=g))
        return block

    def branches_off(block: Block) -> Block:
        for proj in (block.attn.c_proj, block.mlp.c_proj):
            proj.weight.zero_()
            if proj.bias is not None:
                proj.bias.zero_()
        for ln in (block.ln_1, block.ln_2):
            ln.weight.fill_(1.0)
            if ln.bias is not None:
                ln.bias.zero_()
        return block

    def describe(cfg: tuple[int, int, bool], B: int, T: int, seed: int, extra: str = "") -> str:
        n_embd, n_head, bias = cfg
        return (
            f"a Block with n_embd = {n_embd}, n_head = {n_head}, bias = {bias}{extra}; "
            f"x of shape {_shape((B, T, n_embd))}, seed {seed}"
        )

    def shape(s: _Session) -> None:
        for seed, (cfg, (B, T)) in enumerate(((c, z) for c in configs for z in sizes), start=1):
            block = make_block(*cfg, seed)
            x = _randn(B, T, cfg[0], seed=seed)
            _tensor_out(s.call(fn, block, x, input=describe(cfg, B, T, seed)), x.shape)

    off = " whose attention and MLP output projections are zero and LayerNorms plain"

    def residual(s: _Session) -> None:
        for seed, cfg in enumerate(configs, start=10):
            block = branches_off(make_block(*cfg, seed))
            x = _randn(2, 5, cfg[0], seed=seed, scale=2.0) + 1.0
            out = _tensor_out(s.call(fn, block, x, input=describe(cfg, 2, 5, seed, off)), x.shape)
            norm = F.layer_norm(out.double(), out.shape[-1:])
            ok = torch.isclose(norm, F.layer_norm(x.double(), x.shape[-1:]), atol=1e-4).all(-1)
            if not ok.all():
                b, t = (int(i) for i in (~ok).nonzero()[0])
                raise _Mismatch(
                    "x itself comes out (up to a LayerNorm): both branches add 0 to it",
                    f"token {t} of sequence {b} comes out as {_nums(out[b, t])} where x is "
                    f"{_nums(x[b, t])}, and not as a normalised copy of it either",
                )

    def pre_ln(s: _Session) -> None:
        for seed, cfg in enumerate(configs, start=20):
            block = branches_off(make_block(*cfg, seed))
            x = _randn(2, 5, cfg[0], seed=seed, scale=2.0) + 1.0
            out = _tensor_out(s.call(fn, block, x, input=describe(cfg, 2, 5, seed, off)), x.shape)
            _expect_close(out, x, "x unchanged: the residual stream is never normalised")

    def matches(s: _Session) -> None:
        for seed, (cfg, (B, T)) in enumerate(((c, z) for c in configs for z in sizes), start=30):
            block = make_block(*cfg, seed)
            x = _randn(B, T, cfg[0], seed=seed)
            out = _tensor_out(s.call(fn, block, x, input=describe(cfg, B, T, seed)), x.shape)
            _expect_close(out, block(x), "block(x), the Block's own forward", atol=1e-5)

    return _run(
        "check_block_forward",
        [
            _Property(
                "shape",
                "output shape (B, T, C)",
                "Return the residual stream x after both branches, shaped like x.",
                shape,
            ),
            _Property(
                "residual",
                "residual connections: x reaches the output when both branches are off",
                "Add each branch to its input: x = x + block.attn(...); x = x + block.mlp(...).",
                residual,
            ),
            _Property(
                "pre_ln",
                "pre-LN: the residual stream is never normalised",
                "Normalise only the branch inputs: x + attn(ln_1(x)), not ln_1(x + attn(x)).",
                pre_ln,
            ),
            _Property(
                "matches_block",
                "equals Block.forward with the same weights",
                "x = x + block.attn(block.ln_1(x)); x = x + block.mlp(block.ln_2(x)); return x.",
                matches,
            ),
        ],
    )


# --------------------------------------------------------------------------------------------
# Chapter 9, "The cost of attention and fast generation"
# --------------------------------------------------------------------------------------------


def check_cached_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's attention with a KV cache (chapter 9, "The cost of attention and fast
    generation").

    The reader writes ``fn(q_new, k, v)``: ``q_new`` is ``(B, n_head, T_new, head_size)``, the
    queries of the newest ``T_new`` tokens; ``k`` and ``v`` are ``(B, n_head, T_past + T_new,
    head_size)``, the keys and values of every token so far (the cached ones first). It returns
    the new tokens' causal attention output ``(B, n_head, T_new, head_size)``: new token ``i``
    sits at position ``T_past + i`` and sees keys ``0 .. T_past + i``.

    Properties: the output has shape ``(B, n_head, T_new, head_size)``; with nothing cached
    (``T_past = 0``) it is ordinary causal attention, for ``T_new = 1`` and ``T_new > 1``; with
    ``T_past > 0`` it equals the last ``T_new`` rows of full causal attention, for ``T_new = 1``
    and ``T_new > 1``; generating token by token with a growing cache gives the same outputs as
    attention over the whole sequence at once.
    """
    # (B, n_head, T_past, T_new, head_size)
    fresh = [(2, 2, 0, 1, 8), (2, 2, 0, 5, 8), (1, 1, 0, 3, 4)]
    cached = [(1, 3, 5, 1, 8), (2, 2, 6, 3, 8), (1, 1, 3, 5, 4), (2, 2, 1, 2, 8)]

    def full(B: int, nh: int, T: int, hs: int, seed: int) -> tuple[torch.Tensor, ...]:
        x = _randn(3, B, nh, T, hs, seed=seed)
        return x[0] * 2.0, x[1] * 2.0, x[2]

    def run_case(s: _Session, case: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
        B, nh, T_past, T_new, hs = case
        q, k, v = full(B, nh, T_past + T_new, hs, seed)
        what = (
            f"q_new of shape {_shape((B, nh, T_new, hs))} (T_new = {T_new}), k and v of shape "
            f"{_shape((B, nh, T_past + T_new, hs))} (T_past = {T_past}), seed {seed}"
        )
        out = s.call(fn, q[..., T_past:, :], k, v, input=what)
        expected = _causal_sdpa(q, k, v, is_causal=True)[..., T_past:, :]
        return _tensor_out(out, (B, nh, T_new, hs)), expected

    def shape(s: _Session) -> None:
        for seed, case in enumerate([*fresh, *cached], start=1):
            run_case(s, case, seed)

    def no_cache(s: _Session) -> None:
        for seed, case in enumerate(fresh, start=10):
            out, expected = run_case(s, case, seed)
            _expect_close(out, expected, "causal attention over the new tokens")

    def with_cache(s: _Session) -> None:
        for seed, case in enumerate(cached, start=20):
            out, expected = run_case(s, case, seed)
            _expect_close(
                out, expected, "the last T_new rows of causal attention over all T_past + T_new"
            )

    def generation(s: _Session) -> None:
        B, nh, T, hs = 2, 2, 8, 8
        for prefill, seed in ((0, 30), (3, 31)):
            q, k, v = full(B, nh, T, hs, seed)
            uncached = _causal_sdpa(q, k, v, is_causal=True)
            steps = []
            if prefill:
                what = f"prefill: the first {prefill} tokens at once (seed {seed})"
                out = s.call(
                    fn, q[..., :prefill, :], k[..., :prefill, :], v[..., :prefill, :], input=what
                )
                steps.append(_tensor_out(out, (B, nh, prefill, hs)))
            for t in range(prefill, T):
                what = (
                    f"generation step for token {t}: q_new of token {t}, k and v of tokens 0..{t} "
                    f"(B = {B}, n_head = {nh}, head_size = {hs}, prefill {prefill}, seed {seed})"
                )
                out = s.call(
                    fn, q[..., t : t + 1, :], k[..., : t + 1, :], v[..., : t + 1, :], input=what
                )
                steps.append(_tensor_out(out, (B, nh, 1, hs)))
                problem = _differ(steps[-1], uncached[..., t : t + 1, :])
                if problem is not None:
                    raise _Mismatch(
                        f"the output of token {t} in attention over the whole sequence", problem
                    )
            _expect_close(torch.cat(steps, dim=-2), uncached, "the uncached outputs")

    offset_hint = (
        "New token i is at position T_past + i, where T_past = k.shape[-2] - q_new.shape[-2]: "
        "it may see keys 0..T_past + i (causal_mask(T_new, T_past=T_past)); "
        "is_causal=True aligns the mask as if T_past were 0."
    )
    return _run(
        "check_cached_attention",
        [
            _Property(
                "shape",
                "output shape (B, n_head, T_new, head_size)",
                "One output row per new query: (T_new, T_past + T_new) weights @ v.",
                shape,
            ),
            _Property(
                "no_cache",
                "with T_past = 0 it is ordinary causal attention",
                "Scale by 1/sqrt(head_size), hide the keys after each query, softmax over keys.",
                no_cache,
            ),
            _Property(
                "with_cache",
                "with T_past > 0, new token i sits at position T_past + i",
                offset_hint,
                with_cache,
            ),
            _Property(
                "generation",
                "cached token-by-token generation equals uncached attention",
                offset_hint,
                generation,
            ),
        ],
    )


# --------------------------------------------------------------------------------------------
# Chapter 10, "From GPT-2 to a modern transformer"
# --------------------------------------------------------------------------------------------


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
    ``pos * 10000 ** (-2i / head_size)`` (compared with a reference written out in the checker).
    """
    g_pos = torch.Generator().manual_seed(7)
    cases = [
        ((5, 8), torch.arange(5), "positions 0..4"),
        ((2, 6, 16), torch.arange(6) + 7, "positions 7..12"),
        ((2, 3, 4, 8), torch.randint(0, 100, (4,), generator=g_pos), "random positions < 100"),
        ((1, 2), torch.tensor([3]), "T = 1, head_size = 2, position 3"),
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
            _expect_close(out, x, "x unchanged (a rotation by angle 0)")

    def norms(s: _Session) -> None:
        for seed, (size, positions, where) in enumerate(cases, start=20):
            x = _randn(*size, seed=seed)
            out = call(s, x, positions, describe(size, seed, where))
            _expect_close(
                out.double().norm(dim=-1), x.double().norm(dim=-1), "the length of every vector"
            )

    def pairs(s: _Session) -> None:
        for seed, (size, positions, where) in enumerate(cases, start=30):
            x = _randn(*size, seed=seed)
            out = call(s, x, positions, describe(size, seed, where))
            pair_norm = out.double().unflatten(-1, (-1, 2)).norm(dim=-1)
            _expect_close(
                pair_norm,
                x.double().unflatten(-1, (-1, 2)).norm(dim=-1),
                "the length of every pair (x[2i], x[2i+1])",
            )

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
        for seed, (size, positions, where) in enumerate(cases, start=50):
            x = _randn(*size, seed=seed)
            out = call(s, x, positions, describe(size, seed, where))
            _expect_close(
                out,
                _rope_reference(x, positions),
                "pair i turned by pos * 10000**(-2i/head_size): "
                "(x[2i] cos - x[2i+1] sin, x[2i] sin + x[2i+1] cos)",
                atol=1e-5,
            )

    return _run(
        "check_rope",
        [
            _Property("shape", "output shaped like x", "Return one tensor shaped like x.", shape),
            _Property(
                "identity",
                "position 0 is the identity",
                "Rotate, do not add: the angle is pos * frequency, and at pos 0 nothing turns.",
                identity,
            ),
            _Property(
                "norms",
                "every vector keeps its length",
                "Use cos and sin of the same angle for both dimensions of a pair (a rotation).",
                norms,
            ),
            _Property(
                "pairs",
                "each pair (2i, 2i+1) keeps its length",
                "Pair adjacent dimensions: x[..., 0::2] with x[..., 1::2] (not the two halves).",
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
                "Frequencies base**(-2i/head_size) with base 10000, i = 0 .. head_size/2 - 1.",
                reference,
            ),
        ],
    )
