"""The measuring tools of helpers.measure (chapter 9): timing, profiling, memory, slopes."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import scaled_dot_product_attention
from helpers.measure import (
    TensorMemoryTracker,
    allocator_peak_bytes,
    loglog_slope,
    median_time,
    operator_calls,
    peak_tensor_bytes,
    profile_ops,
)


def test_median_time_runs_warmup_and_repeats_and_ignores_outliers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    median_time(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6
    # A fake clock: each call of `slow_once` advances it by the next duration, so the test
    # measures the median logic, not the machine.
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    durations = iter([9.0, 0.001, 0.05, 0.002])  # a warm-up, then one slow run among fast ones

    def slow_once() -> None:
        clock[0] += next(durations)

    assert median_time(slow_once, repeats=3, warmup=1) == pytest.approx(0.002)  # mean: 0.0177
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        median_time(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup must be >= 0"):
        median_time(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="min_seconds must be >= 0"):
        median_time(lambda: None, min_seconds=-1.0)
    with pytest.raises(ValueError, match=r"max_repeats \(2\) must be at least repeats \(3\)"):
        median_time(lambda: None, repeats=3, max_repeats=2)


def test_median_time_repeats_fast_calls_until_min_seconds() -> None:
    calls = []
    median_time(lambda: calls.append(1), repeats=2, warmup=0, min_seconds=10.0, max_repeats=50)
    assert len(calls) == 50  # capped: 50 no-ops never add up to 10 seconds
    calls.clear()
    median_time(lambda: calls.append(1), repeats=7, warmup=0, min_seconds=0.0)
    assert len(calls) == 7


def test_profile_ops_reports_the_matmul_and_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    a = torch.randn(200, 200)
    ops = profile_ops(lambda: a @ a)
    self_time = {e.key: e.self_cpu_time_total for e in ops}
    assert "aten::mm" in self_time and self_time["aten::mm"] > 0
    assert max(self_time, key=self_time.get) == "aten::mm"
    out, err = capfd.readouterr()
    assert out == "" and "profiler_start" not in err


def test_operator_calls_counts_calls_from_python_and_nested_ones(
    capfd: pytest.CaptureFixture[str],
) -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    matmul = operator_calls(lambda: a @ b)
    assert matmul.direct == 1  # aten::matmul, called from Python ...
    assert matmul.total > matmul.direct  # ... calls aten::mm inside
    three = operator_calls(lambda: (a.exp() + 1).sum())  # exp, add, sum: three from Python
    assert three.direct == 3 and three.total >= 3
    loop = operator_calls(lambda: [a @ b for _ in range(5)])
    assert loop.direct == 5 * matmul.direct and loop.total == 5 * matmul.total

    def labelled() -> torch.Tensor:
        with torch.profiler.record_function("a block"):  # a parent that is not an operator
            return a @ b

    assert operator_calls(labelled).direct == 1
    w = torch.randn(16, 4, requires_grad=True)
    backward = operator_calls(lambda: torch.autograd.grad((a @ w).sum(), w))
    assert backward.direct > 3  # the backward pass's own calls count too
    out, err = capfd.readouterr()
    assert out == "" and "profiler_start" not in err


def test_memory_tracker_counts_new_storage_once() -> None:
    assert peak_tensor_bytes(lambda: torch.ones(1000)) == 4000
    x = torch.ones(250, 4)
    assert peak_tensor_bytes(lambda: x.view(1000)) == 0  # a view allocates nothing
    assert peak_tensor_bytes(lambda: x.mul_(2)) == 0  # in place
    assert peak_tensor_bytes(lambda: x.T.contiguous()) == 4000  # a real copy

    def chain() -> torch.Tensor:
        y = torch.ones(1000)  # 4000 bytes
        for _ in range(5):
            y = y + 1  # the old y is freed after each step: at most two alive at once
        return y

    with TensorMemoryTracker() as tracker:
        y = chain()
    assert tracker.peak == 8000
    assert tracker.current == 4000  # only the result is still alive
    del y
    assert tracker.current == 0


@pytest.mark.parametrize("T", [64, 128, 256])
def test_explicit_attention_keeps_three_score_matrices_fused_keeps_none(T: int) -> None:
    g = torch.Generator().manual_seed(T)
    q, k, v = torch.randn(3, 1, 2, T, 8, generator=g).unbind(0)
    scores = 2 * T * T * 4  # (1, 2, T, T) float32
    explicit = peak_tensor_bytes(lambda: scaled_dot_product_attention(q, k, v, is_causal=True))
    fused = peak_tensor_bytes(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert 3 * scores <= explicit < 3 * scores + 3 * q.nbytes
    assert fused < scores // 4
    assert fused >= q.nbytes  # the output, at least


def test_loglog_slope() -> None:
    xs = [1.0, 2.0, 4.0, 8.0]
    assert loglog_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert loglog_slope(xs, [5.0] * 4) == pytest.approx(0.0)
    assert loglog_slope(xs, [1 / x for x in xs]) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="same length"):
        loglog_slope([1, 2], [1])
    with pytest.raises(ValueError, match="at least 2 points"):
        loglog_slope([1], [1])
    with pytest.raises(ValueError, match="positive"):
        loglog_slope([1, 2], [0, 1])
    with pytest.raises(ValueError, match="all x values are equal"):
        loglog_slope([2, 2], [1, 3])


def test_allocator_peak_sees_what_the_tracker_sees_and_kernel_scratch() -> None:
    assert allocator_peak_bytes(lambda: torch.ones(1000)) == 4000

    def chain() -> torch.Tensor:
        y = torch.ones(1000)
        for _ in range(5):
            y = y + 1  # at most two alive at once
        return y

    assert peak_tensor_bytes(chain) == 8000
    # the allocator also sees the few bytes of each Python number wrapped as a scalar tensor
    assert 8000 <= allocator_peak_bytes(chain) < 8000 + 100
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 1024, 16, generator=g).unbind(0)

    def explicit() -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, is_causal=True)[0]

    def fused() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the kernel's private buffers are per thread
    try:
        assert allocator_peak_bytes(explicit) == peak_tensor_bytes(explicit)
        # the fused kernel's private block of scores: invisible to the tracker, not to the
        # allocator (256 x 512 float32 scores = 0.5 MiB from 768 tokens on)
        assert allocator_peak_bytes(fused) >= peak_tensor_bytes(fused) + 256 * 512 * 4
    finally:
        torch.set_num_threads(threads)
