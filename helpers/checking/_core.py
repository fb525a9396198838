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
    """The reader's function raised ``error`` (any exception but ``KeyboardInterrupt``)."""

    def __init__(self, error: BaseException, at_call: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.at_call = at_call  # raised by the call itself (a signature mismatch), not inside


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


def _edited(original: Any, passed: Any) -> str | None:
    """How the reader's function changed ``passed``, the copy of ``original`` it was given."""
    if isinstance(original, torch.Tensor):
        same = original.shape == passed.shape and torch.equal(
            original.detach().nan_to_num(), passed.detach().nan_to_num()
        )
        return None if same else "the values"
    if isinstance(original, torch.nn.Module):
        theirs = passed.state_dict()
        for name, value in original.state_dict().items():
            if name not in theirs or not torch.equal(value, theirs[name]):
                return f"the {name}"
    return None


_ORDINAL = ("first", "second", "third", "fourth", "fifth")


class _Session:
    """Calls the reader's function, remembering the input the current property is using."""

    def __init__(self) -> None:
        self.n_calls = 0
        self.input = "(before the first call)"
        self.passed: tuple[Any, ...] = ()  # the copies of the arguments of the latest call

    def call(self, fn: Callable[..., Any], *args: Any, input: str, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on copies of the arguments (an in-place edit by the reader's
        code cannot change the checker's reference, and is reported); ``input`` describes them
        for the report. Any exception but ``KeyboardInterrupt`` becomes part of the report,
        ``SystemExit`` included."""
        self.input = input
        self.n_calls += 1
        passed = tuple(_clone(a) for a in args)
        passed_kw = {name: _clone(value) for name, value in kwargs.items()}
        self.passed = passed
        if not callable(fn):
            raise _Mismatch(
                "a function",
                f"an object of type {type(fn).__name__}",
                "Pass the function itself to the check, e.g. check_x(my_function), without "
                "calling it.",
            )
        try:
            out = fn(*passed, **passed_kw)
        except NotImplementedError as err:
            raise _ReaderNotImplemented from err
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # the reader's bug becomes part of the report
            tb = err.__traceback__
            at_call = isinstance(err, TypeError) and tb is not None and tb.tb_next is None
            raise _ReaderRaised(err, at_call) from err
        pairs = [*zip(args, passed, strict=True)]
        pairs += [(kwargs[name], passed_kw[name]) for name in kwargs]
        for number, (original, copy_) in enumerate(pairs):
            what = _edited(original, copy_)
            if what is not None:
                nth = _ORDINAL[number] if number < len(_ORDINAL) else f"number {number + 1}"
                raise _Mismatch(
                    "the arguments left as they were (the caller still needs them)",
                    f"your function changed {what} of its {nth} argument in place",
                    "Work on new tensors: masked_fill rather than masked_fill_, x = x + y rather "
                    "than x += y, or clone() the input before editing it.",
                )
        return out


def _error_text(error: BaseException) -> str:
    """``TypeName: first line of the message``, without memory addresses, at most 200 chars."""
    lines = str(error).strip().splitlines()
    message = re.sub(r" at 0x[0-9a-fA-F]+", "", lines[0] if lines else "")
    message = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", message)
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _raised_hint(error: BaseException, at_call: bool) -> str | None:
    """A hint for the errors that come from the signature rather than the computation."""
    if isinstance(error, SystemExit):
        return (
            "Your function called exit() or sys.exit() (or raised SystemExit): return the "
            "result instead."
        )
    if "view size is not compatible" in str(error):
        return (
            "view() needs a contiguous tensor and a transpose is not one: use .reshape(...) or "
            ".contiguous().view(...)."
        )
    if not at_call:
        return None
    name = re.search(r"unexpected keyword argument '(\w+)'", str(error))
    if name:
        return (
            f"The check passes {name.group(1)}=... by keyword, as in the signature the exercise "
            f"gives: keep its parameter names (your function has no parameter {name.group(1)})."
        )
    if re.search(r"positional argument", str(error)):
        return "Keep the signature the exercise gives: the same parameters, in the same order."
    return None


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
                hint = _raised_hint(err.error, err.at_call) or hint
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


def _num(x: float, digits: int = 4) -> str:
    """A number at ``digits`` significant digits (``nan`` and ``inf`` as such)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.{digits}g}"
    return "0" if text == "-0" else text


def _two_nums(got: float, expected: float) -> tuple[str, str]:
    """Both numbers at 4 significant digits, or at as many more (up to 10) as it takes for
    them to read differently."""
    for digits in range(4, 11):
        a, b = _num(got, digits), _num(expected, digits)
        if a != b:
            break
    return a, b


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def _index(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _nums(values: torch.Tensor, limit: int = 4) -> str:
    flat = values.detach().flatten().double().tolist()
    shown = ", ".join(_num(v) for v in flat[:limit])
    return f"[{shown}{', ...' if len(flat) > limit else ''}]"


def _tensor_out(
    out: Any,
    shape: Sequence[int],
    what: str = "the output",
    *,
    finite: bool = True,
    mistakes: Sequence[tuple[str, Callable[[], torch.Tensor]]] = (),
) -> torch.Tensor:
    """Check that the reader returned one floating-point tensor of ``shape`` (and, with
    ``finite``, no nan or inf: reported as such, before any comparison, with the hint of the
    mistake in ``mistakes`` that gives the same output, if one does)."""
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
    bad = ~torch.isfinite(out.detach())
    if finite and bad.any():
        first = int(bad.flatten().nonzero()[0, 0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), out.shape))
        value = _num(out.detach()[index].item()) if index else _num(out.item())
        raise _Mismatch(
            want + " of finite numbers",
            f"{value} at index {_index(index)} ({int(bad.sum())} of {out.numel()} entries are nan "
            "or inf)",
            _mistake_hint(out, mistakes, None)
            or "Your function returned nan or inf on this input. A softmax over a row whose "
            "scores are all -inf gives nan, and exp of a score above about 88 overflows float32 "
            "unless the row's maximum is subtracted first: print the intermediate results to "
            "find where it first appears.",
        )
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
    got_text, expected_text = _two_nums(g[index].item(), e[index].item())
    return (
        f"{got_text} {where} where {expected_text} is expected "
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
    mistakes: Sequence[tuple[str, Callable[[], torch.Tensor]]] = (),
) -> None:
    """Raise a mismatch if ``got`` differs from ``expected``; its hint is that of the mistake in
    ``mistakes`` whose output ``got`` equals, else ``hint`` (else the property's own)."""
    problem = _differ(got, expected, atol=atol, rtol=rtol)
    if problem is not None:
        raise _Mismatch(what, problem, _mistake_hint(got, mistakes, hint, atol=atol, rtol=rtol))


def _causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


def _mistake_hint(
    got: torch.Tensor,
    mistakes: Sequence[tuple[str, Callable[[], torch.Tensor]]],
    neutral: str | None,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> str | None:
    """The hint of the first mistake whose output (recomputed by the checker on the same input)
    equals ``got``; ``neutral`` when none does: a hint names a mistake only when the reader's
    output is that mistake's."""
    for hint, mistaken in mistakes:
        try:
            out = mistaken()
        except Exception:  # a mistake that cannot even run on this input is not the reader's
            continue
        if (
            isinstance(out, torch.Tensor)
            and out.shape == got.shape
            and torch.isclose(
                got.detach().double(), out.detach().double(), rtol, atol, equal_nan=True
            ).all()
        ):
            return hint
    return neutral


_GRAD_HINT = (
    "Keep every step a differentiable PyTorch operation on the inputs: .detach(), .numpy(), "
    ".item(), torch.tensor(...) of a result, or torch.no_grad() cut the path of the gradient."
)


def _expect_gradients(
    out: torch.Tensor,
    reference: torch.Tensor,
    inputs: Sequence[tuple[str, torch.Tensor]],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> None:
    """The gradients of ``(out * w).sum()`` for a fixed random ``w`` reach every tensor in
    ``inputs`` and equal those of ``reference`` (the same computation done by the checker)."""
    if not out.requires_grad:
        raise _Mismatch(
            "an output that gradients flow through (training calls backward() through it)",
            "an output with requires_grad=False: no gradient reaches the inputs",
            _GRAD_HINT,
        )
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
    tensors = [t for _, t in inputs]
    got = torch.autograd.grad((out.double() * w).sum(), tensors, allow_unused=True)
    want = torch.autograd.grad((reference.double() * w).sum(), tensors, allow_unused=True)
    for (name, _), g, e in zip(inputs, got, want, strict=True):
        if e is None:
            continue
        if g is None or (not g.any() and e.any()):
            raise _Mismatch(
                f"a gradient that reaches {name}", f"no gradient reaches {name}", _GRAD_HINT
            )
        problem = _differ(g, e, atol=atol, rtol=rtol)
        if problem is not None:
            raise _Mismatch(
                f"the gradient of {name} that the formula gives",
                problem,
                "The output is right but its gradient is not: part of the computation is cut "
                "from the gradient (.detach(), .data, torch.no_grad()) or computed apart from it.",
            )


def _usage(checker: str, properties: Sequence[str], message: str) -> CheckResult:
    """Print and return the report of a check that could not start (a wrong call to it)."""
    print(message)
    return CheckResult(
        checker=checker,
        properties=tuple(properties),
        property_keys=(),
        passed=(),
        failed="the check was called without the functions it needs",
        failed_key="usage",
        not_implemented=False,
        n_calls=0,
        report=message,
    )
