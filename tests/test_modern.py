"""The modern GPT: GPT-2 when every switch is off; with RoPE, a rolling cache that equals
sliding-window attention far beyond block_size."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from helpers.model import GPT, GPTConfig
from helpers.modern import (
    GPT2_SWITCHES,
    ModernConfig,
    ModernGPT,
    sliding_window_mask,
)

SMALL = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


def test_all_switches_off_is_the_books_gpt() -> None:
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(**SMALL))
    modern = ModernGPT(ModernConfig(**SMALL, **GPT2_SWITCHES))
    modern.load_state_dict(gpt.state_dict())
    idx = torch.randint(11, (3, 8))
    assert_close(modern(idx, idx)[0], gpt(idx, idx)[0])


@pytest.mark.parametrize(
    "switches",
    [
        {},
        dict(pos="rope"),
        dict(norm="rms"),
        dict(qk_norm=True),
        dict(mlp="relu2"),
        dict(mlp="swiglu"),
    ],
)
def test_causal_and_parameter_count(switches: dict) -> None:
    cfg = ModernConfig(**SMALL, **{**GPT2_SWITCHES, **switches})
    torch.manual_seed(0)
    model = ModernGPT(cfg).eval()
    idx = torch.randint(11, (1, 8))
    changed = idx.clone()
    changed[0, 5] = (idx[0, 5] + 1) % 11
    a, b = model(idx)[0], model(changed)[0]
    assert_close(a[:, :5], b[:, :5])  # the past does not see the future
    assert not torch.allclose(a[:, 5:], b[:, 5:])
    C, L = cfg.n_embd, cfg.n_layer
    per_block = model.num_params() - 11 * C - C  # embedding and final norm gain
    assert abs(per_block / L - 12 * C * C) <= 0.02 * 12 * C * C  # equal parameter count


def test_sliding_window_mask() -> None:
    m = sliding_window_mask(4, T_past=2, window=3)
    expected = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    ).bool()
    assert torch.equal(m, expected)


def test_rolling_cache_equals_sliding_window_far_beyond_block_size() -> None:
    torch.manual_seed(0)
    model = ModernGPT(ModernConfig(**SMALL)).eval()
    idx = torch.randint(11, (2, 60))  # 7.5 x block_size
    with torch.no_grad():
        full, _ = model(idx)  # every token sees itself and the 7 before it, in every layer
        caches = model.new_caches()
        prefill, _ = model(idx[:, :5], kv_caches=caches)
        steps = [model(idx[:, t : t + 1], kv_caches=caches)[0] for t in range(5, 60)]
    assert_close(torch.cat([prefill, *steps], dim=1), full, atol=1e-5, rtol=1e-4)
    assert len(caches[0]) == 7 and caches[0].seen == 60  # block_size - 1 kept


def test_generate_cached_equals_uncached_beyond_block_size() -> None:
    torch.manual_seed(0)
    model = ModernGPT(ModernConfig(**SMALL))
    prompt = torch.randint(11, (1, 3))
    outs = [
        model.generate(prompt, 40, use_cache=c, top_k=4, generator=torch.Generator().manual_seed(1))
        for c in (False, True)
    ]
    assert torch.equal(outs[0], outs[1])
    assert outs[0].shape == (1, 43)


def test_learned_positions_refuse_long_context() -> None:
    model = ModernGPT(ModernConfig(**SMALL, **GPT2_SWITCHES))
    with pytest.raises(ValueError):
        model(torch.zeros(1, 9, dtype=torch.long))
    out = model.generate(torch.zeros(1, 2, dtype=torch.long), 12, use_cache=True)
    assert out.shape == (1, 14)


def test_errors() -> None:
    with pytest.raises(ValueError):
        ModernConfig(**SMALL, pos="alibi")
    with pytest.raises(ValueError):
        ModernConfig(**{**SMALL, "n_embd": 6, "n_head": 2})  # head_size 3: odd for RoPE
    model = ModernGPT(ModernConfig(**SMALL))
    with pytest.raises(ValueError):
        model(torch.zeros(1, 4))  # float ids
    with pytest.raises(ValueError):
        model(torch.tensor([[11]]))


def test_attention_is_qk_norm_then_rope_then_causal_sdpa() -> None:
    """The fused layout of ModernAttention computes the textbook order of operations."""
    import torch.nn.functional as F

    from helpers.modern import ModernAttention
    from helpers.norms import rms_norm
    from helpers.rope import apply_rope

    cfg = ModernConfig(**SMALL)
    torch.manual_seed(0)
    attn = ModernAttention(cfg)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 8, 16)
    q, k, v = attn.c_attn(x).split(16, dim=-1)
    q, k, v = (t.view(2, 8, 2, 8).transpose(1, 2) for t in (q, k, v))
    pos = torch.arange(3, 11)
    q = apply_rope(rms_norm(q, attn.q_norm.weight), pos)
    k = apply_rope(rms_norm(k, attn.k_norm.weight), pos)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.c_proj(y.transpose(1, 2).reshape(2, 8, 16))
    assert_close(attn(x, offset=3), expected)
