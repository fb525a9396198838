"""Multi-head attention: the list-of-heads form, the fused form and PyTorch's layer agree."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from helpers.masking import causal_mask
from helpers.multihead import (
    KVCache,
    MultiHeadAttention,
    MultiHeadAttentionConcat,
    copy_concat_to_fused,
    copy_fused_to_torch,
)

CONFIGS = [(8, 1), (8, 2), (12, 3), (16, 4), (32, 8)]  # (n_embd, n_head)


def torch_twin(fused: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = fused.c_attn.bias is not None
    mha = nn.MultiheadAttention(fused.n_embd, fused.n_head, bias=bias, batch_first=True)
    copy_fused_to_torch(fused, mha)
    return mha.eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_embd,n_head", CONFIGS)
def test_concat_equals_fused(n_embd: int, n_head: int, causal: bool, bias: bool) -> None:
    torch.manual_seed(n_embd + n_head)
    concat = MultiHeadAttentionConcat(n_embd, n_head, causal=causal, bias=bias)
    fused = MultiHeadAttention(n_embd, n_head, causal=causal, bias=bias)
    copy_concat_to_fused(concat, fused)
    x = torch.randn(3, 7, n_embd)
    y_concat = concat(x)
    assert_close(fused(x, need_weights=True), y_concat)
    assert_close(fused.last_weights, concat.last_weights)
    assert_close(fused(x), y_concat)  # PyTorch's fused kernel path, too
    assert concat.last_weights.shape == (3, n_head, 7, 7)


def test_copy_really_copies() -> None:
    """Without the copy the two layers disagree, so the test above is not vacuous."""
    torch.manual_seed(0)
    concat, fused = MultiHeadAttentionConcat(8, 2), MultiHeadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    assert not torch.allclose(concat(x), fused(x))
    copy_concat_to_fused(concat, fused)
    assert_close(concat(x), fused(x))


def test_head_order_matters() -> None:
    """Head h must land in rows h*head_size.. of each q/k/v block: swapping two heads changes
    the output (the projection sees their channels in the wrong order)."""
    torch.manual_seed(0)
    concat, fused = (
        MultiHeadAttentionConcat(8, 2, causal=False),
        MultiHeadAttention(8, 2, causal=False),
    )
    copy_concat_to_fused(concat, fused)
    x = torch.randn(2, 6, 8)
    swapped = MultiHeadAttentionConcat(8, 2, causal=False)
    swapped.heads = nn.ModuleList([concat.heads[1], concat.heads[0]])
    swapped.proj = concat.proj
    assert not torch.allclose(swapped(x), fused(x))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_embd,n_head", CONFIGS)
def test_fused_equals_torch_multihead(n_embd: int, n_head: int, causal: bool, bias: bool) -> None:
    torch.manual_seed(n_embd + n_head)
    fused = MultiHeadAttention(n_embd, n_head, causal=causal, bias=bias).eval()
    if bias:  # PyTorch initialises the biases to zero: make them matter
        with torch.no_grad():
            fused.c_attn.bias.normal_()
            fused.c_proj.bias.normal_()
    mha = torch_twin(fused)
    x = torch.randn(2, 9, n_embd)
    mask = ~causal_mask(9) if causal else None  # nn.MultiheadAttention: True = hidden
    y_ref, w_ref = mha(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)
    assert_close(fused(x, need_weights=True), y_ref)
    assert_close(fused.last_weights, w_ref)
    assert_close(fused(x), y_ref)


@pytest.mark.parametrize("bias", [False, True])
def test_cross_attention_matches_torch(bias: bool) -> None:
    """Queries from 6 tokens, keys and values from 8 others."""
    torch.manual_seed(0)
    fused = MultiHeadAttention(12, 3, causal=False, bias=bias).eval()
    if bias:
        with torch.no_grad():
            fused.c_attn.bias.normal_()
    mha = torch_twin(fused)
    x, context = torch.randn(2, 6, 12), torch.randn(2, 8, 12)
    y = fused(x, context, need_weights=True)
    y_ref, w_ref = mha(x, context, context, need_weights=True, average_attn_weights=False)
    assert y.shape == (2, 6, 12)
    assert fused.last_weights.shape == (2, 3, 6, 8)
    assert_close(y, y_ref)
    assert_close(fused.last_weights, w_ref)
    assert_close(fused(x, context), y_ref)


@pytest.mark.parametrize("same", [False, True])
def test_causal_layer_refuses_a_context(same: bool) -> None:
    """A causal layer given a context would attend to the whole context, future included:
    with ``context=x`` the first output would depend on the last token. It raises instead."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3, causal=True)
    x = torch.randn(2, 6, 12)
    context = x if same else torch.randn(2, 8, 12)
    with pytest.raises(ValueError, match=r"causal mask has no meaning for cross-attention"):
        attn(x, context)
    with pytest.raises(ValueError, match=r"causal=False"):
        attn(x, context=context, need_weights=True)
    # The same weights without the mask: then context=x is the non-causal self-attention.
    twin = MultiHeadAttention(12, 3, causal=False)
    twin.load_state_dict(attn.state_dict())
    changed = x.clone()
    changed[:, -1] += 1.0
    assert not torch.allclose(twin(changed, changed)[:, 0], twin(x, x)[:, 0])
    assert_close(attn(changed)[:, 0], attn(x)[:, 0])  # the causal layer: first output unmoved


def test_cross_attention_to_itself_is_self_attention() -> None:
    torch.manual_seed(0)
    fused = MultiHeadAttention(12, 3, causal=False)
    x = torch.randn(2, 6, 12)
    assert_close(fused(x, x), fused(x))


@pytest.mark.parametrize("causal", [False, True])
def test_cached_chunk_weights_are_rows_of_the_full_weights(causal: bool) -> None:
    """The explicit path with a cache: 3 new queries after 4 cached keys get the last 3 rows of
    the full pass's weights (the rectangular causal mask; tests/test_kv_cache.py checks the
    outputs). Without a causal mask, the new queries see every key, cached or new."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, causal=causal).eval()
    x = torch.randn(2, 7, 16)
    attn(x, need_weights=True)
    full_weights = attn.last_weights
    cache = KVCache()
    attn(x[:, :4], kv_cache=cache)
    last = attn(x[:, 4:], kv_cache=cache, need_weights=True)
    assert attn.last_weights.shape == (2, 4, 3, 7)
    assert_close(attn.last_weights, full_weights[:, :, 4:])
    assert_close(last, attn(x)[:, 4:])


def test_kv_cache_rejects_mismatched_keys() -> None:
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not match the cached ones"):
        cache.append(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))
    with pytest.raises(ValueError, match="keys and values must both be"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4))


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadAttentionConcat])
def test_n_embd_must_be_divisible_by_n_head(cls: type) -> None:
    with pytest.raises(ValueError, match="n_embd=10 is not divisible by n_head=4"):
        cls(10, 4)
    with pytest.raises(ValueError, match="n_head must be a positive int"):
        cls(8, 0)
    with pytest.raises(ValueError, match="n_embd must be a positive int"):
        cls(8.0, 2)


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadAttentionConcat])
@pytest.mark.parametrize("shape", [(5, 8), (1, 5, 6), (1, 1, 5, 8)])
def test_wrong_x_shape(cls: type, shape: tuple) -> None:
    with pytest.raises(ValueError, match=r"expected x of shape \(B, T, 8\)"):
        cls(8, 2)(torch.zeros(shape))


@pytest.mark.parametrize("shape", [(2, 4, 6), (3, 4, 8), (4, 8)])
def test_bad_context_shape(shape: tuple) -> None:
    attn = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"context must have shape \(2, T_ctx, 8\)"):
        attn(torch.zeros(2, 5, 8), torch.zeros(shape))


def test_cross_attention_with_cache_is_rejected() -> None:
    attn = MultiHeadAttention(8, 2, causal=False)
    with pytest.raises(ValueError, match="a kv_cache is for self-attention"):
        attn(torch.zeros(1, 2, 8), torch.zeros(1, 3, 8), kv_cache=KVCache())


def test_copy_errors() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        copy_concat_to_fused(MultiHeadAttentionConcat(8, 2), MultiHeadAttention(8, 4))
    with pytest.raises(
        ValueError, match="c_attn: the source has a bias but the destination does not"
    ):
        copy_concat_to_fused(MultiHeadAttentionConcat(8, 2, bias=True), MultiHeadAttention(8, 2))
    with pytest.raises(ValueError, match="shapes differ"):
        copy_fused_to_torch(MultiHeadAttention(8, 2), nn.MultiheadAttention(8, 4, bias=False))
    with pytest.raises(
        ValueError, match="in_proj: the destination has a bias but the source does not"
    ):
        copy_fused_to_torch(MultiHeadAttention(8, 2), nn.MultiheadAttention(8, 2, bias=True))
    with pytest.raises(ValueError, match="separate q/k/v projections"):
        copy_fused_to_torch(
            MultiHeadAttention(8, 2), nn.MultiheadAttention(8, 2, bias=False, kdim=4, vdim=4)
        )
    with pytest.raises(ValueError, match="add_bias_kv"):
        copy_fused_to_torch(
            MultiHeadAttention(8, 2), nn.MultiheadAttention(8, 2, bias=False, add_bias_kv=True)
        )


def test_parameter_count_does_not_depend_on_n_head() -> None:
    counts = {
        h: sum(p.numel() for p in MultiHeadAttention(32, h).parameters()) for h in (1, 2, 4, 8)
    }
    assert set(counts.values()) == {4 * 32 * 32}
