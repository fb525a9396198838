"""Measuring tools that give robust numbers on a busy machine.

Defined in chapter 9, "The cost of attention and fast generation".

``median_time`` (median of several runs after a warm-up), ``TensorMemoryTracker`` /
``peak_tensor_bytes`` (a deterministic count of the bytes of tensors alive at once during a
call), ``allocator_peak_bytes`` (the same peak seen by PyTorch's CPU allocator, scratch space
inside fused kernels included), ``profile_ops`` (``torch.profiler``'s per-operator table,
without its log lines) and ``loglog_slope`` (the exponent of a power law).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
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
    with _silenced_stderr() if quiet else contextlib.nullcontext():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    return prof.key_averages()


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
