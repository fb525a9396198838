"""Measuring tools that give robust numbers on a busy machine.

Defined in chapter 9, "The cost of attention and fast generation".

``median_time`` (median of several runs after a warm-up), ``TensorMemoryTracker`` /
``peak_tensor_bytes`` (a deterministic count of the bytes of tensors alive at once during a
call), ``allocator_peak_bytes`` (the same peak seen by PyTorch's CPU allocator, scratch space
inside fused kernels included), ``profile_ops`` (``torch.profiler``'s per-operator table,
without its log lines; first used in chapter 10), ``operator_calls`` (how many operator calls
a call makes, from Python and in all), ``loglog_slope`` (the exponent of a power law) and
``interleaved_median_times`` (several functions timed in alternating rounds, so that a change of
machine load hits them alike). Chapter 12, "Training on more than one device", adds
``AllocatorTrace`` (the allocator's bytes in use at chosen moments of a call, and their peak).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler_util import EventList
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def median_time(
    fn: Callable[[], Any],
    *,
    repeats: int = 5,
    warmup: int = 1,
    min_seconds: float = 0.0,
    max_repeats: int = 1000,
) -> float:
    """Median wall-clock seconds of ``fn()``, after ``warmup`` unmeasured runs.

    ``fn`` runs at least ``repeats`` times, and more (up to ``max_repeats``) until the measured
    runs add up to ``min_seconds``: a fast call is then timed hundreds of times, a slow one only
    ``repeats`` times. The median ignores the occasional run slowed down by another process, which
    a mean would not.

    Raises:
        ValueError: if ``repeats < 1``, ``warmup < 0``, ``min_seconds < 0`` or
            ``max_repeats < repeats``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds}")
    if max_repeats < repeats:
        raise ValueError(f"max_repeats ({max_repeats}) must be at least repeats ({repeats})")
    for _ in range(warmup):
        fn()
    times: list[float] = []
    while len(times) < repeats or (sum(times) < min_seconds and len(times) < max_repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _silenced_stderr() -> Iterator[None]:
    """Send the process's file descriptor 2 to ``/dev/null`` (C++ log lines, not just Python's)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def profile_ops(fn: Callable[[], Any], *, quiet: bool = True) -> EventList:
    """Run ``fn()`` once under ``torch.profiler`` (CPU activity) and return the per-operator totals.

    The result is ``prof.key_averages()``: print it with ``.table(sort_by="self_cpu_time_total")``
    or read each operator's ``key`` and ``self_cpu_time_total`` (microseconds). With ``quiet``, the
    profiler's own C++ log lines (timestamped ``profiler_start``/``profiler_stop`` messages that
    some PyTorch builds print to stderr) are discarded.
    """
    return _profiled(fn, quiet=quiet).key_averages()


def _profiled(fn: Callable[[], Any], *, quiet: bool = True) -> profile:
    """Run ``fn()`` once under ``torch.profiler`` (CPU activity); return the finished profile."""
    with _silenced_stderr() if quiet else contextlib.nullcontext():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    return prof


@dataclass(frozen=True)
class OperatorCalls:
    """How many PyTorch operators (``aten::...``) a call ran; see :func:`operator_calls`."""

    direct: int  # called from Python, not from inside another operator
    total: int  # the direct calls and the operators they called in turn


def operator_calls(fn: Callable[[], Any]) -> OperatorCalls:
    """Run ``fn()`` once under ``torch.profiler`` and count its PyTorch operator calls.

    ``direct`` counts the calls made from Python (or from autograd's backward functions), not
    from inside another operator: it depends only on the code and the PyTorch version. ``total``
    adds the operators those call in turn (views, reshapes, copies), which can depend on the
    platform: a matrix product, for one, may first copy an input into the layout that the
    machine's BLAS library takes (seen on arm64, not on x86-64).
    """
    prof = _profiled(fn)

    def inside_an_operator(event: Any) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return True
            parent = parent.cpu_parent
        return False

    ops = [e for e in prof.events() if e.name.startswith("aten::")]
    return OperatorCalls(direct=sum(not inside_an_operator(e) for e in ops), total=len(ops))


class TensorMemoryTracker(TorchDispatchMode):
    """Count the bytes of tensors created inside a ``with`` block, and the peak alive at once.

    Every PyTorch operator called inside the block is intercepted; each result that lives in new
    storage (not a view of an existing tensor, not an in-place result) adds its size to
    ``current``, and a finalizer subtracts it again when that storage is freed. ``peak`` is the
    largest ``current`` seen. Tensors that existed before the block are not counted.

    The count is deterministic: it depends only on which tensors the code creates and when they
    are freed, not on the allocator or on other processes. It sees every tensor an operator
    returns, but not the private scratch space a fused kernel allocates inside itself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}

    def _release(self, key: int, nbytes: int) -> None:
        if self._live.pop(key, None) is not None:
            self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        inputs = {
            a.untyped_storage()._cdata
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, torch.Tensor) and a.device.type != "meta"
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._live:
                continue
            nbytes = storage.nbytes()
            self._live[key] = nbytes
            self.current += nbytes
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._release, key, nbytes)
        return out


def peak_tensor_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes of tensors alive at once while ``fn()`` runs (see ``TensorMemoryTracker``).

    The result of ``fn`` is counted while it is being built and dropped afterwards.
    """
    with TensorMemoryTracker() as tracker:
        fn()
    return tracker.peak


def allocator_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated by PyTorch's CPU allocator while ``fn()`` runs, relative to the start.

    ``torch.profiler`` with ``profile_memory=True`` records every allocation and every free of
    the CPU allocator, with its size and time, including the private buffers a fused kernel
    allocates inside itself, which ``TensorMemoryTracker`` cannot see. Replaying them in order
    gives the most bytes allocated at any one moment. Like the tracker's count it is
    deterministic: it counts requested bytes, not the pages the operating system hands out, and
    it ignores memory not obtained through PyTorch's allocator (a BLAS library's own buffers).
    For code that allocates only the tensors its operators return, it equals
    ``peak_tensor_bytes(fn)``, up to the few bytes of Python numbers wrapped as scalar tensors.
    Run single-threaded: per-thread buffers scale with the threads.

    Raises:
        RuntimeError: if this PyTorch's profiler does not expose its memory events.
    """
    with _silenced_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        raise RuntimeError("this PyTorch's profiler does not expose its memory events")
    events = sorted((e.start_ns(), e.nbytes()) for e in results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes  # negative for a free
        peak = max(peak, current)
    return peak


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x``: the exponent ``k`` in ``y ~ x^k``.

    Raises:
        ValueError: on fewer than 2 points, sequences of different lengths, non-positive values,
            or all ``x`` equal.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
    if len(x) < 2:
        raise ValueError(f"need at least 2 points to fit a slope, got {len(x)}")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("a log-log fit needs positive values of x and y")
    lx = [math.log(v) for v in x]
    ly = [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("all x values are equal: the slope is undefined")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=False)) / sxx


def interleaved_median_times(
    fns: dict[str, Callable[[], Any]], *, rounds: int = 5, repeats: int = 4, warmup: int = 2
) -> dict[str, float]:
    """Median wall-clock seconds of each function, timed in alternating rounds.

    Every function first runs ``warmup`` unmeasured times; then, ``rounds`` times over, each
    function in turn runs ``repeats`` measured times. The median over its
    ``rounds * repeats`` runs is returned. On a shared machine whose speed drifts (other
    processes, clock changes), alternating gives every function the same conditions, so their
    ratio is fairer than that of two timings taken one after the other.

    Raises:
        ValueError: if ``fns`` is empty, or ``rounds`` or ``repeats`` is below 1, or ``warmup``
            is negative.
    """
    if not fns:
        raise ValueError("fns is empty: pass at least one function to time")
    if rounds < 1 or repeats < 1:
        raise ValueError(f"rounds and repeats must be at least 1, got {rounds} and {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


class AllocatorTrace:
    """Every allocation and free of PyTorch's CPU allocator inside a ``with`` block, and the
    bytes alive at the start of, and at most during, ranges of it marked by name.

    ``torch.profiler`` with ``profile_memory=True`` records the events (as
    ``allocator_peak_bytes`` does), each with its address; ``with trace.mark("step"):`` inside
    the block names a range. After the block, ``live_at_start("step")`` is the bytes allocated
    inside the block and still alive when the range began, and ``peak("step")`` the most alive
    at any moment of the range. Both count from the block's start: tensors created before it
    are not seen. Allocations are matched with their frees by address, so a free the profiler
    missed (it can miss some on threads it does not follow, such as a communication library's)
    is inferred when the allocator hands the same address out again. Run single-threaded:
    per-thread buffers scale with the threads.
    """

    def __init__(self) -> None:
        self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._silence = _silenced_stderr()
        # (time in us, address, +bytes allocated / -bytes freed), in time order
        self.events: list[tuple[float, int, int]] = []
        self.ranges: dict[str, tuple[float, float]] = {}

    def __enter__(self) -> AllocatorTrace:
        self._silence.__enter__()
        try:
            self._profile.__enter__()
        except BaseException:
            self._silence.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._profile.__exit__(*exc)
        finally:
            self._silence.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            self._profile.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)["traceEvents"]
        memory = []
        for e in trace:
            if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") in (0, None):
                args = e["args"]
                memory.append((float(e["ts"]), int(args["Addr"]), int(args["Bytes"])))
            elif e.get("name") in self.ranges and e.get("ph") == "X":
                self.ranges[e["name"]] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        self.events = sorted(memory, key=lambda m: m[0])

    def mark(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A context manager that names the range of the block it encloses."""
        if not name or name.startswith("["):
            raise ValueError(f"a range needs a name that does not start with '[', got {name!r}")
        self.ranges[name] = (0.0, -1.0)  # filled in when the trace ends
        return torch.profiler.record_function(name)

    def _range(self, name: str) -> tuple[float, float]:
        if name not in self.ranges:
            raise ValueError(f"no range named {name!r}; marked: {sorted(self.ranges)}")
        start, end = self.ranges[name]
        if end < start:
            raise ValueError(f"range {name!r} was not recorded (is the trace finished?)")
        return start, end

    def _replay(self, until: float) -> Iterator[tuple[float, int]]:
        """(time, bytes alive just after it) for every event up to time ``until``."""
        live: dict[int, int] = {}
        current = 0
        for t, addr, nbytes in self.events:
            if t > until:
                return
            if nbytes > 0:
                current += nbytes - live.pop(addr, 0)  # a reused address was freed unseen
                live[addr] = nbytes
            else:
                current -= live.pop(addr, 0)  # a free of an allocation from before: not counted
            yield t, current

    def live_at_start(self, name: str) -> int:
        """Bytes allocated inside the trace and still alive when range ``name`` began."""
        start, _ = self._range(name)
        current = 0
        for t, alive in self._replay(start):
            if t >= start:
                break
            current = alive
        return current

    def peak(self, name: str) -> int:
        """The most bytes alive at any moment of range ``name`` (counted from the trace's
        start, so it includes ``live_at_start(name)``)."""
        start, end = self._range(name)
        peak = self.live_at_start(name)
        for t, alive in self._replay(end):
            if t >= start:
                peak = max(peak, alive)
        return peak
