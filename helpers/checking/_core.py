"""The shared core of the exercise checkers: a result, properties, a runner, and formatting.

Used by the checker of every chapter (one module each in this package).

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


def _causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
