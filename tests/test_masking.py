"""Causal masks: the three forms agree with each other and with PyTorch, and enforce causality."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from helpers.masking import additive_causal_mask, apply_causal_mask, causal_mask


def test_causal_mask_small_case_by_hand() -> None:
    expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    assert torch.equal(causal_mask(3), expected)
    inf = float("-inf")
    assert torch.equal(
        additive_causal_mask(3), torch.tensor([[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, 0.0]])
    )


@pytest.mark.parametrize("T", [1, 2, 7, 32])
def test_mask_forms_describe_the_same_pattern(T: int) -> None:
    allowed = causal_mask(T)
    assert allowed.dtype == torch.bool and allowed.shape == (T, T)
    # Query i sees key j exactly when j <= i.
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(allowed, j <= i)
    # The "True = hidden" convention of masked_fill recipes and nn.MultiheadAttention is the
    # complement.
    assert torch.equal(~allowed, torch.triu(torch.ones(T, T), diagonal=1).bool())
    additive = additive_causal_mask(T)
    assert torch.equal(additive == 0, allowed)
    assert torch.isneginf(additive[~allowed]).all()


def test_additive_mask_dtype() -> None:
    assert additive_causal_mask(4, dtype=torch.float64).dtype == torch.float64
    assert torch.isneginf(additive_causal_mask(4, dtype=torch.float16)).sum() == 6


@pytest.mark.parametrize("seed", range(4))
def test_three_ways_of_masking_give_identical_weights(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    B, T = (int(n) for n in torch.randint(1, 10, (2,), generator=g))
    scores = torch.randn(B, 2, T, T, generator=g)
    additive = torch.softmax(scores + additive_causal_mask(T), dim=-1)
    filled = torch.softmax(apply_causal_mask(scores), dim=-1)
    by_hand = torch.softmax(scores.masked_fill(~causal_mask(T), float("-inf")), dim=-1)
    assert_close(filled, additive)
    assert_close(by_hand, additive)
    assert torch.equal(additive.triu(diagonal=1), torch.zeros_like(additive))
    for t in range(T):  # row t is the softmax of the scores of keys 0..t alone
        assert_close(additive[..., t, : t + 1], torch.softmax(scores[..., t, : t + 1], dim=-1))


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_pytorch_sdpa(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    B, T, d = 2, int(torch.randint(1, 12, (1,), generator=g)), 8
    q, k, v = (torch.randn(B, T, d, generator=g) for _ in range(3))
    weights = torch.softmax(apply_causal_mask(q @ k.transpose(-2, -1) / math.sqrt(d)), dim=-1)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(weights @ v, expected)
    assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T)), expected)
    assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive_causal_mask(T)), expected
    )


def test_agrees_with_multihead_attention_with_the_inverted_convention() -> None:
    torch.manual_seed(0)
    T, d = 6, 4
    mha = nn.MultiheadAttention(d, num_heads=1, batch_first=True)
    x = torch.randn(1, T, d)
    _, weights = mha(x, x, x, attn_mask=~causal_mask(T))
    w_q, w_k, _ = mha.in_proj_weight.chunk(3)
    b_q, b_k, _ = mha.in_proj_bias.chunk(3)
    q, k = x @ w_q.T + b_q, x @ w_k.T + b_k
    ours = torch.softmax(apply_causal_mask(q @ k.transpose(-2, -1) / math.sqrt(d)), dim=-1)
    assert_close(weights, ours)


def test_future_tokens_do_not_change_earlier_outputs() -> None:
    torch.manual_seed(1)
    T, d = 8, 5
    x = torch.randn(1, T, d)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(apply_causal_mask(x @ x.transpose(-2, -1)), dim=-1) @ x

    for t in range(T - 1):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn(1, T - t - 1, d)
        assert_close(attend(changed)[:, : t + 1], attend(x)[:, : t + 1])
        assert not torch.allclose(attend(changed)[:, t + 1 :], attend(x)[:, t + 1 :])


def test_apply_causal_mask_keeps_the_past_and_leading_dims() -> None:
    scores = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).view(2, 3, 4, 4)
    masked = apply_causal_mask(scores)
    assert masked.shape == scores.shape
    allowed = causal_mask(4)
    assert torch.equal(masked[..., allowed], scores[..., allowed])
    assert torch.isneginf(masked[..., ~allowed]).all()
    assert torch.equal(scores, torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).view(2, 3, 4, 4)), (
        "input modified"
    )


@pytest.mark.parametrize("fn", [causal_mask, additive_causal_mask], ids=lambda f: f.__name__)
@pytest.mark.parametrize("T", [0, -1, 3.0, "4", True, None])
def test_sizes_must_be_positive_ints(fn, T) -> None:
    with pytest.raises(ValueError, match=r"T must be a positive int \(the number of tokens\), got"):
        fn(T)


def test_numpy_integer_sizes_are_accepted() -> None:
    assert torch.equal(causal_mask(np.int64(3)), causal_mask(3))
    assert torch.equal(additive_causal_mask(np.int32(3)), additive_causal_mask(3))


@pytest.mark.parametrize("shape", [(3, 4), (2, 5, 3), (4,)])
def test_apply_causal_mask_needs_square_scores(shape) -> None:
    with pytest.raises(
        ValueError, match=r"a causal mask needs square \(\.\.\., T, T\) scores, got shape"
    ):
        apply_causal_mask(torch.zeros(shape))


def test_rectangular_mask_for_new_tokens_after_cached_ones() -> None:
    # 2 new queries after 3 cached keys: query i sits at position 3 + i.
    expected = torch.tensor(
        [
            [True, True, True, True, False],
            [True, True, True, True, True],
        ]
    )
    assert torch.equal(causal_mask(2, T_past=3), expected)
    # The last T rows of the full square mask, whatever the split between past and new.
    for T_past in range(5):
        assert torch.equal(causal_mask(5 - T_past, T_past=T_past), causal_mask(5)[T_past:])


@pytest.mark.parametrize("T_past", [-1, 1.0, True])
def test_T_past_must_be_a_non_negative_int(T_past) -> None:
    with pytest.raises(ValueError, match=r"T_past must be an int >= 0"):
        causal_mask(3, T_past=T_past)
