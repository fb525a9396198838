"""Parameter and FLOP formulas of helpers.cost against the model itself, and the measurement tools."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from helpers.attention import scaled_dot_product_attention
from helpers.cost import flops_breakdown, flops_per_new_token, forward_flops, param_count
from helpers.measure import (
    TensorMemoryTracker,
    loglog_slope,
    median_time,
    peak_tensor_bytes,
    profile_ops,
)
from helpers.model import GPT, GPTConfig
from helpers.multihead import KVCache

CONFIGS = [
    GPTConfig(),
    GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=8, bias=True),
    GPTConfig(vocab_size=97, block_size=40, n_layer=3, n_head=4, n_embd=32, bias=False),
    GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=12, bias=True),
]
GPT2_SMALL = GPTConfig(
    vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, bias=True
)


def explicit_flops(model: GPT, idx: torch.Tensor, **kwargs) -> int:
    """FLOPs counted by PyTorch for a forward pass with the explicit attention (plain matmuls)."""
    with FlopCounterMode(display=False) as counter:
        model(idx, need_weights=True, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"C{c.n_embd}-L{c.n_layer}-bias{c.bias}")
def test_param_count_matches_the_model(config: GPTConfig) -> None:
    model = GPT(config)
    assert param_count(config) == model.num_params(non_embedding=False)
    assert param_count(config, non_embedding=True) == model.num_params()
    assert (
        param_count(config) - param_count(config, non_embedding=True)
        == config.block_size * config.n_embd
    )


def test_gpt2_small_has_124m_parameters() -> None:
    with torch.device("meta"):  # shapes only, no memory
        model = GPT(GPT2_SMALL)
    assert param_count(GPT2_SMALL) == model.num_params(non_embedding=False) == 124_439_808


@pytest.mark.parametrize("config", CONFIGS[1:], ids=lambda c: f"C{c.n_embd}-L{c.n_layer}")
@pytest.mark.parametrize("batch_size", [1, 3])
def test_forward_flops_match_flop_counter(config: GPTConfig, batch_size: int) -> None:
    g = torch.Generator().manual_seed(0)
    model = GPT(config).eval()
    for T in {1, config.block_size // 2, config.block_size}:
        idx = torch.randint(config.vocab_size, (batch_size, T), generator=g)
        assert explicit_flops(model, idx) == forward_flops(config, T, batch_size=batch_size)


def test_breakdown_sums_to_total_and_scales_as_claimed() -> None:
    config = GPTConfig(vocab_size=50, block_size=64, n_layer=2, n_head=2, n_embd=16)
    parts = flops_breakdown(config, 32)
    assert sum(parts.values()) == forward_flops(config, 32)
    doubled = flops_breakdown(config, 64)
    for name in ("qkv", "attn_out", "mlp", "lm_head"):
        assert doubled[name] == 2 * parts[name]  # linear in T
    for name in ("attn_scores", "attn_values"):
        assert doubled[name] == 4 * parts[name]  # quadratic in T
    assert forward_flops(config, 32, batch_size=5) == 5 * forward_flops(config, 32)


@pytest.mark.parametrize("T_past", [0, 5, 30])
def test_flops_per_new_token_with_cache_matches_counter(T_past: int) -> None:
    config = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_embd=16)
    model = GPT(config).eval()
    idx = torch.randint(
        config.vocab_size, (1, T_past + 1), generator=torch.Generator().manual_seed(1)
    )
    caches = [KVCache() for _ in model.blocks]
    if T_past:
        model(idx[:, :T_past], kv_caches=caches)
    counted = explicit_flops(model, idx[:, T_past:], kv_caches=caches)
    assert counted == flops_per_new_token(config, T_past + 1, use_cache=True)
    assert flops_per_new_token(config, T_past + 1, use_cache=False) == explicit_flops(model, idx)


def test_cache_saves_flops_for_long_contexts() -> None:
    config = GPTConfig()
    T = config.block_size
    cached = flops_per_new_token(config, T, use_cache=True)
    uncached = flops_per_new_token(config, T, use_cache=False)
    assert uncached > 0.5 * T * cached  # roughly T times fewer FLOPs per new token
    assert flops_per_new_token(config, 1, use_cache=True) == forward_flops(config, 1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: flops_breakdown(GPTConfig(block_size=128), 0),
            r"T must be in 1\.\.block_size=128, got 0",
        ),
        (
            lambda: forward_flops(GPTConfig(block_size=128), 129),
            r"T must be in 1\.\.block_size=128, got 129",
        ),
        (lambda: forward_flops(GPTConfig(), 8, batch_size=0), "batch_size must be at least 1"),
        (
            lambda: flops_per_new_token(GPTConfig(block_size=128), 200, use_cache=True),
            "block_size=128",
        ),
        (lambda: param_count({"n_embd": 4}), "expected a GPTConfig, got dict"),
    ],
)
def test_counting_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_median_time_runs_warmup_and_repeats_and_ignores_outliers() -> None:
    calls = []
    assert median_time(lambda: calls.append(1), repeats=4, warmup=2) >= 0
    assert len(calls) == 6
    durations = iter([0.0, 0.001, 0.05, 0.001])  # one slow run among fast ones

    def sleepy() -> None:
        import time

        time.sleep(next(durations))

    assert median_time(sleepy, repeats=3, warmup=1) < 0.03
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
