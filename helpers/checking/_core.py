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

Failures that are not a property are reported as what they are, each with its own first line:
the function raised an exception (its type, message and the line of the reader's code that
raised it), returned nan or inf, changed its input in place, had a side effect (changed torch's
global random state, switched a module's mode, or gave another result for the same input on a
later call), did not finish in time, is not a function at all, or hands the whole exercise to
code that already does it (the block checker: a function that calls the block itself).

A report in which every property holds may end with a note that does not fail the function
(the causal attention checker: a one-line call of ``F.scaled_dot_product_attention`` is right,
but it is not the exercise).

A checker never raises and never prints a traceback: whatever the reader's code raises becomes
part of the report. Random draws use their own seeded generators (the global random state is
saved and restored), so the report is the same text on every run.

Every call of the reader's function, and of code it leaves behind (a hook it registers, the
``remove()`` of a handle it returns: :meth:`_Session.run`), is bounded in time: it is stopped
after :data:`CALL_TIME_LIMIT` seconds, and all the calls of one check together get
:data:`CHECK_TIME_LIMIT` seconds, so a function that never returns (a ``continue`` where
``break`` was meant) gives a report, not a kernel that has to be interrupted. On Linux and macOS,
in the main thread (where a Jupyter kernel runs a cell), the call is interrupted by a ``SIGALRM``
timer; elsewhere it runs in a daemon thread that is asked to stop with an asynchronous exception.
Either way a function stuck inside one long C call (one enormous tensor operation) is
interrupted only when that call returns; a function that catches ``BaseException`` can ignore
the request, and in the daemon thread it then keeps running in the background.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import math
import os
import re
import signal
import sysconfig
import textwrap
import threading
import time
import traceback
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
CALL_TIME_LIMIT = 10.0  # seconds one call of the reader's function may take
CHECK_TIME_LIMIT = 60.0  # seconds all the calls of one check may take together
_USE_SIGNALS = True  # interrupt a call with SIGALRM where possible (else a daemon thread)


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
        n_calls: how many inputs the reader's function was called on (a repeated call on an
            input it was given before, to find state kept between calls, is not counted).
        report: the text the checker printed.
        kind: what went wrong, ``None`` when nothing did: ``"property"`` (a property does not
            hold), ``"raised"`` (the function raised an exception), ``"nan"`` (it returned nan
            or inf), ``"changed_input"`` (it changed an argument in place), ``"side_effect"``
            (it changed torch's global random state or kept state between calls),
            ``"timeout"`` (it did not finish in time), ``"not_callable"`` (the check was given
            something that is not a function), ``"not_the_exercise"`` (it hands the whole
            exercise to code that does it, such as the block's own forward), ``"exited"`` (it
            ended its process: the distributed check only) or ``"not_implemented"``.
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
    kind: str | None = None

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

    kind = "property"

    def __init__(self, expected: str, got: str, hint: str | None = None) -> None:
        super().__init__(got)
        self.expected, self.got, self.hint = expected, got, hint


class _WrongDtype(_Mismatch):
    """The reader's function returned another dtype than its input's (a failed property)."""


class _ReturnedNaN(_Mismatch):
    """The reader's function returned nan or inf where the answer is finite."""

    kind = "nan"


class _ChangedInput(_Mismatch):
    """The reader's function changed one of its arguments in place."""

    kind = "changed_input"


class _SideEffect(_Mismatch):
    """The reader's function changed something outside itself (global random state, a module's
    mode) or kept state between calls."""

    kind = "side_effect"


class _TimedOut(_Mismatch):
    """The reader's function did not finish within its time."""

    kind = "timeout"


class _NotTheExercise(_Mismatch):
    """The reader's function hands the whole exercise to code that already does it (a module's
    own forward): right numbers, but not the exercise. ``header`` is the report's first line."""

    kind = "not_the_exercise"

    def __init__(self, header: str, expected: str, got: str, hint: str) -> None:
        super().__init__(expected, got, hint)
        self.header = header


class _NotCallable(Exception):
    """The check was given something that is not a function."""

    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.type_name = type(value).__name__


class _ReaderRaised(Exception):
    """The reader's function raised ``error`` (any exception but ``KeyboardInterrupt``);
    ``doer`` names the reader's code that raised it in the report ("your function", or code
    the function left behind, such as a hook)."""

    def __init__(
        self, error: BaseException, at_call: bool = False, doer: str = "your function"
    ) -> None:
        super().__init__(_error_text(error))
        self.error = error
        self.at_call = at_call  # raised by the call itself (a signature mismatch), not inside
        self.doer = doer


class _ReaderNotImplemented(Exception):
    """The reader's function raised ``NotImplementedError``."""


class _Stop(BaseException):
    """Raised inside the reader's function when its time is up (a ``BaseException``, so that an
    ``except Exception`` in the reader's code does not swallow it)."""


@dataclass(frozen=True)
class _Property:
    key: str
    name: str
    hint: str
    test: Callable[[_Session], None]


def _clone(value: Any) -> Any:
    """A copy of ``value`` for the reader's function: a tensor with the same strides (a
    non-contiguous input stays non-contiguous), a deep copy of a module, anything else as is."""
    if isinstance(value, torch.Tensor):
        if value.is_contiguous():
            return value.clone()
        copied = torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=value.device
        )
        return copied.copy_(value)  # differentiable, as clone() is
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
        for (name, mine), (_, module) in zip(
            original.named_modules(), passed.named_modules(), strict=False
        ):
            if mine.training != module.training:
                mode = "eval" if mine.training else "train"
                where = f"its submodule {name}" if name else "it"
                return f"the mode (it switched {where} to {mode} mode)"
    return None


def _tensors_in(value: Any) -> bool:
    """Whether ``value`` is a tensor, or a tuple or list holding only tensors."""
    if isinstance(value, tuple | list):
        return bool(value) and all(isinstance(v, torch.Tensor) for v in value)
    return isinstance(value, torch.Tensor)


def _identical(a: Any, b: Any) -> bool:
    """Whether two tensors (or tuples or lists of them) hold exactly the same values, nan equal
    to nan."""
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach()
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _same_output(a: Any, b: Any) -> bool:
    """Whether two outputs of the reader's function are the same (tensors to 1e-6, nan equal to
    nan; tuples and lists item by item; anything else by ``==``)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(
                torch.isclose(
                    a.detach().double(), b.detach().double(), 1e-6, 1e-6, equal_nan=True
                ).all()
            )
        )
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same_output(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # an object whose == does not give a truth value
        return a is b


_ORDINAL = ("first", "second", "third", "fourth", "fifth")

_RNG_HINT = (
    "The function needs no random numbers and must leave torch's global random state alone: "
    "remove torch.manual_seed(...) and any draw without a generator of its own (torch.rand, "
    "torch.randn, torch.randint, torch.randperm, dropout in training mode)."
)


def _seed_global(seed: int) -> None:
    """Seed torch's global random stream with ``seed`` and take one draw from it: a function
    that reseeds it (``torch.manual_seed(n)``, for any ``n``, ``seed`` included) then leaves a
    state that differs from the one it was given, and the check sees the side effect."""
    torch.manual_seed(seed)
    torch.rand(1)


def _interrupt_thread(thread: threading.Thread) -> None:
    """Ask ``thread`` to stop: raise :class:`_Stop` in it at its next Python instruction."""
    ident = thread.ident
    set_async_exc = getattr(ctypes.pythonapi, "PyThreadState_SetAsyncExc", None)
    if ident is None or set_async_exc is None:
        return
    set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(_Stop))


def _can_use_signals() -> bool:
    """Whether a ``SIGALRM`` timer can interrupt a call here: on Unix, in the main thread, with
    no timer or ``SIGALRM`` handler of someone else's in place."""
    return (
        _USE_SIGNALS
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
    )


def _call_with_time_limit(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], seconds: float
) -> Any:
    """``fn(*args, **kwargs)``, or :class:`_Stop` if it has not returned after ``seconds``."""
    if _can_use_signals():

        def stop(signum: int, frame: Any) -> None:
            raise _Stop

        previous = signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)

    # Elsewhere (another thread, Windows): run the call in a daemon thread, with the caller's
    # autograd mode (thread-local in PyTorch), and stop it if it takes too long.
    grad = torch.is_grad_enabled()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            with torch.set_grad_enabled(grad):
                box["out"] = fn(*args, **kwargs)
        except BaseException as err:  # handed to the caller's thread below
            box["error"] = err

    thread = threading.Thread(target=target, name="reader-function", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _interrupt_thread(thread)
        thread.join(1.0)
        raise _Stop
    if "error" in box:
        raise box["error"]
    return box["out"]


class _Session:
    """Calls the reader's function, remembering the input the current property is using."""

    def __init__(self, rng_hint: str = _RNG_HINT) -> None:
        self.n_calls = 0
        self.input = "(before the first call)"
        self.passed: tuple[Any, ...] = ()  # the copies of the arguments of the latest call
        self.rng_hint = rng_hint
        self.spent = 0.0  # seconds spent in the reader's function
        self.first: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any, str] | None
        self.first = None  # the first call: function, arguments, output and input, to repeat
        # Per shape of the tensor arguments: the arguments, output and input of each call.
        self.seen: dict[Any, list[tuple[tuple[torch.Tensor, ...], Any, str]]] = {}
        self.stale: str | None = None  # the earlier input whose output the latest call repeated

    def call(
        self, fn: Callable[..., Any], *args: Any, input: str, _repeat: bool = False, **kwargs: Any
    ) -> Any:
        """``fn(*args, **kwargs)`` on copies of the arguments (an in-place edit by the reader's
        code cannot change the checker's reference, and is reported); ``input`` describes them
        for the report. Any exception but ``KeyboardInterrupt`` becomes part of the report,
        ``SystemExit`` included; so does a call that does not return in time, a change of
        torch's global random state, and an edit of an argument. ``_repeat`` marks a call on an
        input given before (to find state kept between calls): it is not counted as an input."""
        self.input = input
        if not callable(fn):
            raise _NotCallable(fn)
        if not _repeat:
            self.n_calls += 1
        passed = tuple(_clone(a) for a in args)
        passed_kw = {name: _clone(value) for name, value in kwargs.items()}
        self.passed = passed
        record = self.first is None and not _repeat
        if record:
            saved = (
                tuple(_snapshot(a) for a in args),
                {name: _snapshot(v) for name, v in kwargs.items()},
            )
        rng = torch.get_rng_state()
        out = self._limited(fn, passed, passed_kw, "your function")
        pairs = [*zip(args, passed, strict=True)]
        pairs += [(kwargs[name], passed_kw[name]) for name in kwargs]
        for number, (original, copy_) in enumerate(pairs):
            what = _edited(original, copy_)
            if what is not None:
                nth = _ORDINAL[number] if number < len(_ORDINAL) else f"number {number + 1}"
                if what.startswith("the mode"):
                    raise _ChangedInput(
                        "the arguments left as they were (the caller still needs them)",
                        f"your function changed {what} of its {nth} argument",
                        "Leave the module's mode to the caller: .eval() or .train() inside your "
                        "function switches dropout (and anything else that depends on the mode) "
                        "for the rest of the caller's training or generation too.",
                    )
                raise _ChangedInput(
                    "the arguments left as they were (the caller still needs them)",
                    f"your function changed {what} of its {nth} argument in place",
                    "Work on new tensors: masked_fill rather than masked_fill_, x = x + y rather "
                    "than x += y, or clone() the input before editing it.",
                )
        self._same_rng(rng, "your function")
        if record:
            self.first = (fn, *saved, _snapshot(out), input)
        if not _repeat:
            self._remember(args, kwargs, out, input)
        return out

    def _remember(self, args: Sequence[Any], kwargs: dict[str, Any], out: Any, input: str) -> None:
        """Keep this call's tensor arguments and output, and set :attr:`stale` when the output is
        exactly that of an earlier call whose tensor arguments had the same shapes and other
        values (a cache keyed by the shape, or an output that ignores the input's values)."""
        tensors = tuple(
            a.detach().clone() for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)
        )
        self.stale = None
        if not tensors or not _tensors_in(out):
            return
        earlier = self.seen.setdefault(tuple(tuple(t.shape) for t in tensors), [])
        for before, output, described in earlier:
            same_input = all(_identical(a, b) for a, b in zip(before, tensors, strict=True))
            if not same_input and _identical(out, output):
                self.stale = described
                break
        earlier.append((tensors, _snapshot(out), input))

    def run(self, fn: Callable[..., Any], *args: Any, input: str, doer: str) -> Any:
        """``fn(*args)``, where ``fn`` runs code the reader's function left behind (a hook it
        registered, the ``remove()`` of a handle it returned), named ``doer`` in the report:
        bounded in time as a call of the reader's function is, an exception in it reported as
        the reader's (with the reader's line), and so is a change of the global random state.
        The arguments are not copied, and the call is not counted as an input."""
        self.input = input
        rng = torch.get_rng_state()
        out = self._limited(fn, args, {}, doer, signature=False)
        self._same_rng(rng, doer)
        return out

    def _limited(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        doer: str,
        *,
        signature: bool = True,
    ) -> Any:
        """``fn(*args, **kwargs)`` within :data:`CALL_TIME_LIMIT` and what is left of
        :data:`CHECK_TIME_LIMIT`; what it raises, or its running out of time, becomes the
        report's (``doer`` names the reader's code in it). With ``signature``, a ``TypeError``
        raised by the call itself is marked as a signature mismatch."""
        limit = min(CALL_TIME_LIMIT, CHECK_TIME_LIMIT - self.spent)
        if limit <= 0:
            raise _TimedOut(
                f"all the calls of the check done within {CHECK_TIME_LIMIT:g} s",
                f"your function's calls took more than {CHECK_TIME_LIMIT:g} s in all",
                _SLOW_HINT,
            )
        started = time.monotonic()
        try:
            return _call_with_time_limit(fn, args, kwargs, limit)
        except NotImplementedError as err:
            raise _ReaderNotImplemented from err
        except KeyboardInterrupt:
            raise
        except _Stop:
            if limit < CALL_TIME_LIMIT:
                raise _TimedOut(
                    f"all the calls of the check done within {CHECK_TIME_LIMIT:g} s",
                    f"your function's calls took more than {CHECK_TIME_LIMIT:g} s in all, this "
                    "one unfinished",
                    _SLOW_HINT,
                ) from None
            raise _TimedOut(
                "a result",
                f"{doer} did not finish within {CALL_TIME_LIMIT:g} s and was stopped",
                _SLOW_HINT,
            ) from None
        except BaseException as err:  # the reader's bug becomes part of the report
            tb = err.__traceback__
            at_call = signature and isinstance(err, TypeError) and _raised_by_the_call(tb)
            raise _ReaderRaised(err, at_call, doer) from err
        finally:
            self.spent += time.monotonic() - started

    def _same_rng(self, before: torch.Tensor, doer: str) -> None:
        """Report a change of torch's global random state since ``before``."""
        if not torch.equal(before, torch.get_rng_state()):
            raise _SideEffect(
                "torch's global random state left as it was",
                f"{doer} reseeded torch's global random number generator or drew random "
                "numbers from it",
                self.rng_hint,
            )

    def repeat_first(self) -> None:
        """Call the reader's function again on the first input it was given, and compare: a
        function that keeps state between calls (a global, a cache, a counter) gives another
        result, which is reported."""
        if self.first is None:
            return
        fn, args, kwargs, out, input = self.first
        again = self.call(
            fn,
            *(_unsnapshot(a) for a in args),
            input=f"{input}, a second time",
            _repeat=True,
            **{name: _unsnapshot(v) for name, v in kwargs.items()},
        )
        if not _same_output(again, out):
            raise _SideEffect(
                "the same result for the same input, every time",
                "another result the second time it was given its first input",
                "Your function keeps state between calls (a global variable, a cache, a counter, "
                "a default argument that is a list or dict it edits): compute the result from "
                "the arguments alone.",
            )


_SLOW_HINT = (
    "A right answer takes well under a second on this input: look for a loop whose condition "
    "never becomes false (a continue where break was meant, an index or a list that never "
    "changes, a while loop that does not shrink its input)."
)


def _snapshot(value: Any) -> Any:
    """A copy of an argument or output that the checker keeps, to repeat a call later."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, torch.Generator):
        return ("generator", value.get_state())
    if isinstance(value, list | dict):
        return copy.deepcopy(value)
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    return value


def _unsnapshot(value: Any) -> Any:
    """The argument a snapshot stands for (a generator in the state it was in)."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "generator":
        generator = torch.Generator()
        generator.set_state(value[1])
        return generator
    if isinstance(value, torch.nn.Module | list | dict):
        return copy.deepcopy(value)
    return value


def _raised_by_the_call(tb: Any) -> bool:
    """Whether a ``TypeError`` came from calling the function (a signature mismatch) rather than
    from inside it: its traceback has no frame of the reader's code."""
    return all(_is_ours(frame.filename) for frame in traceback.extract_tb(tb))


_SKIPPED_DIRS = tuple(
    os.path.normcase(os.path.realpath(path)) + os.sep
    for path in {
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the book's helpers
        os.path.dirname(os.path.abspath(torch.__file__)),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)


def _is_ours(filename: str) -> bool:
    """Whether ``filename`` is code of the book's helpers (the checker included), of torch or of
    Python itself: not the reader's."""
    if filename.startswith("<frozen"):
        return True
    name = os.path.normcase(os.path.realpath(filename))
    return name.startswith(_SKIPPED_DIRS)


def _reader_line(error: BaseException) -> str | None:
    """Where in the reader's code ``error`` was raised: the innermost frame of the traceback
    that is neither the checker's, torch's nor Python's, as ``line N of name: code``."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if _is_ours(frame.filename):
            continue
        code = (frame.line or "").strip()
        where = f"line {frame.lineno} of {frame.name}"
        return f"{where}: {code}" if code else where
    return None


def _message(error: BaseException) -> str:
    """``str(error)``, or a note when the exception's own ``__str__`` fails."""
    try:
        return str(error)
    except Exception as inner:  # the reader's exception class cannot print itself
        return f"(its message cannot be printed: str() of it raised {type(inner).__name__})"


def _error_text(error: BaseException) -> str:
    """``TypeName: first line of the message``, without memory addresses, at most 200 chars."""
    lines = _message(error).strip().splitlines()
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
    message = _message(error)
    if "view size is not compatible" in message:
        return (
            "view() needs a contiguous tensor, and this input is not one (a transpose or a "
            "slice of a larger tensor, as inside a model): use .reshape(...) or "
            ".contiguous().view(...)."
        )
    if re.search(r"same dtype|expected scalar type|dtype.* but got", message):
        return (
            "Two tensors of different dtypes met in one operation: a tensor your function "
            "creates gets torch's default dtype (float32), or float64 from NumPy, not the "
            "input's dtype. Create it with dtype=x.dtype (torch.ones(T, T, dtype=x.dtype)) or "
            "cast it with .to(x.dtype)."
        )
    if "unsupported ScalarType BFloat16" in message:
        return (
            "NumPy has no bfloat16, so .numpy() fails on a bfloat16 tensor (and cuts the "
            "gradient on any other): stay in PyTorch from input to output."
        )
    if "masked_fill_ only supports boolean masks" in message or (
        "masked_fill" in message and "bool" in message
    ):
        return (
            "masked_fill needs a boolean mask (dtype torch.bool), and yours is not one: build it "
            "with torch.ones(T, T, dtype=torch.bool).triu(1), or turn a 0/1 mask into one with "
            "mask == 0."
        )
    if not at_call:
        return None
    name = re.search(r"unexpected keyword argument '(\w+)'", message)
    if name:
        return (
            f"The check passes {name.group(1)}=... by keyword, as in the signature the exercise "
            f"gives: keep its parameter names (your function has no parameter {name.group(1)})."
        )
    if re.search(r"positional argument", message):
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


_RAISED_HINT = (
    "The error comes from your function, at the line shown: call it yourself on an input like "
    "the one above and print the shapes and dtypes of the tensors on that line."
)


_HEADERS = {
    "raised": "Your function raised an exception.",
    "nan": "Your function returned nan or inf.",
    "changed_input": "Your function changed its input.",
    "side_effect": "Your function had a side effect.",
    "timeout": "Your function did not finish in time.",
    "not_the_exercise": "Your function does not do the exercise itself.",
}


def _not_callable_lines(type_name: str) -> list[str]:
    """The report of a check given something that is not a function (an object of the type
    named ``type_name``)."""
    return [
        f"The check needs your function itself, and it was given an object of type {type_name}.",
        _wrap(
            "hint:",
            "Pass the function itself to the check, e.g. check_x(my_function), without calling "
            "it (no parentheses after its name).",
        ),
    ]


def _header(kind: str, number: int, total: int, name: str, first: str | None = None) -> list[str]:
    """The first lines of a failure report: what went wrong (``first``, else the kind's own
    line), and while checking what."""
    if kind == "property":
        return [f"Property {number} of {total} failed: {name}"]
    return [first or _HEADERS[kind], _wrap("during:", f"property {number} of {total}, {name}")]


def _run(
    checker: str,
    properties: Sequence[_Property],
    *,
    rng_hint: str = _RNG_HINT,
    repeat: bool = True,
    note: str | None = None,
) -> CheckResult:
    """Run ``properties`` in order, stop at the first failure, print and return the report.

    After every property holds, the first call is repeated (unless ``repeat`` is false): a
    function that gives another result for the same input keeps state between calls. ``note``,
    when given, follows the line of a report in which every property holds (a remark on how the
    function did it that does not make it wrong)."""
    session = _Session(rng_hint)
    names = tuple(p.name for p in properties)
    passed: list[str] = []
    failed: _Property | None = None
    kind: str | None = None
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
        _seed_global(0)  # a function that draws from the global stream stays reproducible
        for number, prop in enumerate(properties, start=1):
            expected: str | None = None
            first: str | None = None
            hint = prop.hint
            where: str | None = None
            try:
                prop.test(session)
                if number == len(properties) and repeat:
                    session.repeat_first()
            except _ReaderNotImplemented:
                kind = "not_implemented"
                break
            except _NotCallable as err:
                kind = "not_callable"
                failed = prop
                lines = _not_callable_lines(err.type_name)
                break
            except _ReaderRaised as err:
                kind = "raised"
                got = f"{err.doer} raised {_error_text(err.error)}"
                where = _reader_line(err.error)
                hint = _raised_hint(err.error, err.at_call) or _RAISED_HINT
            except _Mismatch as mismatch:
                kind = mismatch.kind
                expected, got = mismatch.expected, mismatch.got
                hint = mismatch.hint or hint
                # The latest output repeats an earlier one for other values: that explains the
                # failure better than a rule restated, or a dtype that is the earlier input's.
                repeated = mismatch.hint is None or isinstance(mismatch, _WrongDtype)
                if kind == "property" and repeated and session.stale is not None:
                    hint = (
                        "Your function returned exactly what it returned for an earlier input of "
                        f"the same shape with other values ({session.stale}): it keeps state "
                        "between calls (a cache keyed by the shape, a global), or its output does "
                        "not depend on the input's values. Compute the result from the arguments "
                        "alone."
                    )
                first = getattr(mismatch, "header", None)
            except Exception as err:  # what the function returned broke the check itself
                kind = "property"
                got = f"an output the check could not use ({_error_text(err)})"
            else:
                passed.append(prop.name)
                continue
            failed = prop
            lines += _header(kind, number, len(properties), prop.name, first)
            lines.append(_wrap("input:", session.input))
            if expected is not None:
                lines.append(_wrap("expected:", expected))
            lines.append(_wrap("got:", got))
            if where is not None:
                lines.append(_wrap("at:", where))
            lines.append(_wrap("hint:", hint))
            if passed:
                lines.append(_wrap("held:", "; ".join(passed)))
            break
    not_implemented = kind == "not_implemented"
    if not_implemented:
        report = NOT_IMPLEMENTED_MESSAGE
    elif failed is None:
        report = textwrap.fill(
            f"All {len(properties)} properties hold: {'; '.join(names)} (checked on "
            f"{session.n_calls} seeded inputs and edge cases).",
            width=_WIDTH,
            break_on_hyphens=False,
        )
        if note is not None:
            report += "\n" + textwrap.fill(note, width=_WIDTH, break_on_hyphens=False)
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
        kind=kind,
    )


# --------------------------------------------------------------------------------------------
# Small tools the properties share: seeded inputs, output checks, comparisons.
# --------------------------------------------------------------------------------------------


def _randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


# Inputs in another dtype or layout than a plain float32 tensor: a function must keep the
# input's dtype (the next layer of a model expects it; float64 must keep float64 precision) and
# must not assume a contiguous layout (queries and keys inside a model are views).
VARIANTS = {
    "float64": ", float64",
    "bfloat16": ", bfloat16",
    "strided": ", non-contiguous (a transposed view, as inside a model)",
}


def _variant(x: torch.Tensor, kind: str) -> torch.Tensor:
    """``x`` as float64, bfloat16, or with the same values in a non-contiguous layout (its last
    two dimensions stored transposed); ``kind`` ``""`` leaves it as it is."""
    if kind == "float64":
        return x.double()
    if kind == "bfloat16":
        return x.bfloat16()
    if kind == "strided":
        return x.transpose(-2, -1).contiguous().transpose(-2, -1)
    return x


FAR_BELOW_TEXT = (
    "every query the same vector and every key pointing the opposite way (every score about "
    "-1e10, the scores at least 1e8 apart: each query's weight falls on one key)"
)


def _far_below_scores(
    lead: Sequence[int], T: int, head_size: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys of shape ``(*lead, T, head_size)`` whose scaled scores are all about
    -1e10 (below a finite fill value such as -1e9), described by :data:`FAR_BELOW_TEXT`.

    Key ``s`` scores ``-1e10 - 1e8 * r[s]`` with every query, for a seeded permutation ``r`` of
    ``0 .. T - 1``. A float32 score of size 1e10 is rounded to a multiple of 1024, and how it is
    rounded depends on the order of the sums (a vectorised kernel, a tile edge of a matrix
    product, another CPU), so scores meant to tie could differ by 1024 on one machine and put
    all of a row's weight on one key there; scores 1e8 apart keep their order on every path, and
    each row's weight falls on its highest visible score, whichever machine computes it.
    """
    g = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (*lead, 1, head_size), generator=g).double() * 2 - 1
    rank = torch.stack([torch.randperm(T, generator=g) for _ in range(math.prod(lead))])
    rank = rank.view(*lead, T, 1).double()
    c = 2.0**14
    q = (c * sign).expand(*lead, T, head_size)
    # q . k_s / sqrt(hs) = -c * length_s * sqrt(hs): choose length_s for the score wanted.
    length = (1e10 + 1e8 * rank) / (c * math.sqrt(head_size))
    k = -length * sign
    return q.float().contiguous(), k.float().contiguous()


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
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Check that the reader returned one floating-point tensor of ``shape`` (of ``dtype``, the
    input's, when given) and, with ``finite``, no nan or inf: reported as such, before any
    comparison, with the hint of the mistake in ``mistakes`` that gives the same output, if one
    does."""
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
    if dtype is not None and out.dtype != dtype:
        raise _WrongDtype(
            want + f" of dtype {_dtype(dtype)}, the input's",
            f"dtype {_dtype(out.dtype)}",
            _dtype_hint(out.dtype, dtype),
        )
    bad = ~torch.isfinite(out.detach())
    if finite and bad.any():
        first = int(bad.flatten().nonzero()[0, 0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), out.shape))
        value = _num(out.detach()[index].item()) if index else _num(out.item())
        raise _ReturnedNaN(
            want + " of finite numbers",
            f"{value} at index {_index(index)} ({int(bad.sum())} of {out.numel()} entries are nan "
            "or inf)",
            _mistake_hint(out, mistakes, None) or NAN_HINT,
        )
    return out


NAN_HINT = (
    "Your function returned nan or inf on this input, where the answer is finite. Print the "
    "intermediate results on this input to find the first step that gives one: exp of a large "
    "number overflows to inf, log(0) is -inf, and 0 / 0, inf - inf and 0 * inf are nan."
)


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_hint(got: torch.dtype, want: torch.dtype) -> str:
    """What gives a result of dtype ``got`` for an input of dtype ``want``."""
    if got == torch.float64:
        return (
            f"Your function returns float64 for a {_dtype(want)} input: a float64 tensor took "
            "part in the computation (torch.arange or torch.tensor with dtype=torch.float64, "
            ".double(), a NumPy array), and PyTorch promotes the result to it. Keep the input's "
            "dtype: create constants with dtype=x.dtype, or cast back with .to(x.dtype)."
        )
    if got == torch.float32:
        return (
            f"Your function returns float32 for a {_dtype(want)} input, and the next layer of a "
            "model expects the dtype it gave. Look for what makes float32: .float(), "
            "dtype=torch.float32, torch.tensor or torch.ones made without dtype=x.dtype; "
            "compute in x.dtype, or cast back with .to(x.dtype)."
        )
    return f"Return the input's dtype, {_dtype(want)}: cast with .to(x.dtype)."


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
    dtype: torch.dtype | None = None,
) -> None:
    """Raise a mismatch if ``got`` differs from ``expected``; its hint is that of the mistake in
    ``mistakes`` whose output ``got`` equals, else ``hint`` (else the property's own). For an
    input of ``dtype`` float64 the tolerance is 1e-9 (float64 holds 16 digits), for bfloat16
    and float16 3e-2 (they hold 3)."""
    if dtype == torch.float64:
        atol, rtol = min(atol, 1e-9), min(rtol, 1e-9)
    elif dtype in (torch.bfloat16, torch.float16):
        atol, rtol = max(atol, 3e-2), max(rtol, 3e-2)
    problem = _differ(got, expected, atol=atol, rtol=rtol)
    if problem is None:
        return
    if dtype == torch.float64 and _differ(got, expected, atol=1e-3, rtol=1e-3) is None:
        hint = (
            "Your output for this float64 input is close to the answer but right only to about "
            "float32 precision: some step runs in float32 (.float(), a constant tensor made "
            "without dtype=x.dtype, angles or frequencies computed in float32). Compute in the "
            "input's dtype, so that float64 gives float64 precision."
        )
        raise _Mismatch(f"{what} (to float64 precision, 1e-9)", problem, hint)
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
    want = torch.autograd.grad(
        (reference.double() * w).sum(), tensors, allow_unused=True, retain_graph=True
    )
    try:
        got = torch.autograd.grad((out.double() * w).sum(), tensors, allow_unused=True)
    except RuntimeError as err:
        message = _message(err)
        if "modified by an inplace operation" in message:
            hint = (
                "An in-place operation in your function (x += ..., masked_fill_, exp_, an "
                "assignment into a slice) overwrote a value that backward() needs: use the "
                "out-of-place form (x = x + ..., masked_fill)."
            )
        else:
            hint = _GRAD_HINT
        raise _Mismatch(
            "an output that backward() can go through (training calls it)",
            f"backward() through your output raised {_error_text(err)}",
            hint,
        ) from err
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
