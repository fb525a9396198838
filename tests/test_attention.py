"""Scaled dot-product attention and the single head agree with PyTorch and keep their promises."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import helpers.attention
from helpers.attention import Head, scaled_dot_product_attention

SHAPES = [  # (leading dims, T_q, T_k, d_k, d_v)
    ((), 1, 1, 1, 1),
    ((), 5, 5, 4, 4),
    ((2,), 7, 7, 8, 3),
    ((3, 2), 6, 6, 16, 16),
    ((2, 4), 3, 9, 5, 7),
]


def qkv(shape: tuple, seed: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    lead, T_q, T_k, d_k, d_v = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, T_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*lead, T_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*lead, T_k, d_v, generator=g, dtype=dtype)
    return q, k, v


def random_bool_mask(shape: tuple, seed: int) -> torch.Tensor:
    """A random (T_q, T_k) boolean mask with at least one visible key per row."""
    _, T_q, T_k, _, _ = shape
    g = torch.Generator().manual_seed(1000 + seed)
    mask = torch.rand(T_q, T_k, generator=g) > 0.5
    mask[torch.arange(T_q), torch.randint(T_k, (T_q,), generator=g)] = True
    return mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_sdpa_without_mask(shape: tuple, seed: int) -> None:
    q, k, v = qkv(shape, seed)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*shape[0], shape[1], shape[4])
    assert weights.shape == (*shape[0], shape[1], shape[2])
    assert_close(out, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] == s[2]], ids=str)
def test_matches_sdpa_causal(shape: tuple, seed: int) -> None:
    q, k, v = qkv(shape, seed)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_sdpa_with_bool_and_additive_masks(shape: tuple, seed: int) -> None:
    q, k, v = qkv(shape, seed)
    mask = random_bool_mask(shape, seed)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out_bool, w_bool = scaled_dot_product_attention(q, k, v, mask)
    additive = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    out_add, w_add = scaled_dot_product_attention(q, k, v, additive)
    assert_close(out_bool, expected)
    assert_close(out_add, expected)
    assert_close(w_bool, w_add)
    assert (w_bool[..., ~mask] == 0).all(), "a hidden key got a non-zero weight"


@pytest.mark.parametrize("seed", [0, 1])
def test_additive_float_bias_matches_sdpa(seed: int) -> None:
    q, k, v = qkv(((2,), 4, 6, 3, 5), seed)
    bias = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed), dtype=q.dtype)
    out, _ = scaled_dot_product_attention(q, k, v, bias)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


@pytest.mark.parametrize("scale", [1.0, 0.1, 2.5])
def test_custom_scale_matches_sdpa(scale: float) -> None:
    q, k, v = qkv(((2,), 5, 5, 8, 4), 0)
    out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale))


def test_default_scale_is_one_over_sqrt_head_size() -> None:
    q, k, v = qkv(((), 4, 4, 16, 2), 3)
    _, weights = scaled_dot_product_attention(q, k, v)
    assert_close(weights, torch.softmax(q @ k.T / math.sqrt(16), dim=-1))
    _, weights_explicit = scaled_dot_product_attention(q, k, v, scale=0.25)
    assert_close(weights_explicit, weights)


def test_causal_and_mask_combine() -> None:
    q, k, v = qkv(((), 5, 5, 4, 4), 7)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[:, 0] = False
    mask[0, 0] = True  # keep one visible key in the first row
    both = mask & torch.ones(5, 5, dtype=torch.bool).tril()
    out, _ = scaled_dot_product_attention(q, k, v, mask, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=both))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weights_rows_sum_to_one_and_are_nonnegative(seed: int) -> None:
    q, k, v = qkv(((2, 3), 6, 6, 4, 4), seed)
    for causal in (False, True):
        _, weights = scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert (weights >= 0).all()
        assert_close(weights.sum(-1), torch.ones(2, 3, 6, dtype=q.dtype))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_causal_weights_are_lower_triangular(seed: int) -> None:
    q, k, v = qkv(((2,), 7, 7, 4, 4), seed)
    _, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (weights.triu(diagonal=1) == 0).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_causality_future_tokens_do_not_change_the_past(seed: int) -> None:
    q, k, v = qkv(((2,), 8, 8, 4, 4), seed)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    t = 5  # change every query, key and value from position t on
    g = torch.Generator().manual_seed(99 + seed)
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[..., t:, :] = torch.randn(x[..., t:, :].shape, generator=g, dtype=x.dtype)
    out2, _ = scaled_dot_product_attention(q2, k2, v2, is_causal=True)
    assert_close(out2[..., :t, :], out[..., :t, :])
    assert not torch.allclose(out2[..., t:, :], out[..., t:, :])


def test_fully_masked_row_gives_zeros_not_nan() -> None:
    q, k, v = qkv(((2,), 3, 4, 5, 6), 0)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert_close(weights[:, 1], torch.zeros(2, 4, dtype=q.dtype))
    assert_close(out[:, 1], torch.zeros(2, 6, dtype=q.dtype))
    assert_close(weights[:, [0, 2]].sum(-1), torch.ones(2, 2, dtype=q.dtype))
    # The naive formula with PyTorch's softmax would give NaN here.
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
    assert torch.isnan(torch.softmax(scores, dim=-1)[:, 1]).all()


def test_fully_masked_row_has_finite_gradients() -> None:
    # An additive mask lets the gradient reach q and k; a softmax that gives NaN on the empty row
    # (even one zeroed afterwards) would send NaN into q.grad and k.grad.
    q, k, v = (t.requires_grad_() for t in qkv(((2,), 3, 4, 5, 6), 1))
    mask = torch.zeros(3, 4, dtype=q.dtype)
    mask[1] = float("-inf")
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert_close(weights[:, 1], torch.zeros(2, 4, dtype=q.dtype))
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert_close(q.grad[:, 1], torch.zeros(2, 5, dtype=q.dtype))  # the empty query learns nothing


def test_chapter_three_needs_no_later_chapter() -> None:
    # helpers.attention is taught in chapter 3; the stable softmax is chapter 4's.
    source = inspect.getsource(helpers.attention)
    assert "helpers.softmax" not in source


def test_gradients_match_sdpa() -> None:
    q, k, v = qkv(((2,), 5, 5, 4, 3), 4)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    upstream = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0), dtype=q.dtype)
    (scaled_dot_product_attention(*ours, is_causal=True)[0] * upstream).sum().backward()
    (F.scaled_dot_product_attention(*ref, is_causal=True) * upstream).sum().backward()
    for a, b in zip(ours, ref, strict=False):
        assert_close(a.grad, b.grad)


# ---- bad inputs raise clear errors -------------------------------------------------------------


def test_mismatched_query_and_key_sizes() -> None:
    q, k, v = torch.randn(4, 8), torch.randn(4, 6), torch.randn(4, 6)
    with pytest.raises(
        ValueError, match=r"queries and keys must have the same size d_k.*\(4, 8\).*\(4, 6\)"
    ):
        scaled_dot_product_attention(q, k, v)


def test_mismatched_key_and_value_lengths() -> None:
    q, k, v = torch.randn(4, 8), torch.randn(5, 8), torch.randn(6, 8)
    with pytest.raises(ValueError, match=r"keys and values must have the same length T_k"):
        scaled_dot_product_attention(q, k, v)


def test_too_few_dimensions() -> None:
    with pytest.raises(ValueError, match=r"at least 2 dims"):
        scaled_dot_product_attention(torch.randn(8), torch.randn(4, 8), torch.randn(4, 8))


def test_batch_dims_that_do_not_broadcast() -> None:
    q, k, v = torch.randn(2, 4, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    with pytest.raises(ValueError, match=r"leading \(batch, head\) dims .* do not broadcast"):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("mask_shape", [(4, 5), (3, 4, 4), (2, 1, 4, 4)])
def test_mask_that_does_not_broadcast(mask_shape: tuple) -> None:
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    mask = torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=r"mask of shape .* does not broadcast to the scores' shape \(2, 4, 4\)"
    ):
        scaled_dot_product_attention(q, k, v, mask)


def test_integer_mask_is_rejected() -> None:
    q = k = v = torch.randn(4, 8)
    mask = torch.ones(4, 4, dtype=torch.long).tril()
    with pytest.raises(
        ValueError, match=r"mask must be boolean .* or float .* got dtype torch.int64"
    ):
        scaled_dot_product_attention(q, k, v, mask)


def test_is_causal_needs_square_scores() -> None:
    q, k, v = torch.randn(3, 8), torch.randn(5, 8), torch.randn(5, 8)
    with pytest.raises(
        ValueError, match=r"is_causal needs as many queries as keys, got T_q=3, T_k=5"
    ):
        scaled_dot_product_attention(q, k, v, is_causal=True)


# ---- the single head -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_head_matches_manual_computation(seed: int, causal: bool) -> None:
    torch.manual_seed(seed)
    B, T, C, head_size = 3, 6, 10, 4
    head = Head(C, head_size, causal=causal)
    x = torch.randn(B, T, C)
    out = head(x)
    assert out.shape == (B, T, head_size)
    # The same computation written out with the head's own weight matrices.
    q, k, v = x @ head.query.weight.T, x @ head.key.weight.T, x @ head.value.weight.T
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_size)
    if causal:
        scores = scores.masked_fill(torch.ones(T, T).triu(diagonal=1).bool(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    assert_close(out, weights @ v)
    assert_close(head.last_weights, weights)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def test_head_with_bias_matches_linear_layers() -> None:
    torch.manual_seed(0)
    head = Head(6, 3, causal=True, bias=True)
    x = torch.randn(2, 5, 6)
    q, k, v = head.query(x), head.key(x), head.value(x)
    assert head.query.bias is not None
    assert_close(head(x), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_head_is_causal() -> None:
    torch.manual_seed(1)
    head = Head(8, 4)
    x = torch.randn(1, 6, 8)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(1, 2, 8)
    assert_close(head(x2)[:, :4], head(x)[:, :4])


def test_head_has_three_bias_free_projections_by_default() -> None:
    head = Head(32, 16)
    assert sum(p.numel() for p in head.parameters()) == 3 * 32 * 16


@pytest.mark.parametrize("bad_shape", [(5, 10), (2, 5, 9), (1, 2, 5, 10)])
def test_head_rejects_wrong_x_shape(bad_shape: tuple) -> None:
    head = Head(10, 4)
    with pytest.raises(ValueError, match=r"expected x of shape \(B, T, 10\), got"):
        head(torch.randn(bad_shape))


@pytest.mark.parametrize(
    "args", [(0, 4), (8, 0), (8.0, 2), (8, 2.0), (True, 2), ("8", 2)], ids=repr
)
def test_head_rejects_sizes_that_are_not_positive_ints(args: tuple) -> None:
    with pytest.raises(ValueError, match=r"(n_embd|head_size) must be a positive int"):
        Head(*args)


def test_head_rejects_a_bad_block_size_or_dropout() -> None:
    with pytest.raises(ValueError, match=r"block_size must be a positive int"):
        Head(8, 2, block_size=0)
    for p in (-0.1, 1.0, "0.1"):
        with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
            Head(8, 2, dropout=p)


def test_head_with_block_size_registers_the_mask_as_a_buffer() -> None:
    torch.manual_seed(4)
    with_buffer = Head(8, 4, block_size=6)
    without = Head(8, 4)
    without.load_state_dict(with_buffer.state_dict())  # the buffer is not saved: same keys
    assert "mask" in dict(with_buffer.named_buffers())
    assert "mask" not in with_buffer.state_dict()
    assert torch.equal(with_buffer.mask, torch.ones(6, 6).tril().bool())
    for T in (1, 4, 6):  # shorter sequences use the top-left corner of the buffer
        x = torch.randn(2, T, 8)
        assert_close(with_buffer(x), without(x))
    with pytest.raises(ValueError, match=r"longer than block_size=6"):
        with_buffer(torch.randn(1, 7, 8))
    assert Head(8, 4, causal=False, block_size=6).mask is None  # no mask to store


def test_head_dropout_acts_in_training_only() -> None:
    torch.manual_seed(5)
    head = Head(8, 4, dropout=0.5)
    x = torch.randn(2, 6, 8)
    plain = Head(8, 4)
    plain.load_state_dict(head.state_dict())
    head.eval()
    assert_close(head(x), plain(x))  # evaluation: no dropout at all
    head.train()
    out = head(x)
    w = head.last_weights
    dropped = w == 0
    assert dropped[plain.last_weights > 0].any(), "some visible weights must be dropped"
    # the surviving weights are the undropped ones scaled by 1 / (1 - p) = 2
    assert_close(w[~dropped], 2 * plain.last_weights[~dropped])
    assert_close(out, w @ head.value(x))


def test_sdpa_dropout_probability_is_checked() -> None:
    q = k = v = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"dropout_p must be a probability"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)
