"""What a GPT costs: parameters and FLOPs from its configuration, and small measurement tools.

The counting functions follow the model in ``helpers.model`` exactly (pre-LayerNorm blocks, a
4x MLP, tied token embedding and LM head, learned positions). FLOPs count the multiply-adds of
matrix products, 2 FLOPs each, the way ``torch.utils.flop_counter.FlopCounterMode`` counts them;
LayerNorm, softmax, GELU and bias additions are left out (they are a few percent at most).
Attention is counted densely, all ``T x T`` query-key pairs, since that is what the
implementations compute before the causal mask throws half of it away.

The measurement tools give robust numbers on a busy machine: ``median_time`` (median of several
runs after a warm-up), ``TensorMemoryTracker`` / ``peak_tensor_bytes`` (a deterministic count of
the bytes of tensors alive at once during a call), ``profile_ops`` (``torch.profiler``'s
per-operator table, without its log lines) and ``loglog_slope`` (the exponent of a power law).
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

from helpers.model import GPTConfig


def _check_config(config: GPTConfig) -> None:
    if not isinstance(config, GPTConfig):
        raise ValueError(f"expected a GPTConfig, got {type(config).__name__}")


def param_count(config: GPTConfig, *, non_embedding: bool = False) -> int:
    """Number of parameters of ``helpers.model.GPT(config)``, from the configuration alone.

    Per block: ``12 C^2`` weights (``3 C^2`` for queries/keys/values, ``C^2`` for the attention
    output, ``8 C^2`` for the 4x MLP) plus ``2 C`` LayerNorm gains, and with ``bias=True`` another
    ``11 C`` biases (``3C + C + 4C + C`` in the linear layers, ``2C`` in the LayerNorms). Outside
    the blocks: the token embedding ``V C`` (shared with the LM head, so counted once), the
    position embedding ``block_size * C`` and the final LayerNorm.

    Args:
        config: the model's configuration.
        non_embedding: leave out the position embedding, as ``GPT.num_params()`` does by default.

    Returns:
        The exact count ``GPT(config).num_params(non_embedding)`` would give.
    """
    _check_config(config)
    C, L, V = config.n_embd, config.n_layer, config.vocab_size
    ln = 2 * C if config.bias else C  # LayerNorm gain (and bias)
    per_block = 12 * C * C + 2 * ln + (9 * C if config.bias else 0)
    total = V * C + L * per_block + ln
    if not non_embedding:
        total += config.block_size * C
    return total


def flops_breakdown(config: GPTConfig, T: int, *, batch_size: int = 1) -> dict[str, int]:
    """Matrix-product FLOPs of one forward pass over ``batch_size`` sequences of ``T`` tokens.

    Per layer and per token: ``2 * 3C^2`` for the query/key/value projection, ``2 * C^2`` for the
    output projection, ``2 * 8C^2`` for the MLP; per layer and per sequence ``2 T^2 C`` for the
    scores ``Q K^T`` and ``2 T^2 C`` for the weighted sum of values (summed over heads,
    ``n_head * head_size = C``); and ``2 C V`` per token for the LM head.

    Returns:
        A dict with keys ``"qkv"``, ``"attn_scores"``, ``"attn_values"``, ``"attn_out"``,
        ``"mlp"`` and ``"lm_head"``; ``sum(d.values())`` is ``forward_flops(config, T)``.

    Raises:
        ValueError: if ``T`` is not in ``1..block_size`` or ``batch_size < 1``.
    """
    _check_config(config)
    if not 1 <= T <= config.block_size:
        raise ValueError(f"T must be in 1..block_size={config.block_size}, got {T}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    B, C, L, V = batch_size, config.n_embd, config.n_layer, config.vocab_size
    return {
        "qkv": 2 * B * T * 3 * C * C * L,
        "attn_scores": 2 * B * T * T * C * L,
        "attn_values": 2 * B * T * T * C * L,
        "attn_out": 2 * B * T * C * C * L,
        "mlp": 2 * B * T * 8 * C * C * L,
        "lm_head": 2 * B * T * C * V,
    }


def forward_flops(config: GPTConfig, T: int, *, batch_size: int = 1) -> int:
    """Total matrix-product FLOPs of a forward pass: ``B (2 T N_mm + 4 L T^2 C)``, where
    ``N_mm = 12 L C^2 + V C`` are the weights used in matrix products (see ``flops_breakdown``)."""
    return sum(flops_breakdown(config, T, batch_size=batch_size).values())


def flops_per_new_token(config: GPTConfig, T: int, *, use_cache: bool) -> int:
    """FLOPs to get the next-token logits when the context already holds ``T`` tokens.

    Without a cache the model reruns the whole context (``forward_flops(config, T)``, as
    ``GPT.generate`` does). With a key/value cache only the newest token goes through the model:
    ``2 N_mm`` for its projections, MLPs and LM head, plus ``4 L T C`` for its one query row
    against the ``T`` cached keys and values.

    Raises:
        ValueError: if ``T`` is not in ``1..block_size``.
    """
    _check_config(config)
    if not 1 <= T <= config.block_size:
        raise ValueError(f"T must be in 1..block_size={config.block_size}, got {T}")
    if not use_cache:
        return forward_flops(config, T)
    C, L, V = config.n_embd, config.n_layer, config.vocab_size
    return 2 * (12 * L * C * C + V * C) + 4 * L * T * C


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
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx
