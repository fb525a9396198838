"""The parameter and FLOP formulas of helpers.cost (chapter 9) against the model and PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from helpers.cost import (
    attention_pairs,
    cpu_kernel_blocks,
    flops_breakdown,
    flops_per_new_token,
    forward_flops,
    param_count,
)
from helpers.masking import causal_mask
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
    causal = flops_breakdown(config, 32, causal=True)
    assert causal["attn_scores"] == 2 * 2 * (32 * 33 // 2) * 16  # L * 2 * pairs * C
    assert {k: v for k, v in causal.items() if not k.startswith("attn_")} == {
        k: v for k, v in parts.items() if not k.startswith("attn_")
    }


def tiled_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_block: int, kv_block: int
) -> torch.Tensor:
    """Causal attention the way a tiled kernel loops: for each block of queries, only the key
    blocks up to the block's last query, each key block computed whole (then masked)."""
    T = q.shape[-2]
    outs = []
    for m in range(0, T, q_block):
        rows = min(q_block, T - m)
        n_keys = min(-(-(m + rows) // kv_block) * kv_block, T)  # whole key blocks
        scores = q[..., m : m + rows, :] @ k[..., :n_keys, :].transpose(-2, -1)
        scores = scores / q.shape[-1] ** 0.5
        scores = scores.masked_fill(~causal_mask(T)[m : m + rows, :n_keys], float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ v[..., :n_keys, :])
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize(("T", "blocks"), [(50, (8, 16)), (64, (32, 512)), (37, (5, 3))])
def test_attention_pairs_count_what_a_tiled_causal_kernel_computes(
    T: int, blocks: tuple[int, int]
) -> None:
    g = torch.Generator().manual_seed(T)
    q, k, v = torch.randn(3, 1, 2, T, 4, generator=g).unbind(0)
    with FlopCounterMode(display=False) as counter:
        out = tiled_causal_attention(q, k, v, *blocks)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    pairs = attention_pairs(T, causal=True, blocks=blocks)
    assert counter.get_total_flops() == 2 * 2 * pairs * 2 * 4  # 2 products x 2 heads x head_size 4


def test_attention_pairs_limits() -> None:
    for T in (1, 7, 64):
        visible = int(causal_mask(T).sum())
        assert attention_pairs(T, causal=True) == visible == T * (T + 1) // 2
        assert attention_pairs(T, causal=True, blocks=(1, 1)) == visible
        assert attention_pairs(T, causal=True, blocks=(T, T)) == attention_pairs(T) == T * T
    # PyTorch's CPU kernel at T = 4096 (query blocks of 256, key blocks of 512): 9/16 of dense
    assert attention_pairs(4096, causal=True, blocks=(256, 512)) == 9 * 4096**2 // 16


def test_cpu_kernel_blocks() -> None:
    assert [cpu_kernel_blocks(T)[0] for T in (1, 191, 192, 767, 768, 4096)] == [
        32,
        32,
        64,
        64,
        256,
        256,
    ]
    assert {cpu_kernel_blocks(T)[1] for T in (1, 768, 10_000)} == {512}
    # one key block up to 512 tokens: the kernel's causal path computes every pair
    assert attention_pairs(512, causal=True, blocks=cpu_kernel_blocks(512)) == 512**2
    assert attention_pairs(1024, causal=True, blocks=cpu_kernel_blocks(1024)) == 3 * 1024**2 // 4
    with pytest.raises(ValueError, match="T"):
        cpu_kernel_blocks(0)


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
    assert uncached == T * cached  # a full pass over T tokens costs T cached steps
    assert flops_per_new_token(config, T // 2, use_cache=True) < cached  # attention grows with T
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
        (lambda: attention_pairs(0), "T must be a positive int"),
        (lambda: attention_pairs(8, blocks=(2, 2)), "pass causal=True"),
        (lambda: attention_pairs(8, causal=True, blocks=(2, 0)), "kv_block must be a positive"),
        (lambda: attention_pairs(8, causal=True, blocks=(2,)), "must be a pair"),
    ],
)
def test_counting_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("switch", [{"pos": "rope"}, {"mlp": "swiglu"}, {"qk_norm": True}])
def test_counts_refuse_another_architecture(switch: dict) -> None:
    with pytest.raises(ValueError, match="the counts follow chapter 8's architecture"):
        param_count(GPTConfig(**switch))
    with pytest.raises(ValueError, match="the counts follow chapter 8's architecture"):
        forward_flops(GPTConfig(**switch), 8)


def test_tanh_gelu_counts_like_gelu() -> None:
    assert param_count(GPTConfig(mlp="gelu_tanh")) == param_count(GPTConfig())
